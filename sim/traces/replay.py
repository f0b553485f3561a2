"""Deterministic replay of a trace program: every op starts as soon as its dependencies are done
(no launch delay) and takes its given time; a group op ends at its group's latest start plus its
own transfer time.

For fixed durations this is a longest-path evaluation of the dependency graph, done here in
dependency order with numpy over all steps and dp ranks at once (the artifact's simulator works
the same way). tests/reference_engines.py plays the same program as simpy processes; a test shows
both agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .program import Program

__all__ = ["Replay", "replay"]


@dataclass(frozen=True)
class Replay:
    """Replayed starts and ends, (ops, steps, dp ranks), seconds from the step's start."""

    start_s: np.ndarray
    end_s: np.ndarray

    def step_s(self) -> np.ndarray:
        """Per step: when the last op of any worker ends."""
        return self.end_s.max(axis=(0, 2))


def replay(prog: Program, own_s: np.ndarray) -> Replay:
    """Play *prog* with per-op times *own_s* (ops, steps, dp ranks)."""
    K, S, D = own_s.shape
    start = np.zeros((K, S, D))
    end = np.zeros((K, S, D))
    deps = prog.deps
    # PERF: one numpy op per template op over all steps and dp ranks (benchmarks/test_bench_traces.py)
    for n in prog.order:
        if n < K:
            ds = deps[n]
            if ds:
                st = end[ds[0]].copy() if len(ds) == 1 else end[list(ds)].max(axis=0)
                start[n] = st
            end[n] = start[n] + own_s[n]
        else:
            grp = prog.groups[n - K]
            m = list(grp.members)
            for k in m:
                ds = deps[k]
                if ds:
                    start[k] = end[list(ds)].max(axis=0)
            g = start[m].max(axis=0)
            if grp.across_dp:
                g = g.max(axis=1, keepdims=True)
            end[m] = g + own_s[m]
    return Replay(start, end)
