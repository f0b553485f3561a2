"""Re-run the joint fit of ATTENTION_EFFICIENCY and TRAINING_EFFICIENCY on the calibration split
(about 10 minutes on 2 cores, so on demand, not in CI; tests/test_validation_training.py re-fits
the training efficiency at the committed attention values in every CI run).

Run: ``python -m pytest benchmarks/test_calibration_fit.py -m benchmark -s``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.calibration import ATTENTION_EFFICIENCY, TRAINING_EFFICIENCY
from sim.training import TrainingPredictor
from sim.validate_training import fit_attention_efficiency

DATA = Path(__file__).resolve().parent.parent / "validation" / "training"


@pytest.mark.benchmark
def test_attention_and_training_efficiency_are_the_calibration_fit() -> None:
    att, train = fit_attention_efficiency(
        DATA, lambda t, a: TrainingPredictor(t, a),
        {"ampere": [0.35, 0.40, 0.45, 0.50, 0.55], "hopper": [0.20, 0.25, 0.30, 0.35, 0.40]})
    print(f"\nfit: attention {att}, training {train}")
    assert att["ampere"] == ATTENTION_EFFICIENCY["ampere"]
    assert att["hopper"] == ATTENTION_EFFICIENCY["hopper"]
    for fam in ("A100", "H100"):
        assert train[fam] == pytest.approx(TRAINING_EFFICIENCY[fam], abs=0.005)
