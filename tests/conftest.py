"""Shared fixtures: small clusters and the path of the shared reference data."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"     # copies of the shared reference files tests use


@pytest.fixture(scope="session")
def specs_yaml() -> dict:
    """specs.yaml (a copy of ../shared/reference/specs.yaml), the sourced numbers the catalogue
    must agree with."""
    import yaml

    return yaml.safe_load((DATA / "specs.yaml").read_text())


@pytest.fixture(scope="session")
def training_report():
    """``validate_training`` over validation/training/ with the calibrated predictor, played once
    per session (~100 s): the training budget check and the golden ``validate --suite training``
    read the same report. Under pytest-xdist a session is one worker, so the tests that use it
    carry ``xdist_group("training_report")`` and CI runs the slow lane with ``--dist loadgroup``."""
    from sim.progress import available_cores
    from sim.validate import validate_training
    from sim.validate.predictors import TrainingPredictor

    return validate_training(REPO / "validation" / "training", TrainingPredictor(),
                             workers=available_cores())


@pytest.fixture
def shared_training_report(training_report, monkeypatch: pytest.MonkeyPatch) -> None:
    """``clustersim validate --suite training`` answered from *training_report*: the command's
    call ``validate_training(<repo>/validation/training, TrainingPredictor())`` returns the
    session's report; any other call (another folder, predictor or mapping) runs as before."""
    import sim.validate.cli as validate_cli
    from sim.validate.predictors import TrainingPredictor

    play = validate_cli.validate_training
    bundled = (REPO / "validation" / "training").resolve()

    def once(data_dir: Path, predict: object, mapped: object = None, workers: int = 1):
        if mapped is None and Path(data_dir).resolve() == bundled and predict == TrainingPredictor():
            return training_report
        return play(data_dir, predict, mapped, workers)

    monkeypatch.setattr(validate_cli, "validate_training", once)
