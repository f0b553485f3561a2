"""Blackwell kernels from published measurements (issue 27, item 3): the tables in
validation/compute/b200/ and gb200/ as read, the model's use of the Blackwell fits (no Hopper
factor where a measurement exists), the GEMM entry point by dtype name, and the compute suite's
report of the Blackwell rows."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim import calibration as cal
from sim.compute import tables
from sim.compute.kernels import AttentionShape, attention_flops, attention_time_s, gemm_time_s
from sim.compute.model import ComputeModel, flash_params_of, gemm_params_of
from sim.errors import ConfigError
from sim.hardware import CATALOGUE
from sim.software import FRAMEWORKS, resolve_software
from sim.validate import validate_compute

COMPUTE = Path(__file__).resolve().parent.parent / "validation" / "compute"
B200, GB200, H100 = CATALOGUE["B200"], CATALOGUE["GB200"], CATALOGUE["H100-SXM"]
TE = FRAMEWORKS["megatron-te"]


def _model(chip, attention: str = "cudnn") -> ComputeModel:
    return ComputeModel(chip, "bf16", resolve_software("megatron-te", attention, chip))


# ----------------------------------------------------------------------------- the tables

@pytest.mark.parametrize("path, rows", [("b200/gemm_shapes.csv", 252), ("b200/gemm_fp4.csv", 7),
                                        ("b200/attention.csv", 36), ("gb200/attention.csv", 72)])
def test_tables_hold_the_rows_their_readme_names(path, rows) -> None:
    with (COMPUTE / path).open(encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert len(table) == rows
    assert all(r["source"] for r in table)
    assert (COMPUTE / "README.md").read_text(encoding="utf-8").count(f"`{path}`") >= 1


def test_every_row_states_time_and_rate_consistently() -> None:
    """time_us and tflops agree under the FLOP count the README states (2mnk; 4bhs^2d, halved
    when causal, x2.5 backward), to the sources' rounding."""
    for path in sorted(COMPUTE.glob("*b200/*.csv")):
        with path.open(encoding="utf-8") as f:
            for r in csv.DictReader(f):
                if "m" in r:
                    flops = 2.0 * int(r["m"]) * int(r["n"]) * int(r["k"])
                else:
                    shape = AttentionShape(int(r["batch"]), int(r["heads"]), int(r["kv_heads"]),
                                           int(r["seq"]), int(r["seq"]), int(r["head_dim"]),
                                           causal=r["causal"] == "1")
                    flops = attention_flops(shape, r["pass"] == "bwd")
                rate = flops / (float(r["time_us"]) * 1e-6) / 1e12
                assert rate == pytest.approx(float(r["tflops"]), rel=0.06), (path.name, r)


def test_mxfp4_rows_stand_for_nvfp4() -> None:
    cases = [c for c in tables.load_cases(COMPUTE / "b200") if c.table == "gemm_fp4.csv"]
    assert cases and all(c.key == "nvfp4" and c.label.startswith("mxfp4") for c in cases)


# ----------------------------------------------------------------------------- the model

def test_b200_gemms_run_the_blackwell_fit_with_no_hopper_factor() -> None:
    cm = _model(B200)
    for dtype in ("bf16", "fp8", "mxfp8", "nvfp4"):
        assert cm.gemm[dtype] == cal.GEMM_BLACKWELL[dtype]
        expect = gemm_time_s(8192, 28672, 8192, tables.DTYPE_BYTES[dtype], B200.peak_flops(dtype),
                             B200.sms, B200.hbm_Bps, cal.GEMM_BLACKWELL[dtype])
        assert cm.gemm_s(8192, 28672, 8192, dtype) == expect


def test_gb200_gemms_take_the_b200_fit_at_the_ratio_of_best_shape_rates() -> None:
    params = gemm_params_of(GB200)
    assert params["bf16"].efficiency == pytest.approx(0.78 * 0.729 / 0.776)
    assert params["nvfp4"].efficiency == pytest.approx(0.536 * 0.723 / 0.763)
    # 4% more TFLOP/s than a B200 on a large GEMM, not the 11% its peak says
    big = (8192, 28672, 8192)
    assert _model(B200).gemm_s(*big) / _model(GB200).gemm_s(*big) == pytest.approx(1.045, abs=0.01)


