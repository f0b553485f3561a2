"""Max-min fair fluid sharing of links by concurrent flows.

A flow moves ``nbytes`` along a route given as link fractions (an ECMP split sends a fraction of
the flow's rate over each branch). Rates are max-min fair (progressive filling, Bertsekas &
Gallager, "Data Networks", 2nd ed., section 6.5.2): every flow's rate is raised together until a
link saturates; the flows through it freeze; repeat. ``play_flows`` advances time from one flow
completion to the next, recomputing rates each time, until all flows are done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FlowSet", "LinkMatrix", "maxmin_rates", "play_flows", "unique_links"]

_EPS = 1e-12


class LinkMatrix:
    """A sparse (links x flows) matrix of rate fractions, held as its entries sorted by row, then
    column, with duplicate entries summed in the order given: what a SciPy CSR matrix holds after
    ``sum_duplicates``. ``m @ x`` (link loads) sums each row's terms in the same order, so it is
    the same to the bit; ``m.T @ y`` and ``m.sum(axis=0)`` agree to rounding (max-min filling only
    asks which of them are > 0). Plain numpy (``np.bincount``): a run needs no SciPy import (~0.1 s of
    every command's start, issue 32). Supports what ``maxmin_rates`` asks of a matrix: ``shape``,
    ``m @ x``, ``m.T @ y`` and ``m.sum(axis=0)``."""

    __slots__ = ("rows", "cols", "vals", "shape")

    def __init__(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
                 shape: tuple[int, int]) -> None:
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        vals = np.asarray(vals, dtype=float)
        order = np.lexsort((cols, rows))                   # stable: duplicates keep their order
        rows, cols, vals = rows[order], cols[order], vals[order]
        if len(rows) > 1:
            new = np.empty(len(rows), bool)
            new[0] = True
            np.not_equal(rows[1:], rows[:-1], out=new[1:])
            new[1:] |= cols[1:] != cols[:-1]
            if not new.all():
                starts = np.flatnonzero(new)
                summed = np.zeros(len(starts))
                np.add.at(summed, np.cumsum(new) - 1, vals)      # one by one, in order
                rows, cols, vals = rows[starts], cols[starts], summed
        self.rows, self.cols, self.vals, self.shape = rows, cols, vals, shape

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        return np.bincount(self.rows, weights=self.vals * x[self.cols], minlength=self.shape[0])

    @property
    def T(self) -> _Transposed:  # noqa: N802 (numpy's and SciPy's name)
        return _Transposed(self)

    def sum(self, axis: int) -> np.ndarray:
        if axis != 0:
            raise ValueError("LinkMatrix.sum: only axis=0 (per flow)")
        return np.bincount(self.cols, weights=self.vals, minlength=self.shape[1])


class _Transposed:
    __slots__ = ("m",)

    def __init__(self, m: LinkMatrix) -> None:
        self.m = m

    def __matmul__(self, y: np.ndarray) -> np.ndarray:
        m = self.m
        return np.bincount(m.cols, weights=m.vals * y[m.rows], minlength=m.shape[1])


def unique_links(rows: np.ndarray, n_links: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, return_inverse=True)`` for link ids below *n_links*: marked in a table
    of the links where sorting *rows* would cost more than reading the table (PERF: the routes
    of a 4,096-chip torus collective, benchmarks/release.py run-tpu-v4); the same arrays."""
    if len(rows) < 64 or len(rows) * len(rows).bit_length() < 2 * n_links:
        return np.unique(rows, return_inverse=True)
    used = np.zeros(n_links, bool)
    used[rows] = True
    links = np.flatnonzero(used)
    at = np.cumsum(used, dtype=np.int64)
    return links, at[rows] - 1


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
        self.links, local = unique_links(np.asarray(rows, np.int64), n_links)
        self.routes = LinkMatrix(local.reshape(-1), cols, vals, (len(self.links), len(self.nbytes)))

    def with_bytes(self, nbytes: Sequence[float] | np.ndarray) -> FlowSet:
        """The same flows and routes moving *nbytes* instead (one per flow): what building them
        with those bytes gives, its routes shared (nothing changes a ``LinkMatrix``)."""
        out = object.__new__(FlowSet)
        out.nbytes = np.asarray(nbytes, dtype=float)
        if out.nbytes.shape != self.nbytes.shape:
            raise ValueError(f"FlowSet.with_bytes: {out.nbytes.shape} bytes for {self.nbytes.shape} flows")
        out.n_links, out.links, out.routes = self.n_links, self.links, self.routes
        return out

    def link_bytes(self) -> np.ndarray:
        """Bytes each of ``links`` carries in one play of the flows."""
        return self.routes @ self.nbytes

    def __len__(self) -> int:
        return len(self.nbytes)


def maxmin_rates(matrix: Any, capacity_Bps: np.ndarray,
                 active: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate (bytes/s) of each flow (column) of *matrix* (a ``LinkMatrix`` or a SciPy
    sparse matrix); inactive flows get 0.

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
