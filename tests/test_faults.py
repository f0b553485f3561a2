"""Failures over days: Poisson counts, Young/Daly, lost work, OCS vs node swap, validation budget."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

from sim.config import FailuresConfig, scenario_from_dict
from sim.errors import ConfigError
from sim.faults import simulate_failures, young_daly_interval_s
from sim.hardware import CATALOGUE, GPU_FAILURE_CAUSES
from sim.validate import check_failure_budgets, load_budgets, validate_failures

H100 = CATALOGUE["H100-SXM"]
DATA = Path(__file__).resolve().parent.parent / "validation"


def test_catalogue_rates_reproduce_the_llama3_counts() -> None:
    per_hour = sum(c.per_chip_hour for c in GPU_FAILURE_CAUSES) * 16384
    assert per_hour * 54 * 24 == pytest.approx(419)
    assert 1 / per_hour == pytest.approx(3.09, abs=0.01)      # FACTS.md: job MTBF 3.09 h


def test_interruption_count_is_poisson_over_the_horizon() -> None:
    cfg = FailuresConfig(horizon_days=10, checkpoint_write_s=10)
    s = simulate_failures(cfg, H100, 4096, seed=1, runs=200)
    lam = sum(c.per_chip_hour for c in GPU_FAILURE_CAUSES) * 4096 * 240
    mean, lo, hi = s.interruptions()
    assert mean == pytest.approx(lam, rel=0.05)
    assert lo <= stats.poisson.ppf(0.5, lam) <= hi


def test_young_daly_interval() -> None:
    # FACTS.md derived example: MTBF 11,135 s, C = 60 s -> ~1,156 s.
    assert young_daly_interval_s(11135, 60) == pytest.approx(1156, abs=1)


def test_goodput_without_failures_is_the_checkpoint_duty_cycle() -> None:
    cfg = FailuresConfig(horizon_days=5, checkpoint_interval_min=10, checkpoint_write_s=60,
                         rate_scale=1e-12)
    s = simulate_failures(cfg, H100, 8, seed=0, runs=3)
    assert s.goodput()[0] == pytest.approx(600 / 660, rel=1e-3)


def test_goodput_falls_with_slower_recovery_and_ocs_swaps_help() -> None:
    base = dict(horizon_days=20, checkpoint_write_s=30, detect_s=60, restart_s=300)
    node = simulate_failures(FailuresConfig(**base, swap_s=600), H100, 8192, seed=0, runs=50)
    ocs = simulate_failures(FailuresConfig(**base, swap_s=10), H100, 8192, seed=0, runs=50)
    assert ocs.goodput()[0] > node.goodput()[0]
    assert ocs.interruptions() == node.interruptions()       # same seeds, same failures


def test_deterministic_for_a_seed() -> None:
    cfg = FailuresConfig(horizon_days=3, checkpoint_write_s=30)
    a = simulate_failures(cfg, H100, 1024, seed=7, runs=5)
    b = simulate_failures(cfg, H100, 1024, seed=7, runs=5)
    assert a == b


@pytest.mark.parametrize("failures, match", [
    ({"checkpoint_write_s": -1}, r"failures.checkpoint_write_s: must be >= 0.0, got -1"),
    ({"horizon_days": 0}, r"failures.horizon_days: must be > 0.0, got 0"),
    ({"checkpoint_interval_min": 1, "checkpoint_write_s": 120},
     r"failures.checkpoint_interval_min: 1.0 min is not longer than checkpoint_write_s = 120"),
    ({"rate_scale": -2}, r"failures.rate_scale: must be >= 0.0"),
])
def test_bad_failure_config(failures: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        scenario_from_dict({"model": "llama3-8b", "failures": failures}, "f.yaml")


def test_llama3_validation_within_budget() -> None:
    cases = validate_failures(DATA / "failures")
    assert check_failure_budgets(cases, load_budgets(DATA / "budgets.toml")["failures"]) == []
    by = {c.case: c for c in cases}
    assert by["llama3-effective-time"].predicted > 0.90
    assert math.isfinite(by["opt-hardware-restarts"].predicted)


def test_run_json_interruptions_is_the_count(capsys: pytest.CaptureFixture[str]) -> None:
    """DESIGN.md: ``interruptions`` is the count (scripts compare it with a number); the per-cause
    split is ``interruptions_by_cause`` and adds up to it."""
    import json

    from sim.cli import main

    assert main(["run", "scenarios/llama3-70b-1024xh100-failures.yaml", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out["interruptions"], float) and out["interruptions"] > 0
    assert sum(out["interruptions_by_cause"].values()) == pytest.approx(out["interruptions"])
