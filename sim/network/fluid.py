"""Max-min fair fluid sharing of links by concurrent flows.

A flow moves ``nbytes`` along a route given as link fractions (an ECMP split sends a fraction of
the flow's rate over each branch). Rates are max-min fair (progressive filling, Bertsekas &
Gallager, "Data Networks", 2nd ed., section 6.5.2): every flow's rate is raised together until a
link saturates; the flows through it freeze; repeat. ``play_flows`` advances time from one flow
completion to the next, recomputing rates each time, until all flows are done.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["FlowSet", "maxmin_rates", "play_flows"]

_EPS = 1e-12


class FlowSet:
    """Flows with their routes as a sparse (links x flows) matrix of rate fractions.

    ``links`` are the links (ids of a table of *n_links*) some flow crosses and ``routes`` the
    matrix's rows of those links alone: a link no flow uses constrains nothing, so max-min rates
    over these rows are the same as over the whole table.
    """

    def __init__(self, n_links: int, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
                 nbytes: Sequence[float] | np.ndarray) -> None:
        self.nbytes = np.asarray(nbytes, dtype=float)
        self.n_links = n_links
        # PERF: the rows of the links used only, built as such: a CSR matrix over all ~1.3 M
        # links of the 98,304-GPU fabric costs more than its few thousand entries
        # (benchmarks/test_bench_training.py). Each row holds the same entries in the same order
        # as the full matrix's, so duplicates sum the same.
        self.links, local = np.unique(rows, return_inverse=True)
        self.routes = sp.csr_array((vals, (local.reshape(-1), cols)),
                                   shape=(len(self.links), len(self.nbytes)))
        self.routes.sum_duplicates()

    def link_bytes(self) -> np.ndarray:
        """Bytes each of ``links`` carries in one play of the flows."""
        return self.routes @ self.nbytes

    def __len__(self) -> int:
        return len(self.nbytes)


def maxmin_rates(matrix: sp.csr_array, capacity_Bps: np.ndarray,
                 active: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate (bytes/s) of each flow (column) of *matrix*; inactive flows get 0.

    A flow with an empty route (source = destination) is unconstrained: rate = inf.
    """
    n = matrix.shape[1]
    act = np.ones(n, bool) if active is None else active.copy()
    rates = np.zeros(n)
    touches = np.asarray(matrix.sum(axis=0)).ravel() > 0        # fractions are positive
    rates[act & ~touches] = np.inf
    free = act & touches
    residual = capacity_Bps.astype(float).copy()
    transposed = matrix.T                                        # a view, no conversion
    while free.any():
        load = matrix @ free.astype(float)
        used = load > _EPS
        inc = np.min(residual[used] / load[used])
        rates[free] += inc
        residual -= inc * load
        saturated = used & (residual <= _EPS * np.maximum(capacity_Bps, 1.0))
        if not saturated.any():           # numerical: saturate the tightest link(s)
            ratio = np.where(used, residual / np.where(used, load, 1.0), np.inf)
            saturated = ratio <= ratio.min() * (1 + 1e-9)
        hit = np.asarray(transposed @ saturated.astype(float)).ravel() > 0
        newly = free & hit
        assert newly.any(), "progressive filling made no progress"
        free &= ~newly
    return rates


def play_flows(flows: FlowSet, capacity_Bps: np.ndarray) -> tuple[float, np.ndarray]:
    """Run all flows from time 0 with max-min sharing; (makespan s, finish time s of each flow)."""
    matrix, capacity_Bps = flows.routes, np.asarray(capacity_Bps)[flows.links]
    remaining = flows.nbytes.copy()
    finish = np.zeros(len(flows))
    active = remaining > 0
    now = 0.0
    while active.any():
        rates = maxmin_rates(matrix, capacity_Bps, active)
        with np.errstate(divide="ignore", invalid="ignore"):
            dt_each = np.where(active, remaining / rates, np.inf)
        dt = float(dt_each.min())
        done = active & (dt_each <= dt * (1 + 1e-9))
        remaining = np.where(active, remaining - rates * dt, remaining)
        now += dt
        finish[done] = now
        remaining[done] = 0.0
        active &= ~done
    return now, finish
