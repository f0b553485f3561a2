"""Failures over days: rates by unit and fleet, recovery that follows the job, the strategies,
silent corruption, restart loops, spare pools, Weibull lifetimes, refusals, the validation suite."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from scipy import stats

from sim.cli import main
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.goodput import job_units_of, scenario_failures
from sim.recovery import recovery_costs, young_daly_interval_s
from sim.reliability import (
    FLEET_SOURCES,
    REFERENCE_CAUSES,
    REFERENCE_PER_1000_HOST_DAYS,
    cause_rates_per_hour,
    fleet_lognormal,
)
from sim.validate import check_failure_budgets, load_budgets, validate_failures

DATA = Path(__file__).resolve().parent.parent / "validation"


def scn(chips: int = 1024, topology: str = "dgx-h100", model: str = "llama3-70b",
        par: dict | None = None, **failures: object):
    raw = {"cluster": {"topology": topology, "chips": chips}, "model": model,
           "parallelism": par if par is not None else {"tp": 8, "pp": 4},
           "failures": {"horizon_days": 10, **failures}}
    return scenario_from_dict(raw, "f.yaml")


def test_reference_rates_reproduce_the_llama3_counts() -> None:
    per_hour = sum(cause_rates_per_hour(REFERENCE_CAUSES, 16384))
    assert per_hour * 54 * 24 == pytest.approx(419)
    assert 1 / per_hour == pytest.approx(3.09, abs=0.01)      # job MTBF 3.09 h
    assert REFERENCE_PER_1000_HOST_DAYS == pytest.approx(3.79, abs=0.01)


@pytest.mark.parametrize("family", ["H100", "A100"])
def test_fleet_factor_is_the_geometric_mean_and_spread_of_its_sources(family: str) -> None:
    logs = [math.log(r / REFERENCE_PER_1000_HOST_DAYS) for f, r, _ in FLEET_SOURCES if f == family]
    assert len(logs) >= 3
    mean = sum(logs) / len(logs)
    median, sigma = fleet_lognormal(family)
    assert median == pytest.approx(math.exp(mean))
    assert sigma == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in logs) / len(logs)))


def test_interruption_count_is_poisson_for_a_fixed_fleet() -> None:
    s = scenario_failures(scn(4096, fleet_factor=1.0), 5.0, seed=1, runs=200)
    lam = sum(cause_rates_per_hour(REFERENCE_CAUSES, 4096)) * 240
    mean, lo, hi = s.interruptions()
    assert mean == pytest.approx(lam, rel=0.05)
    assert lo <= stats.poisson.ppf(0.5, lam) <= hi


def test_the_fleet_band_is_wider_than_chance_alone() -> None:
    fixed = scenario_failures(scn(4096, fleet_factor=1.0), 5.0, seed=1, runs=200)
    fleets = scenario_failures(scn(4096), 5.0, seed=1, runs=200)
    width = [s.interruptions()[2] - s.interruptions()[1] for s in (fixed, fleets)]
    assert width[1] > 1.5 * width[0]
    lo, hi = fleets.mtbf_band_s
    assert lo < fleets.mtbf_s < hi


def test_young_daly_interval() -> None:
    assert young_daly_interval_s(11135, 60) == pytest.approx(1156, abs=1)


def test_goodput_without_failures_is_the_checkpoint_duty_cycle() -> None:
    s = scenario_failures(scn(8, model="llama3-8b", par={}, checkpoint_interval_min=10,
                              checkpoint_write_s=60, rate_scale=1e-12), 1.0, seed=0, runs=3)
    assert s.goodput()[0] == pytest.approx(600 / 660, rel=1e-3)


def test_recovery_follows_the_job() -> None:
    small, big = job_units_of(scn(512)), job_units_of(scn(98304, topology="h100-3tier",
                                                           model="llama3-405b",
                                                           par={"tp": 8, "pp": 16}))
    cfg = scn(512).failures
    kw = dict(state_B=1e12, step_s=20.0, replicas=1, host_link_Bps=25e9, network_Bps=25e9,
              ocs_spares=False)
    a = recovery_costs(cfg, small, 3600.0, **kw)                 # type: ignore[arg-type]
    b = recovery_costs(cfg, big, 3600.0, **kw)                   # type: ignore[arg-type]
    assert b.restart_s > a.restart_s                             # communicators over more ranks
    assert b.load_s < a.load_s                                   # more chips, more storage bandwidth
    # FT-HSDP's synchronous recovery at ~100K GPUs: about 10 minutes
    assert 8 * 60 < b.downtime_s < 14 * 60


def test_strategies_rank_as_their_sources_say() -> None:
    par = {"tp": 8, "pp": 16, "zero": 2, "zero_group": 64}
    base = dict(chips=98304, topology="h100-3tier", model="llama3-405b", par=par, step_s=20)
    sync = scenario_failures(scn(**base), 20.0, seed=0, runs=20)
    rep = scenario_failures(scn(**base, recovery="replica"), 20.0, seed=0, runs=20)
    mem = scenario_failures(scn(**base, recovery="in_memory_checkpoint"), 20.0, seed=0, runs=20)
    assert rep.goodput()[0] > sync.goodput()[0] + 0.1           # FT-HSDP: 44% -> 80%
    assert mem.goodput()[0] > sync.goodput()[0]
    assert rep.interruptions() == sync.interruptions()          # same seeds, same failures


def test_dry_spare_pools_fall_back_or_wait() -> None:
    def swap(recovery: str, spares: int) -> float:
        s = scenario_failures(scn(8192, recovery=recovery, spares=spares, repair_h=48,
                                  fleet_factor=1.0), 5.0, seed=0, runs=10)
        return s.downtime_parts().get("swap", 0.0)
    # hot spares: instant while they last, then cold replacements (120 s each)
    assert swap("hot_spare", 500) == 0.0
    n = scenario_failures(scn(8192, fleet_factor=1.0), 5.0, seed=0, runs=10).interruptions()[0]
    assert 0.3 * 120 * n < swap("hot_spare", 1) <= 120 * n * 1.01
    # a dedicated cluster's idle hosts given to a restart: a dry pool waits for repairs (48 h)
    assert swap("restart", 1) > 20 * swap("restart", 500)


def test_silent_corruption_costs_what_its_detection_delay_costs() -> None:
    def lost(hours: float) -> float:
        s = scenario_failures(scn(16384, fleet_factor=1.0, sdc_detect_h=hours), 5.0, seed=0,
                              runs=20)
        return s.downtime_parts()["lost_work"]
    assert lost(24.0) > lost(0.1) + 3600


def test_restart_loops_add_interruptions() -> None:
    a = scenario_failures(scn(4096, fleet_factor=1.0), 5.0, seed=0, runs=50).interruptions()[0]
    b = scenario_failures(scn(4096, fleet_factor=1.0, repeat_probability=0.5), 5.0, seed=0,
                          runs=50).interruptions()[0]
    assert b == pytest.approx(2 * a, rel=0.15)                  # each failure brings 1 more on average


def test_a_young_fleet_with_infant_mortality_fails_less_as_it_ages() -> None:
    expo = scenario_failures(scn(8192, fleet_factor=1.0), 5.0, seed=0, runs=50).interruptions()[0]
    young = scenario_failures(scn(8192, fleet_factor=1.0, weibull_shape=0.5, fleet_age_days=5),
                              5.0, seed=0, runs=50).interruptions()[0]
    assert young < 0.8 * expo


def test_deterministic_for_a_seed() -> None:
    a = scenario_failures(scn(1024), 5.0, seed=7, runs=5)
    b = scenario_failures(scn(1024), 5.0, seed=7, runs=5)
    assert a == b


@pytest.mark.parametrize("failures, match", [
    ({"checkpoint_write_s": -1}, r"failures.checkpoint_write_s: must be >= 0.0, got -1"),
    ({"horizon_days": 0}, r"failures.horizon_days: must be > 0.0, got 0"),
    ({"checkpoint_interval_min": 1, "checkpoint_write_s": 120},
     r"failures.checkpoint_interval_min: 1.0 min is not longer than checkpoint_write_s = 120"),
    ({"rate_scale": -2}, r"failures.rate_scale: must be >= 0.0"),
    ({"restart_s": float("nan")}, r"failures.restart_s: expected a finite number"),
    ({"recovery": "pray"}, r"failures.recovery: got 'pray'; valid: restart, hot_spare, replica, "
                           r"in_memory_checkpoint"),
    ({"fleet_factor": 0}, r"failures.fleet_factor: must be > 0.0"),
])
def test_bad_failure_config(failures: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        scenario_from_dict({"model": "llama3-8b", "failures": failures}, "f.yaml")


def test_plans_a_layout_cannot_run_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"failures.recovery: replica needs at least two "
                                          r"data-parallel replicas .* this layout has 1"):
        scenario_failures(scn(1024, recovery="replica"), 5.0, seed=0, runs=1)
    with pytest.raises(ConfigError, match=r"failures.spares: 200 spare hosts is more than the "
                                          r"job's 128; valid: 0 to 128"):
        scenario_failures(scn(1024, spares=200), 5.0, seed=0, runs=1)


def test_cli_refuses_replica_recovery_without_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "scenarios/llama3-70b-1024xh100-failures.yaml", "--set",
               "failures.recovery=replica"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "failures.recovery: replica" in err


def test_units_know_racks_and_cubes() -> None:
    rack = job_units_of(scn(288, topology="gb200-nvl72", par={"tp": 4}))
    assert (rack.swap_unit, rack.chips_per_swap_unit, rack.hosts) == ("domain", 72, 72)
    cube = job_units_of(scenario_from_dict({"cluster": {"topology": "tpu-v5p", "chips": 1024},
                                            "model": "llama3-8b"}, "t.yaml"))
    assert (cube.swap_unit, cube.chips_per_swap_unit) == ("domain", 64)
    host = job_units_of(scn(1024))
    assert (host.swap_unit, host.chips_per_swap_unit) == ("host", 8)


def test_failures_validation_within_budget() -> None:
    cases = validate_failures(DATA / "failures")
    assert check_failure_budgets(cases, load_budgets(DATA / "budgets.toml")["failures"]) == []
    by = {c.case: c for c in cases}
    assert by["llama3-effective-time"].predicted > 0.90
    assert abs(by["llama3-interruptions"].predicted - 419) < 0.2 * 419   # defaults only
    sources = {c.source.split(",")[0].split("(")[0].strip() for c in cases if c.budgeted}
    assert len(sources) >= 6


def test_run_reports_the_count_the_band_and_the_recovery(capsys: pytest.CaptureFixture[str]) -> None:
    """DESIGN.md: ``interruptions`` is the count; ``interruptions_by_cause`` adds up to it;
    ``goodput_interval`` is the 5-95% band; the recovery per interruption and its parts."""
    assert main(["run", "scenarios/llama3-70b-1024xh100-failures.yaml", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out["interruptions"], float) and out["interruptions"] > 0
    assert sum(out["interruptions_by_cause"].values()) == pytest.approx(out["interruptions"])
    lo, hi = out["goodput_interval"]
    assert lo <= out["goodput"] <= hi
    assert out["recovery"] == "restart"
    assert out["recovery_s_per_interruption"] == pytest.approx(sum(out["recovery_s"].values()))
    assert main(["run", "scenarios/llama3-70b-1024xh100-failures.yaml"]) == 0
    text = capsys.readouterr().out
    assert "recovery         restart:" in text and "most time lost to" in text


def test_replacing_the_horizon_keeps_the_rest() -> None:
    s = scn(1024)
    assert s.failures is not None
    longer = replace(s.failures, horizon_days=20)
    a = scenario_failures(s, 5.0, seed=0, runs=5, cfg=longer)
    assert a.horizon_s == pytest.approx(20 * 86400)
