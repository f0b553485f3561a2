"""Speed of the failure simulation (issue targets: a 54-day horizon <= 2 s; Monte Carlo over 100
seeds <= 60 s, on the Llama 3 validation scenario, 16,384 H100, ~420 interruptions per history;
issue 29: a 100k-GPU Monte Carlo over 90 days <= 10 s, every recovery strategy).

Run on demand: ``python -m pytest benchmarks -m benchmark -s``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from sim.config import load_scenario
from sim.goodput import scenario_failures

DATA = Path(__file__).resolve().parent.parent / "validation" / "failures"


@pytest.mark.benchmark
def test_failure_horizon_speed() -> None:
    scn = load_scenario(DATA / "llama3-405b-54d.yaml")
    t0 = time.perf_counter()
    scenario_failures(scn, 7.0, seed=0, runs=1)
    one = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = scenario_failures(scn, 7.0, seed=0, runs=100)
    hundred = time.perf_counter() - t0
    print(f"\n54-day horizon, 16,384 H100: one history {one * 1e3:.1f} ms; 100 seeds {hundred:.2f} s; "
          f"goodput {s.goodput()[0]:.3f}, {s.interruptions()[0]:.0f} interruptions")
    assert one <= 2.0 and hundred <= 60.0


@pytest.mark.benchmark
@pytest.mark.parametrize("recovery", ["restart", "hot_spare", "replica", "in_memory_checkpoint"])
def test_100k_gpus_over_90_days(recovery: str) -> None:
    scn = load_scenario(DATA / "fthsdp-98304xh100-sync.yaml")
    assert scn.failures is not None
    cfg = replace(scn.failures, horizon_days=90, recovery=recovery)
    t0 = time.perf_counter()
    s = scenario_failures(scn, 20.0, seed=0, cfg=cfg, runs=100)
    took = time.perf_counter() - t0
    print(f"\n98,304 H100, 90 days, 100 histories, {recovery}: {took:.2f} s; goodput "
          f"{s.goodput()[0]:.3f}, {s.interruptions()[0]:.0f} interruptions a history")
    assert took <= 10.0
