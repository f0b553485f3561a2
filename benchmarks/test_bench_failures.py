"""Speed of the failure simulation (issue targets: a 54-day horizon <= 2 s; Monte Carlo over 100
seeds <= 60 s), on the Llama 3 validation scenario (16,384 H100, ~420 interruptions per history).

Run on demand: ``python -m pytest benchmarks -m benchmark -s``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sim.config import load_scenario
from sim.faults import simulate_failures

SCN = Path(__file__).resolve().parent.parent / "validation" / "failures" / "llama3-405b-54d.yaml"


@pytest.mark.benchmark
def test_failure_horizon_speed() -> None:
    scn = load_scenario(SCN)
    assert scn.failures is not None
    t0 = time.perf_counter()
    simulate_failures(scn.failures, scn.cluster.chip, scn.cluster.chips, seed=0, runs=1)
    one = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = simulate_failures(scn.failures, scn.cluster.chip, scn.cluster.chips, seed=0, runs=100)
    hundred = time.perf_counter() - t0
    print(f"\n54-day horizon, 16,384 H100: one history {one * 1e3:.1f} ms; 100 seeds {hundred:.2f} s; "
          f"goodput {s.goodput()[0]:.3f}, {s.interruptions()[0]:.0f} interruptions")
    assert one <= 2.0 and hundred <= 60.0
