"""Array helpers of the shared links' max-min solve (``sim.network.shared``): runs of sorted ids
and progressive filling over a dense (link x flow) load matrix."""

from __future__ import annotations

import numpy as np

__all__ = ["TOL", "firsts", "progressive_fill", "unique_sorted_runs"]

TOL = 1e-9                       # relative: a load within it of a capacity is at it


def firsts(x: np.ndarray) -> np.ndarray:
    """Where each run of equal values of sorted *x* starts (PERF: ``np.r_`` costs more than the
    comparison on these short arrays)."""
    first = np.empty(len(x), bool)
    first[:1] = True
    np.not_equal(x[1:], x[:-1], out=first[1:])
    return first


def unique_sorted_runs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` for *x* made of a few sorted runs (each flow's links).

    PERF: a stable sort merges the runs in one pass where ``np.unique``'s quicksort starts over
    (benchmarks/test_bench_training.py, 98,304 GPUs); the values and the inverse are the same."""
    order = np.argsort(x, kind="stable")
    s = x[order]
    first = firsts(s)
    inverse = np.empty(len(x), np.int64)
    inverse[order] = np.cumsum(first) - 1
    return s[first], inverse


def progressive_fill(m: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Speeds x (0..1] of the columns of *m* (load at speed 1 on each row's link): all rise
    together; a full link freezes its columns; a column stops at 1."""
    x = np.ones(m.shape[1])
    free = (m > 0).any(axis=0)
    level = 0.0
    residual = capacity.astype(float).copy()
    while np.count_nonzero(free):
        load = m[:, free].sum(axis=1)
        used = np.flatnonzero(load > 0)
        ratio = residual[used] / load[used]
        k = int(np.argmin(ratio))
        inc = max(0.0, float(ratio[k]))
        if level + inc >= 1.0:                            # the rest reach their speed alone
            break
        level += inc
        residual[used] -= inc * load[used]
        is_full = residual[used] <= TOL * capacity[used]
        is_full[k] = True                                 # at least the tightest link
        hit = free & (m[used[is_full]] > 0).any(axis=0)
        x[hit] = level
        free &= ~hit
    return x
