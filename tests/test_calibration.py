"""Every compute constant of sim/calibration.py re-derived from the table it names.

The kernel constants are fitted on the H100 tables (validation/compute/h100-sxm-80gb/); a change
to a table or to a formula that moves a fit fails here until calibration.py is updated with it.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from sim import calibration as cal
from sim.compute import tables
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
