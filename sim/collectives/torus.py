"""TPU collectives inside one slice: bidirectional rings along each torus axis, the axes worked on
at once by splitting the data (SB-SHARD), as XLA runs them. Priced by the flow model and the ICI
latency per hop (``sim.collectives.CollectiveModel``), not by NCCL's model."""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence

import numpy as np

from ..topology import Topology, TpuFabric
from .algorithm import Algorithm
from .platform import Platform
from .ring import ring
from .stages import GroupInfo, Phase, Stage

__all__ = ["TORUS", "Torus", "torus", "torus_bulk"]


def _grid(topo: Topology, gi: GroupInfo
          ) -> tuple[list[int], list[list[int]], dict[tuple[int, ...], int]] | None:
    """Axes along which the group spans a full sub-grid (same pod), its sorted coordinates along
    each axis, and coords -> device."""
    pods, places = _places(topo)              # PERF: the graph's attributes read once per graph
    devs = np.asarray(gi.devices, np.int64)
    if np.any(pods[devs] != pods[devs[0]]):
        return None
    coords = dict(zip(map(tuple, places[devs].tolist()), gi.devices))
    ndim = len(next(iter(coords)))
    values = [sorted({c[a] for c in coords}) for a in range(ndim)]
    if math.prod(len(v) for v in values) != len(coords):
        return None
    axes = [a for a in range(ndim) if len(values[a]) > 1]
    return axes, values, coords


def _axis_ring(values: Sequence[int], size: int, wraps: bool) -> tuple[bool, int]:
    """How the group's chips at *values* (sorted coordinates along an axis of *size* chips) pass
    data along it: whether they close a ring over the axis's wraparound (evenly spaced over the
    whole axis, which wraps) and the most links a step's transfer crosses (the spacing: a group
    strided along an axis, as a data-parallel group beside a tensor-parallel one, sends each
    transfer over the links of the chips between its own)."""
    gaps = [b - a for a, b in zip(values, values[1:])]
    hops = max(gaps, default=1)
    return wraps and all(x == hops for x in gaps) and hops * len(values) == size, hops


