"""TPU collectives inside one slice: bidirectional rings along each torus axis, the axes worked on
at once by splitting the data (SB-SHARD), as XLA runs them. Priced by the flow model and the ICI
latency per hop (``sim.collectives.CollectiveModel``), not by NCCL's model."""

from __future__ import annotations

import math

from ..topology import Topology, TpuFabric
from .algorithm import Algorithm
from .platform import Platform
from .ring import ring
from .stages import GroupInfo, Phase, Stage, phase

__all__ = ["TORUS", "Torus", "torus"]


def _grid(topo: Topology, gi: GroupInfo) -> tuple[list[int], dict[tuple[int, ...], int]] | None:
    """Axes along which the group spans a full sub-grid (same pod), and coords -> device."""
    g = topo.graph
    coords = {tuple(g.nodes[d]["coords"]): d for d in gi.devices}
    if len({g.nodes[d]["pod"] for d in gi.devices}) != 1:
        return None
    ndim = len(next(iter(coords)))
    values = [sorted({c[a] for c in coords}) for a in range(ndim)]
    if math.prod(len(v) for v in values) != len(coords):
        return None
    axes = [a for a in range(ndim) if len(values[a]) > 1]
    return axes, coords


def _axis_phase(axis: int, data: float, tag: str, coords: dict[tuple[int, ...], int], L: int,
                full_wrap: bool) -> Phase:
    """All-gather-style traffic on every line along *axis* (*L* chips, a ring where *full_wrap*,
    else a line): data = bytes gathered per chip."""
    pairs: list[tuple[int, int]] = []
    for c, d in coords.items():
        for step in (1, -1):
            nb = list(c)
            nb[axis] = c[axis] + step
            if full_wrap:
                nb[axis] %= L
            if tuple(nb) in coords:
                pairs.append((d, coords[tuple(nb)]))
    chunk = data / L
    if full_wrap:
        steps = L // 2
        if L % 2 == 0:              # the last step carries half a chunk each way
            return phase(f"{tag}-axis{axis}", steps, pairs, chunk * (L - 1) / 2 / steps)
        return phase(f"{tag}-axis{axis}", steps, pairs, chunk)
    return phase(f"{tag}-axis{axis}", L - 1, pairs, chunk)


def torus(op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
    """Bidirectional rings along each torus axis, all axes at once on 1/D of the data each.

    All-gather on one axis of length L with wraparound: each step every chip passes a chunk to both
    neighbours, so a chunk travels at most L/2 hops (floor(L/2) steps, the last one half a chunk
    each way when L is even). Without wraparound the axis is a line: L-1 steps, each link carrying
    one chunk per step in each direction (twice the wrapped time, SB-TPU). Reduce-scatter is the
    same traffic in reverse; all-reduce = reduce-scatter then all-gather (SB-SHARD).
    """
    grid = _grid(topo, gi)
    if grid is None or not grid[0]:
        return ring(op, gi, size)
    axes, coords = grid
    assert isinstance(topo.fabric, TpuFabric), topo.fabric
    shape, wraps = topo.fabric.shape, topo.fabric.wraps
    D = len(axes)
    lengths = {a: len({c[a] for c in coords}) for a in axes}

    def gather_stages(total: float, tag: str) -> list[Stage]:
        # Part p gathers over axes in the order rotated by p; at stage k it holds total/D/prod(later).
        stages = []
        for k in range(D):
            phases = []
            for p in range(D):
                order = [axes[(p + j) % D] for j in range(D)]
                later = math.prod(lengths[a] for a in order[k + 1:])
                axis = order[k]
                full_wrap = wraps[axis] and lengths[axis] == shape[axis]
                phases.append(_axis_phase(axis, total / D / later, tag, coords, lengths[axis],
                                          full_wrap))
            stages.append(tuple(phases))
        return stages

    if op == "allgather":
        return gather_stages(size, "ag")
    if op == "reducescatter":
        return list(reversed(gather_stages(size, "rs")))
    if op == "allreduce":
        return list(reversed(gather_stages(size, "rs"))) + gather_stages(size, "ag")
    if op == "broadcast":               # scatter then all-gather (van de Geijn)
        return gather_stages(size, "bcast")
    raise AssertionError(op)


class Torus(Algorithm):
    """XLA's torus collectives inside one TPU slice."""

    name = "torus"
    ops = frozenset({"allreduce", "allgather", "reducescatter", "broadcast"})
    on_gpu = False
    on_tpu = True

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        return len(gi.by_pod) <= 1

    def refusal(self, op: str, hw: Platform) -> str:
        return "is for TPU slices"

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        return torus(op, gi, size, topo)


TORUS = Torus()
