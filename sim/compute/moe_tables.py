"""The MoE kernel tables of the H100 (``moe_routing.csv``, ``moe_grouped_gemm.csv``) and the fits of
``sim.calibration``'s MoE constants on them.

``moe_routing.csv`` times eager PyTorch's router, permutation and unpermutation kernels one call at
a time (``benchmarks/device/h100_extra_moe_attn.py``); ``moe_grouped_gemm.csv`` times
``torch._grouped_mm`` over every local expert (the ``grouped_mm`` rows; ``loop`` rows, a Python
loop of per-expert matmuls, are no one kernel and are not fitted). Both are described in
``validation/compute/README.md``; ``tests/test_moe_kernels.py`` checks that these fits give the
committed constants.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError
from .kernels import (
    GemmParams,
    GroupedGemmParams,
    MemoryParams,
    fixed_memory_time_s,
    grouped_gemm_time_s,
    moe_permute_bytes,
    moe_topk_bytes,
)
from .tables import KernelCase, _num, _rows, load_cases

__all__ = ["RoutingCase", "MOE_MEMORY_OPS", "routing_cases", "routing_bytes",
           "fit_moe_memory", "grouped_cases", "fit_grouped", "GROUPED_TABLES", "DISTURBED_FACTOR"]

# Measured class (``sim.calibration.MOE_MEMORY_HOPPER`` key) -> the ``moe_routing.csv`` op it is
# fitted on: softmax + top-k of the router; argsort + bincount + index_select (the eager permute);
# index_select alone (a gather of rows by a saved order: the unpermute's backward); zeros + weight
# by the probabilities + index_add_ (the eager unpermute, bf16 atomics; also the permute's
# backward, an index_add_ of the row gradients onto their tokens).
MOE_MEMORY_OPS = {"moe_topk": "softmax_topk", "moe_permute": "permute", "moe_gather": "permute_gather",
                  "moe_unpermute": "unpermute"}
# A case (one tokens x hidden x experts x top-k set of rows) whose router GEMM, the same kernel in
# every case of one tokens x hidden, ran more than this many times its median was timed while the
# GPU was disturbed (two cases in the H100 table, every op of them slow: 8192 x 7168 x 256 x 2 and
# 16384 x 7168 x 128 x 8): the fits skip it, the tests report it.
DISTURBED_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class RoutingCase:
    """One row of ``moe_routing.csv``: op, tokens T, hidden H, experts E, top-k, seconds."""

    op: str
    tokens: int
    hidden: int
    experts: int
    top_k: int
    time_s: float
    disturbed: bool


def routing_cases(folder: Path) -> list[RoutingCase]:
    """Every timed row of *folder*'s ``moe_routing.csv`` (none where the folder has no table)."""
    path = folder / "moe_routing.csv"
    if not path.exists():
        return []
    rows = []
    for r in _rows(path):
        if r.get("time_us"):
            t, h, e, k = (int(_num(r, c, path)) for c in ("tokens", "hidden", "experts", "top_k"))
            rows.append(RoutingCase(r["op"], t, h, e, k, _num(r, "time_us", path) * 1e-6, False))
    gemm: dict[tuple[int, int], list[float]] = {}
    for c in rows:
        if c.op == "router_gemm":
            gemm.setdefault((c.tokens, c.hidden), []).append(c.time_s)
    slow = {(c.tokens, c.hidden, c.experts, c.top_k) for c in rows
            if c.op == "router_gemm" and c.time_s > DISTURBED_FACTOR * statistics.median(gemm[(c.tokens, c.hidden)])}
    return [replace(c, disturbed=(c.tokens, c.hidden, c.experts, c.top_k) in slow) for c in rows]


def routing_bytes(measured: str, c: RoutingCase) -> float:
    """The bytes the model charges a measured class's op for, as the workload counts them."""
    if measured == "moe_topk":
        return moe_topk_bytes(c.tokens, c.experts, c.top_k)
    return moe_permute_bytes(c.tokens * c.top_k, c.hidden)


def fit_moe_memory(cases: Sequence[RoutingCase], hbm_Bps: float, call_s: float) -> dict[str, MemoryParams]:
    """(fraction, fixed_s) per measured class: least squares in log time of
    ``call_s + fixed_s + bytes / (fraction x HBM)`` over the class's undisturbed rows. *call_s* is
    what timing one call adds in this harness (the bf16 GEMM fit's ``call_s``, same CUDA-event
    harness), kept out of ``fixed_s`` as it is out of every GEMM time in a step."""
    from scipy.optimize import least_squares

    out: dict[str, MemoryParams] = {}
    for measured, op in MOE_MEMORY_OPS.items():
        rows = [c for c in cases if c.op == op and not c.disturbed]
        if len(rows) < 4:
            raise ConfigError(f"kernel tables: {len(rows)} {op} rows in moe_routing.csv; need >= 4")

        def residuals(x: Sequence[float], rows: list[RoutingCase] = rows, measured: str = measured) -> list[float]:
            p = MemoryParams(x[0], x[1] * 1e-6)
            return [math.log((call_s + fixed_memory_time_s(routing_bytes(measured, c), hbm_Bps, p))
                             / c.time_s) for c in rows]

        fit = least_squares(residuals, [0.5, 20.0], bounds=([1e-4, 0.0], [1.0, 1000.0]))
        fraction, fixed_us = (float(v) for v in fit.x)
        out[measured] = MemoryParams(round(fraction, 4), round(fixed_us, 1) * 1e-6)
    return out


# The grouped GEMM tables: expert GEMMs at 256-4,096 tokens per expert, and at 8-1,024 in the
# forward, dgrad and wgrad (validation/compute/README.md).
GROUPED_TABLES = ("moe_grouped_gemm.csv", "moe_grouped_small.csv")


def grouped_cases(folder: Path) -> list[KernelCase]:
    """The single grouped-kernel rows of *folder*'s grouped GEMM tables (``batch``: local experts;
    ``m``, ``n``, ``k`` as the model runs the GEMM: ``sim.compute.tables.load_cases``)."""
    return [c for c in load_cases(folder) if c.table in GROUPED_TABLES]


def fit_grouped(cases: Sequence[KernelCase], peak_flops: float, sms: int, hbm_Bps: float,
                p: GemmParams) -> GroupedGemmParams:
    """The grouped kernel's time per group, time per tile and streaming rate per SM: least squares
    in log time of ``grouped_gemm_time_s`` (isolated, with the bf16 GEMM constants *p* for the
    rest) over the grouped rows."""
    from scipy.optimize import least_squares

    if len(cases) < 4:
        raise ConfigError(f"kernel tables: {len(cases)} grouped GEMM rows to fit; need >= 4")

    def params(x: Sequence[float]) -> GroupedGemmParams:
        return GroupedGemmParams(group_s=x[0] * 1e-6, tile_s=x[1] * 1e-6, stream_Bps_per_sm=x[2] * 1e9)

    def residuals(x: Sequence[float]) -> list[float]:
        g = params(x)
        return [math.log(grouped_gemm_time_s(c.m, c.n, c.k, 2.0, peak_flops, sms, hbm_Bps, p, c.batch, g,
                                             isolated=True) / c.time_s) for c in cases]

    fit = least_squares(residuals, [1.0, 3.0, 20.0], bounds=([0.0, 0.0, 1.0], [100.0, 50.0, 500.0]))
    group_us, tile_us, gbps = (float(v) for v in fit.x)
    return GroupedGemmParams(round(group_us, 2) * 1e-6, round(tile_us, 2) * 1e-6, round(gbps, 1) * 1e9)