def _neighbours(coords: dict[tuple[int, ...], int], axis: int, values: Sequence[int],
                wrapped: bool) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every transfer along *axis* between two of the group's chips, both
    directions: each chip in the group's order, its next chip up the axis (*values*: the group's
    sorted coordinates along it) then its next chip down, around where the ring is *wrapped*."""
    # PERF: once per axis, not once per (stage, part) as before (D^2 phases per group: the TPU v4
    # pod's 2,060 data-parallel groups; benchmarks/where_time_goes.py). Groups are mostly a few
    # chips, where a Python pass beats numpy's per-call setup.
    index = {v: i for i, v in enumerate(values)}
    L = len(values)
    src: list[int] = []
    dst: list[int] = []
    for c, d in coords.items():
        i = index[c[axis]]
        for j in (i + 1, i - 1):
            if wrapped:
                j %= L
            elif not 0 <= j < L:
                continue
            nb = list(c)
            nb[axis] = values[j]
            src.append(d)
            dst.append(coords[tuple(nb)])
    return np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)


# PERF: a group of more chips than this takes its grid from ``_bulk_grid`` (numpy) rather than
# the per-chip walk of ``_grid`` and ``_neighbours``
_FEW_CHIPS = 64


def _axis_phase(axis: int, data: float, tag: str, links: tuple[np.ndarray, np.ndarray], L: int,
                full_wrap: bool, hops: int) -> Phase:
    """All-gather-style traffic on every line along *axis* (*L* chips, a ring where *full_wrap*,
    else a line) over *links* (``_neighbours``), each transfer crossing up to *hops* links:
    data = bytes gathered per chip."""
    src, dst = links
    chunk = data / L
    name = f"{tag}-axis{axis}"
    if full_wrap:
        steps = L // 2
        if L % 2 == 0:              # the last step carries half a chunk each way
            return Phase(name, steps, src, dst, np.full(len(src), chunk * (L - 1) / 2 / steps),
                         hops_per_step=hops)
        return Phase(name, steps, src, dst, np.full(len(src), chunk), hops_per_step=hops)
    return Phase(name, L - 1, src, dst, np.full(len(src), chunk), hops_per_step=hops)


def torus(op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
    """Bidirectional rings along each torus axis, all axes at once on 1/D of the data each.

    All-gather on one axis of length L with wraparound: each step every chip passes a chunk to both
    neighbours, so a chunk travels at most L/2 hops (floor(L/2) steps, the last one half a chunk
    each way when L is even). Without wraparound the axis is a line: L-1 steps, each link carrying
    one chunk per step in each direction (twice the wrapped time, SB-TPU). Reduce-scatter is the
    same traffic in reverse; all-reduce = reduce-scatter then all-gather (SB-SHARD).
    """
    if len(gi.devices) > _FEW_CHIPS:
        bulk = _bulk_grid([gi.devices], topo)
        if bulk is not None:
            return _stages(op, size, *bulk)
    grid = _grid(topo, gi)
    if grid is None or not grid[0]:
        return ring(op, gi, size)
    axes, values, coords = grid
    assert isinstance(topo.fabric, TpuFabric), topo.fabric
    shape, wraps = topo.fabric.shape, topo.fabric.wraps
    lengths = {a: len(values[a]) for a in axes}
    rings = {a: _axis_ring(values[a], shape[a], wraps[a]) for a in axes}
    links = {a: _neighbours(coords, a, values[a], rings[a][0]) for a in axes}
    return _stages(op, size, axes, lengths, rings, links)


def _stages(op: str, size: float, axes: list[int], lengths: dict[int, int],
            rings: dict[int, tuple[bool, int]], links: dict[int, tuple[np.ndarray, np.ndarray]]
            ) -> list[Stage]:
    """``torus``'s stages on the grid the group spans: its axes, their lengths, how each passes
    data (``_axis_ring``: whether it wraps, the links a transfer crosses at most) and the
    transfers along each (``_neighbours``)."""
    D = len(axes)

    def gather_stages(total: float, tag: str) -> list[Stage]:
        # Part p gathers over axes in the order rotated by p; at stage k it holds total/D/prod(later).
        stages = []
        for k in range(D):
            phases = []
            for p in range(D):
                order = [axes[(p + j) % D] for j in range(D)]
                later = math.prod(lengths[a] for a in order[k + 1:])
                axis = order[k]
                phases.append(_axis_phase(axis, total / D / later, tag, links[axis], lengths[axis],
                                          *rings[axis]))
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


def torus_bulk(op: str, groups: Sequence[Sequence[int]], size: float,
               topo: Topology) -> list[Phase] | None:
    """The phases of ``torus`` run by every group of *groups* at once, stage by stage and phase
    by phase, each the one ``merge_phases`` makes of that phase of every group's own stages (the
    same flows in the same order: group by group, then as ``_neighbours`` lists them), found in
    one numpy pass over all groups; None unless the groups are disjoint boxes of the same extents
    on one slice each, where each group's own stages are all alike (then ``torus`` per group).

    PERF: the TPU v4 pod's 2,060 data-parallel and tensor groups took ~70 us each through
    ``torus`` (benchmarks/release.py run-tpu-v4)."""
    grid = _bulk_grid(groups, topo)
    if grid is None:
        return None
    return [p for stage in _stages(op, size, *grid) for p in stage]


def _bulk_grid(groups: Sequence[Sequence[int]], topo: Topology
               ) -> tuple[list[int], dict[int, int], dict[int, tuple[bool, int]],
                          dict[int, tuple[np.ndarray, np.ndarray]]] | None:
    """What ``_stages`` takes for *groups* (``torus_bulk``'s conditions): the axes they span,
    their lengths, how each passes data, and every group's transfers along each, found in one
    numpy pass."""
    if not isinstance(topo.fabric, TpuFabric) or not groups:
        return None
    n = len(groups[0])
    if n < 2 or any(len(g) != n for g in groups):
        return None
    devs = np.asarray(groups, dtype=np.int64)                     # (G, n)
    flat = devs.ravel()
    ordered = np.sort(flat)
    if np.any(ordered[1:] == ordered[:-1]):                       # a chip in two groups
        return None
    shape, wraps = topo.fabric.shape, topo.fabric.wraps
    pods, coords = _places(topo)
    if flat.min() < 0 or flat.max() >= len(pods):
        return None
    pod = pods[devs]
    if np.any(pod != pod[:, :1]):
        return None
    xyz = coords[devs]                                            # (G, n, ndim)
    values: dict[int, np.ndarray] = {}                            # (G, L): each group's coords
    for a in range(len(shape)):
        srt = np.sort(xyz[:, :, a], axis=1)
        first = np.ones(srt.shape, bool)
        first[:, 1:] = srt[:, 1:] != srt[:, :-1]
        per_group = first.sum(axis=1)
        if np.any(per_group != per_group[0]):
            return None
        values[a] = srt[first].reshape(len(devs), int(per_group[0]))
    lengths = {a: v.shape[1] for a, v in values.items()}
    if math.prod(lengths.values()) != n:                          # not a full sub-grid
        return None
    axes = [a for a in range(len(shape)) if lengths[a] > 1]
    if not axes:
        return None
    gaps = {a: np.diff(values[a], axis=1) for a in axes}
    if any(np.any(gaps[a] != gaps[a][:1]) for a in axes):        # groups spaced differently
        return None
    rings = {a: _axis_ring(values[a][0].tolist(), shape[a], wraps[a]) for a in axes}
    lengths = {a: lengths[a] for a in axes}
    # the device of each chip of the slices, by (pod, coords)
    device = np.full((int(pod.max()) + 1,) + tuple(shape), -1, np.int64)
    device[(pod,) + tuple(xyz[:, :, a] for a in range(len(shape)))] = devs
    gid = np.repeat(np.arange(len(devs)), n).reshape(devs.shape)
    links = {}
    for a in axes:
        L = lengths[a]
        # each chip's place among its group's coordinates along a, then the next up and down
        span = int(shape[a]) + 1
        keyed = (values[a] + span * np.arange(len(devs))[:, None]).ravel()
        at_a = np.searchsorted(keyed, xyz[:, :, a] + span * gid) - L * gid       # (G, n)
        nb_i = np.stack([at_a + 1, at_a - 1], axis=2)                           # +1 then -1
        if rings[a][0]:
            nb_i %= L
            inside = np.ones(nb_i.shape, bool)
        else:
            inside = (nb_i >= 0) & (nb_i < L)
        nb = np.take_along_axis(values[a], np.where(inside, nb_i, 0).reshape(len(devs), -1),
                                axis=1).reshape(nb_i.shape)
        # (a full sub-grid: the chip at the neighbour's coordinates is in the group)
        at = [np.repeat(xyz[:, :, i, None], 2, axis=2) for i in range(len(shape))]
        at[a] = nb
        nb_at = (np.repeat(pod[:, :, None], 2, axis=2),) + tuple(at)
        links[a] = (np.repeat(devs[:, :, None], 2, axis=2)[inside], device[nb_at][inside])
    return axes, lengths, rings, links


_COORDS: weakref.WeakKeyDictionary[object, np.ndarray] = weakref.WeakKeyDictionary()


def _places(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Each chip's slice (``Topology.islands``) and coordinates in it (the graph's ``coords``,
    read once per graph), indexed by device id."""
    coords = _COORDS.get(topo.graph)
    if coords is None:
        nodes = topo.graph.nodes
        devs = topo.devices
        assert list(devs) == list(range(len(devs))), "TPU chips are numbered 0..N-1"
        coords = _COORDS[topo.graph] = np.array([nodes[d]["coords"] for d in devs], dtype=np.int64)
    return topo.islands, coords


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

    def bulk_phases(self, op: str, groups: Sequence[Sequence[int]], size: float,
                    topo: Topology) -> list[Phase] | None:
        return torus_bulk(op, groups, size, topo)


TORUS = Torus()
