"""Every compute constant of sim/calibration.py re-derived from the table it names.

The kernel constants are fitted on the H100 tables (validation/compute/h100-sxm-80gb/); a change
to a table or to a formula that moves a fit fails here until calibration.py is updated with it.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from sim import calibration as cal
from sim.compute import kernels, tables
from sim.compute.model import flash_params_of
from sim.hardware import CATALOGUE

H100 = Path(__file__).resolve().parent.parent / "validation" / "compute" / "h100-sxm-80gb"


@pytest.fixture(scope="module")
def cases() -> list[tables.KernelCase]:
    return tables.load_cases(H100)


@pytest.fixture(scope="module")
def chip():
    return CATALOGUE["H100-SXM"]


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_gemm_constants_are_the_h100_fit(cases, chip, dtype) -> None:
    peak = chip.bf16_flops if dtype == "bf16" else chip.fp8_flops
    fitted = tables.fit_gemm(cases, dtype, peak, chip.sms, chip.hbm_Bps)
    committed = cal.GEMM_HOPPER[dtype]
    assert fitted.efficiency == pytest.approx(committed.efficiency, abs=0.002)
    assert fitted.tile_s == pytest.approx(committed.tile_s, abs=0.05e-6)
    assert fitted.k0 == pytest.approx(committed.k0, abs=2)
    assert fitted.call_s == pytest.approx(committed.call_s, abs=0.2e-6)


@pytest.mark.parametrize("family", ["cudnn", "flash-attention-2"])
@pytest.mark.parametrize("passname", ["fwd", "bwd"])
def test_attention_constants_are_the_h100_fit(cases, chip, family, passname) -> None:
    fitted = tables.fit_attention(cases, family, passname, chip.bf16_flops, chip.sms, chip.hbm_Bps)
    committed = cal.ATTENTION_HOPPER[(family, passname)]
    for field in ("efficiency", "d256", "tail", "mem"):
        assert getattr(fitted, field) == pytest.approx(getattr(committed, field), abs=0.002), field


@pytest.mark.parametrize("family", ["cudnn", "flash-attention-2"])
@pytest.mark.parametrize("passname", ["fwd", "bwd"])
def test_head_dim_64_factor_is_the_h100_fit(chip, family, passname) -> None:
    committed = cal.ATTENTION_HOPPER[(family, passname)]
    fitted = tables.fit_attention_d64(tables.load_head_dim_cases(H100), family, passname, committed,
                                      chip.bf16_flops, chip.sms, chip.hbm_Bps)
    assert fitted == pytest.approx(committed.d64, abs=0.002)
    assert 0.5 < committed.d64 <= 1.0               # a narrower head runs no faster per FLOP


def test_memory_and_optimizer_fractions_are_the_h100_fit(cases, chip) -> None:
    assert tables.fit_memory_fractions(cases, chip.hbm_Bps) == cal.MEMORY_FRACTION
    assert tables.fit_optimizer_fractions(cases, chip.hbm_Bps) == cal.OPTIMIZER_FRACTION


def test_fa3_speedup_is_the_median_ratio_of_the_cited_figures() -> None:
    for passname, (fa3, cudnn) in cal.FA3_VS_CUDNN_TFLOPS.items():
        ratio = statistics.median(a / b for a, b in zip(fa3, cudnn, strict=True))
        assert ratio == pytest.approx(cal.FA3_SPEEDUP_VS_CUDNN[passname], abs=0.001)


def test_fitted_efficiencies_are_physical() -> None:
    """Sustained rates are fractions of the peak, below the MAMF best shape (80.3% bf16, 70.9%
    fp8 on H100: validation/compute_and_tpu.md B3)."""
    assert 0.5 < cal.GEMM_HOPPER["bf16"].efficiency < 0.803
    assert 0.5 < cal.GEMM_HOPPER["fp8"].efficiency < 0.709 + 0.01
    for p in cal.ATTENTION_HOPPER.values():
        assert 0.2 < p.efficiency < 0.8
    assert all(0 < f <= 1 for f in cal.MEMORY_FRACTION.values())
    assert all(0.5 < v < 1.2 for v in cal.STACK_EFFICIENCY.values())


def test_tpu_gemm_curve_is_the_tpu7x_fit() -> None:
    import csv

    path = H100.parent / "gemm.csv"
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["chip"] == "TPU7x-core"]
    points = [(2.0 * int(r["m"]) * int(r["n"]) * int(r["k"]), float(r["tflops"]) * 1e12) for r in rows]
    e_max, t_ramp = tables.fit_gemm_curve(points, cal.TPU7X_CORE_PEAK_FLOPS)
    assert e_max == pytest.approx(cal.TPU_GEMM_E_MAX, abs=0.005)
    assert t_ramp == pytest.approx(7.7e-6, abs=0.1e-6)     # the H100 ramp (8.4 us) is used instead


# ----------------------------------------------------------------------------- Blackwell
# The Blackwell constants are fitted on published B200, GB200 and GB300 tables (validation/compute/b200/,
# gb200/, gb300/), on the sources sim.calibration.BLACKWELL_FIT_SOURCES names per kernel kind.

B200_DIR = H100.parent / "b200"
GB200_DIR = H100.parent / "gb200"


def _fit_rows(folder: Path, kind: str) -> list[tables.KernelCase]:
    return [c for c in tables.load_cases(folder) if c.source in cal.BLACKWELL_FIT_SOURCES[kind]]


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_blackwell_gemm_constants_are_the_b200_fit(dtype) -> None:
    chip = CATALOGUE["B200"]
    rows = tables.same_shape_rows([c for c in _fit_rows(B200_DIR, "gemm") if c.source == "xla-sm100"])
    assert len({(c.m, c.n, c.k) for c in rows}) == 11
    peak = chip.bf16_flops if dtype == "bf16" else chip.fp8_flops
    fitted = tables.fit_gemm(rows, dtype, peak, chip.sms, chip.hbm_Bps, min_s=0.0)
    committed = cal.GEMM_BLACKWELL[dtype]
    assert fitted.efficiency == pytest.approx(committed.efficiency, abs=0.002)
    assert fitted.tile_s == pytest.approx(committed.tile_s, abs=0.05e-6)
    assert fitted.k0 == pytest.approx(committed.k0, abs=2)
    assert fitted.call_s == pytest.approx(committed.call_s, abs=0.2e-6)


def test_blackwell_block_scaled_gemm_constants() -> None:
    """MXFP8 is assumed to run as per-tensor FP8; NVFP4's efficiency is fitted on the cuBLASLt
    MXFP4 rows of at least 20 us, with the fp8 fit's tile and call terms."""
    chip = CATALOGUE["B200"]
    assert cal.GEMM_BLACKWELL["mxfp8"] == cal.GEMM_BLACKWELL["fp8"]
    rows = [c for c in _fit_rows(B200_DIR, "gemm") if c.key == "nvfp4"]
    fitted = tables.fit_gemm_efficiency(rows, "nvfp4", chip.fp4_flops, chip.sms, chip.hbm_Bps,
                                        cal.GEMM_BLACKWELL["fp8"])
    assert fitted == cal.GEMM_BLACKWELL["nvfp4"]