def test_gemm_dtype_names_and_peaks() -> None:
    cm = _model(B200)
    m, n, k = 8192, 8192, 8192
    assert cm.gemm_s(m, n, k, fp8=True) == cm.gemm_s(m, n, k, "fp8")
    assert cm.gemm_s(m, n, k, "mxfp8") == cm.gemm_s(m, n, k, "fp8")     # assumed: same kernel rate
    assert cm.gemm_s(m, n, k, "nvfp4") < cm.gemm_s(m, n, k, "fp8") < cm.gemm_s(m, n, k, "bf16")
    assert B200.peak_flops("nvfp4") == 9000e12 and GB200.peak_flops("nvfp4") == 10000e12
    assert B200.peak_flops("mxfp8") == B200.fp8_flops


def test_hopper_gemms_are_unchanged_and_refuse_blackwell_formats() -> None:
    cm = _model(H100)
    assert cm.gemm_s(4096, 4096, 4096) == gemm_time_s(4096, 4096, 4096, 2.0, H100.bf16_flops, H100.sms,
                                                      H100.hbm_Bps, cal.GEMM_HOPPER["bf16"])
    assert cm.gemm_s(4096, 4096, 4096, fp8=True) == gemm_time_s(
        4096, 4096, 4096, 1.0, H100.fp8_flops, H100.sms, H100.hbm_Bps, cal.GEMM_HOPPER["fp8"])
    with pytest.raises(ConfigError, match="mxfp8 does not run on H100-SXM"):
        cm.gemm_s(4096, 4096, 4096, "mxfp8")
    with pytest.raises(ConfigError, match="nvfp4 has no tensor-core path on H100-SXM"):
        cm.gemm_s(4096, 4096, 4096, "nvfp4")
    with pytest.raises(ConfigError, match="got 'fp6'"):
        cm.gemm_s(4096, 4096, 4096, "fp6")


def test_blackwell_attention_runs_its_own_fit() -> None:
    shape = AttentionShape(1, 8, 1, 8192, 8192, 128)
    for family in ("cudnn", "flash-attention-2"):
        for passname in ("fwd", "bwd"):
            p = cal.ATTENTION_BLACKWELL[(family, passname)]
            assert flash_params_of(B200, family, passname) == p
            expect = attention_time_s(shape, passname == "bwd", p, B200.bf16_flops, B200.sms, B200.hbm_Bps)
            assert _model(B200, family).attention_s(shape, passname) == expect
    fa4 = flash_params_of(GB200, "flash-attention-4", "bwd")
    assert fa4.efficiency == pytest.approx(cal.ATTENTION_BLACKWELL[("cudnn", "bwd")].efficiency
                                           * cal.FA4_SPEEDUP_VS_CUDNN["bwd"])


def test_flash_attention_4_is_a_blackwell_kernel() -> None:
    assert resolve_software("megatron-te", "flash-attention-4", B200).attention == "flash-attention-4"
    with pytest.raises(ConfigError, match="flash-attention-4 is a Blackwell kernel"):
        resolve_software("megatron-te", "flash-attention-4", H100)


# ----------------------------------------------------------------------------- the report

@pytest.fixture(scope="module")
def report():
    return validate_compute(COMPUTE)


def test_compute_suite_reports_blackwell_fit_and_test_rows(report) -> None:
    rows, summaries = report
    split = {(r.gpu, r.split) for r in rows}
    assert {("b200", "fit"), ("b200", "test"), ("gb200", "fit"), ("gb200", "test")} <= split
    # the MAMF best shapes and PyTorch's cuDNN path on B200 are tests; FA2 on B200 is fitted
    assert {r.split for r in rows if "mamf" in r.label} == {"test"}
    assert {r.split for r in rows if r.gpu == "b200" and r.label.startswith("cudnn")} == {"test"}
    assert {r.split for r in rows if r.gpu == "b200" and r.label.startswith("flash-attention-2")} == {"fit"}
    groups = {(s.gpu, s.split, s.group): s for s in summaries}
    # the fitted GEMM shapes and the held-out GB200 cuDNN 9.17 rows (median |error|, %)
    assert groups[("b200", "fit", "gemm-bf16>=20us")].median_abs_pct < 3
    assert groups[("b200", "fit", "gemm-fp8>=20us")].median_abs_pct < 5
    assert groups[("gb200", "test", "attention cudnn")].median_abs_pct < 10
    assert groups[("gb200", "fit", "attention fa4")].median_abs_pct < 8


def test_blackwell_tables_are_not_held_to_the_hopper_budgets(report) -> None:
    from sim.validate import check_compute_budgets, load_budgets

    budgets = load_budgets(COMPUTE.parent / "budgets.toml", ["compute"])["compute"]
    assert check_compute_budgets(report[1], budgets) == []
