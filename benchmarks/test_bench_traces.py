"""Speed of the what-if analysis (issue 15 target: the 64-rank AR trace replayed and analysed, every
attribution included, in <= 30 s on 2 cores).

Run on demand: ``python -m pytest benchmarks -m benchmark -s``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("pandas")

from sim.traces import load_trace, what_if  # noqa: E402

TRACE = Path(__file__).resolve().parent.parent / "validation" / "stragglers" / "trace-AR.parquet"


@pytest.mark.benchmark
def test_whatif_64_rank_trace_speed() -> None:
    t0 = time.perf_counter()
    prog = load_trace(TRACE)
    loaded = time.perf_counter() - t0
    w = what_if(prog)                      # replay, ideal, stages, dp ranks, op types and workers
    total = time.perf_counter() - t0
    print(f"\nAR (64 ranks, {len(prog.steps)} steps, {prog.n_ops} ops per step x {prog.n_dp} dp ranks): "
          f"load {loaded:.2f} s, load + full analysis {total:.2f} s, S = {w.slowdown:.4f}")
    assert total <= 30.0