@pytest.mark.parametrize("family, folder, chip_name", [("cudnn", GB200_DIR, "GB200"),
                                                       ("flash-attention-2", B200_DIR, "B200")])
@pytest.mark.parametrize("passname", ["fwd", "bwd"])
def test_blackwell_attention_constants_are_the_fit(family, folder, chip_name, passname) -> None:
    chip = CATALOGUE[chip_name]
    hopper = cal.ATTENTION_HOPPER[(family, passname)]
    fitted = tables.fit_attention(_fit_rows(folder, family), family, passname, chip.bf16_flops,
                                  chip.sms, chip.hbm_Bps,
                                  fixed={"d256": hopper.d256, "tail": hopper.tail}, min_seq=2048)
    committed = cal.ATTENTION_BLACKWELL[(family, passname)]
    for field in ("efficiency", "d256", "tail", "mem"):
        assert getattr(fitted, field) == pytest.approx(getattr(committed, field), abs=0.002), field


GB300_DIR = H100.parent / "gb300"


@pytest.mark.parametrize("passname", ["fwd", "bwd"])
def test_blackwell_ultra_attention_constants_are_the_gb300_fit(passname) -> None:
    """cuDNN on Blackwell Ultra is fitted on the GB300 cuDNN 9.23 sweep, as GB200's on its own; it
    is faster than GB200's at the same peak (the doubled SFU exponential rate); FA2 keeps B200's."""
    chip = CATALOGUE["GB300"]
    hopper = cal.ATTENTION_HOPPER[("cudnn", passname)]
    rows = [c for c in _fit_rows(GB300_DIR, "cudnn") if c.source == "cudnn-fe-gb300-llama3.1-cudnn9.23"]
    assert len([c for c in rows if c.key.startswith("cudnn ")]) == 20   # 2k-32k, 2 masks, 2 passes
    fitted = tables.fit_attention(rows, "cudnn", passname, chip.bf16_flops, chip.sms, chip.hbm_Bps,
                                  fixed={"d256": hopper.d256, "tail": hopper.tail}, min_seq=2048)
    committed = cal.ATTENTION_BLACKWELL_ULTRA[("cudnn", passname)]
    for field in ("efficiency", "d256", "tail", "mem"):
        assert getattr(fitted, field) == pytest.approx(getattr(committed, field), abs=0.002), field
    assert committed.efficiency > cal.ATTENTION_BLACKWELL[("cudnn", passname)].efficiency * 1.1
    fa2 = ("flash-attention-2", passname)
    assert cal.ATTENTION_BLACKWELL_ULTRA[fa2] == cal.ATTENTION_BLACKWELL[fa2]


