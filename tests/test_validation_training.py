"""The training-step model against published runs, held to validation/budgets.toml [training];
and the stack-efficiency constants re-fitted from the calibration split."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.calibration import STACK_EFFICIENCY, TPU_DCN_LAYER_STEP_S
from sim.validate import check_budgets, fit_dcn_layer_step_s, fit_stack_efficiency, load_budgets
from sim.validate.predictors import TrainingPredictor

DATA = Path(__file__).resolve().parent.parent / "validation"


@pytest.mark.slow
@pytest.mark.xdist_group("training_report")
def test_training_within_budget(training_report) -> None:
    report = training_report        # validate_training(DATA / "training", TrainingPredictor()), played once
    assert check_budgets(report, load_budgets(DATA / "budgets.toml")) == []
    for fam in ("A100", "H100", "TPU"):
        s = report.summary("test", fam)
        print(f"\n{fam} test: {s.runs} runs, median {s.step_median_abs_pct:.1f}%, "
              f"p90 {s.step_p90_abs_pct:.1f}%")
    # Every (family, framework) group of the test split is reported on its own.
    assert {(s.family, s.framework) for s in report.stacks if s.split == "test"} >= {
        ("A100", "megatron"), ("A100", "llm-foundry"), ("H100", "megatron-te"), ("TPU", "maxtext")}


@pytest.mark.slow
def test_stack_efficiency_is_the_calibration_fit() -> None:
    fitted = fit_stack_efficiency(DATA / "training", lambda t: TrainingPredictor(t))
    assert set(fitted) == set(STACK_EFFICIENCY)
    for key, value in fitted.items():
        assert value == pytest.approx(STACK_EFFICIENCY[key], abs=0.005), key


@pytest.mark.slow
def test_dcn_layer_step_is_the_calibration_fit() -> None:
    """The DCN reduction's per-layer ring step (``TPU_DCN_LAYER_STEP_S``) is the least-squares
    fit on the calibration split's multi-slice runs, with the stack efficiencies as they are
    (which ``test_stack_efficiency_is_the_calibration_fit`` re-derives with it in place)."""
    fitted = fit_dcn_layer_step_s(DATA / "training", lambda: TrainingPredictor(dict(STACK_EFFICIENCY)))
    assert fitted == pytest.approx(TPU_DCN_LAYER_STEP_S, abs=2e-5)
