"""The training-step model against published runs, held to validation/budgets.toml [training];
and the training-efficiency constants re-fitted from the calibration split."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.calibration import TRAINING_EFFICIENCY
from sim.training import TrainingPredictor
from sim.validate import check_budgets, load_budgets
from sim.validate_training import fit_training_efficiency, validate_training

DATA = Path(__file__).resolve().parent.parent / "validation"


@pytest.mark.slow
def test_training_within_budget() -> None:
    report = validate_training(DATA / "training", TrainingPredictor())
    assert check_budgets(report, load_budgets(DATA / "budgets.toml")) == []
    for fam in ("A100", "H100", "TPU"):
        s = report.summary("test", fam)
        print(f"\n{fam} test: {s.runs} runs, median {s.step_median_abs_pct:.1f}%, "
              f"p90 {s.step_p90_abs_pct:.1f}%")


@pytest.mark.slow
def test_training_efficiency_is_the_calibration_fit() -> None:
    fitted = fit_training_efficiency(DATA / "training", lambda t: TrainingPredictor(t))
    assert fitted == pytest.approx(TRAINING_EFFICIENCY, abs=0.005)