def test_blackwell_ultra_chips_run_the_ultra_attention_fit() -> None:
    for name in ("B300", "GB300"):
        assert CATALOGUE[name].blackwell_ultra
        assert flash_params_of(CATALOGUE[name], "cudnn", "fwd") == cal.ATTENTION_BLACKWELL_ULTRA[("cudnn", "fwd")]
    for name in ("B200", "GB200", "H100-SXM"):
        assert not CATALOGUE[name].blackwell_ultra
    assert flash_params_of(CATALOGUE["GB200"], "cudnn", "fwd") == cal.ATTENTION_BLACKWELL[("cudnn", "fwd")]


def test_fa4_speedup_is_the_median_ratio_of_the_gb200_table() -> None:
    """The cited TFLOP/s pairs are the table's rows (4k-32k, causal then non-causal), and the
    speedup is their median ratio."""
    rows = [c for c in tables.load_cases(GB200_DIR) if c.source == "cudnn-fe-gb200-llama3.1-cudnn9.23"]
    for passname, (fa4, cudnn) in cal.FA4_VS_CUDNN_TFLOPS.items():
        for family, cited in (("flash-attention-4", fa4), ("cudnn", cudnn)):
            table = sorted(((not c.attention.causal, c.attention.seq_k), c)
                           for c in rows if c.key == f"{family} {passname}" and c.attention.seq_k >= 4096)
            got = [kernels.attention_flops(c.attention, passname == "bwd") / c.time_s / 1e12 for _, c in table]
            assert got == pytest.approx(cited, rel=0.01), (family, passname)
        ratio = statistics.median(a / b for a, b in zip(fa4, cudnn, strict=True))
        assert ratio == pytest.approx(cal.FA4_SPEEDUP_VS_CUDNN[passname], abs=0.001)


def test_blackwell_mamf_ratios_are_the_cited_table() -> None:
    """MAMF_BLACKWELL is ml-engineering's MAMF table (validation/compute_and_tpu.md B3)."""
    text = (H100.parent.parent / "compute_and_tpu.md").read_text(encoding="utf-8")
    assert "| NVIDIA B200 SXM  | 1745.0 |   2250 |      77.6% |" in text
    assert "| NVIDIA GB200 SXM | 1822.0 |   2500 |      72.9% |" in text
    assert "B200 3432.5 (76.3%)" in text and "GB200 3615.6 (72.3%)" in text
    assert cal.MAMF_BLACKWELL["B200"] == {"bf16": 0.776, "fp8": 0.763}
    assert cal.MAMF_BLACKWELL["GB200"] == {"bf16": 0.729, "fp8": 0.723}
    assert "| NVIDIA B300 SXM  | 1769.0 |   2250 |      78.6% |" in text and "B300 3353.3 (74.5%)" in text
    assert cal.MAMF_BLACKWELL["B300"] == {"bf16": 0.786, "fp8": 0.745}
