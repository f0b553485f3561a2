"""Collective algorithms as stages of concurrent flows along routed paths.

Each algorithm turns (operation, group, bytes) into a list of *stages* run one after another; a
stage is a set of *phases* run at the same time; a phase is ``steps`` identical steps, each a set
of flows that start together (ring steps, torus steps) or, for pipelined algorithms (trees, NVLS,
SHARP), one step carrying the whole volume. Sizes follow nccl-tests: ``size`` is the full array
for all-reduce, all-gather and reduce-scatter, the bytes each rank sends for all-to-all, and the
message for send/recv and broadcast.

References: ring and tree schedules as NCCL builds them (rings cross each node once, entering and
leaving on the same rail; NVIDIA/nccl ``src/graph``); NVLS and SHARP as in-switch reduction with
multicast (NV-NVS3; SB-GPU "in-network reductions"); TPU collectives as bidirectional rings per
torus axis, the axes worked on at once by splitting the data (SB-SHARD).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..topology import GpuFabric, Topology, TpuFabric
from ..topology_spec import GpuClusterSpec

__all__ = ["Phase", "Stage", "GroupInfo", "build", "ALGORITHMS"]


@dataclass(frozen=True)
class Phase:
    """``steps`` repetitions of one step whose flows (src[i] -> dst[i], nbytes[i]) start together."""

    name: str
    steps: int
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    extra: tuple[tuple[Hashable, Hashable, float], ...] = ()   # flows with pseudo-endpoints
    hops_per_step: int = 1                                    # TPU: links crossed per step
    # NVLink SHARP traffic: GPU -> its node's NVSwitch fabric and back, (devices, bytes each)
    to_switch: tuple[np.ndarray, float] | None = None
    from_switch: tuple[np.ndarray, float] | None = None


Stage = tuple[Phase, ...]


@dataclass(frozen=True)
class GroupInfo:
    """The ranks of a collective and how they sit on the machine."""

    devices: tuple[int, ...]
    by_node: dict[int, tuple[int, ...]] = field(default_factory=dict)   # GPU node -> its ranks
    by_pod: dict[int, tuple[int, ...]] = field(default_factory=dict)    # TPU slice -> its ranks

    @property
    def n(self) -> int:
        return len(self.devices)

    @property
    def nodes(self) -> int:
        return max(1, len(self.by_node))

    @property
    def ppn(self) -> int:
        return max(len(v) for v in self.by_node.values()) if self.by_node else 1

    @property
    def even(self) -> bool:
        """Every node holds the same number of the group's ranks (trees and hierarchical need it)."""
        return len({len(v) for v in self.by_node.values()}) <= 1

    @property
    def even_pods(self) -> bool:
        """Every TPU slice holds the same number of the group's ranks (hierarchical needs it)."""
        return len({len(v) for v in self.by_pod.values()}) <= 1


def group_info(topo: Topology, devices: Sequence[int],
               island_of: Mapping[int, int] | None = None) -> GroupInfo:
    """*devices* grouped by GPU node (``by_node``) or, on TPU slices, by slice (``by_pod``).

    *island_of*: the node (slice) of each device, at least of *devices* (``island_of_devices``;
    PERF: a caller asking for many groups reads the graph once, benchmarks/test_bench_training.py);
    read from the graph when None."""
    by: dict[int, list[int]] = {}
    if island_of is None:
        island_of = island_of_devices(topo, devices)
    for d in devices:
        by.setdefault(island_of[d], []).append(d)
    groups = {k: tuple(v) for k, v in by.items()}
    if topo.is_tpu:
        return GroupInfo(tuple(devices), by_pod=groups)
    return GroupInfo(tuple(devices), by_node=groups)


def island_of_devices(topo: Topology, devices: Sequence[int] | None = None) -> dict[int, int]:
    """The GPU node (TPU slice) of each of *devices* (all of *topo*'s when None), from the graph."""
    nodes = topo.graph.nodes
    key = "pod" if topo.is_tpu else "node"
    return {d: nodes[d][key] for d in (topo.devices if devices is None else devices)}


def _phase(name: str, steps: int, pairs: list[tuple[int, int]], nbytes: float | Sequence[float],
           extra: tuple[tuple[Hashable, Hashable, float], ...] = (), hops: int = 1) -> Phase:
    src = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
    dst = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))
    b = (np.full(len(pairs), float(nbytes)) if isinstance(nbytes, (int, float))  # noqa: UP038
         else np.asarray(nbytes, float))
    return Phase(name, steps, src, dst, b, extra, hops)


# --------------------------------------------------------------------------- GPU algorithms

def _rings(gi: GroupInfo) -> list[list[int]]:
    """NCCL-style rings: one per rank of a node (at most one per ``NET_RAILS`` rail), each crossing
    every node once on one rail.

    A ring enters a node on one rail and leaves on a neighbouring rail, alternating direction from
    node to node so that it closes on the rail it started from (no PXN detour on the way back),
    the way NCCL's ring search pairs NICs on DGX nodes. Each node then sends and receives exactly
    one ring on each of its NICs.
    """
    if gi.nodes == 1:
        return [list(gi.devices)]
    nodes = sorted(gi.by_node)
    ppn = gi.ppn
    if any(len(gi.by_node[k]) != ppn for k in nodes):
        return [list(gi.devices)]
    if ppn == 1:
        return [[gi.by_node[k][0] for k in nodes]]
    rings = []
    for r in range(min(ppn, NET_RAILS)):       # one ring per network rail
        ring: list[int] = []
        entry = r
        for i, k in enumerate(nodes):
            local = gi.by_node[k]
            step = -1 if i % 2 == 0 else 1
            exit_ = (entry + step) % ppn
            if i == len(nodes) - 1 and entry != r:
                exit_ = r
            rest = [j for j in (((entry - step * m) % ppn) for m in range(1, ppn)) if j != exit_]
            order = [entry] + rest + ([exit_] if exit_ != entry else [])
            ring += [local[j] for j in order]
            entry = exit_
        rings.append(ring)
    return rings


def _mesh_rings(devs: Sequence[int]) -> list[list[int]]:
    """Rings inside one node whose GPUs are wired to each other (no NVSwitch): every Hamiltonian
    cycle of the mesh, each way round, so that every NVLink of every GPU carries ring traffic in
    both directions (on 4 GPUs: 3 cycles x 2 directions = 6 rings, each directed link in 2 of
    them). NCCL's ring search does the same: it keeps adding channels while NVLink bandwidth is
    left (NVIDIA/nccl ``src/graph/search.cc``), so its rings use all of a GPU's links, not the one
    link to its ring neighbour. Groups of more than 6 ranks keep the single ring."""
    devs = list(devs)
    if len(devs) <= 2 or len(devs) > 6:
        return [devs]
    first, rest = devs[0], devs[1:]
    out: list[list[int]] = []
    for perm in itertools.permutations(rest):
        if perm[0] < perm[-1]:                    # one of each cycle's two directions ...
            out.append([first, *perm])
            out.append([first, *reversed(perm)])  # ... and the other
    return out


def ring(op: str, gi: GroupInfo, size: float, mesh: bool = False) -> list[Stage]:
    """Ring schedules (NCCL's ``_rings``; *mesh*: a single node with GPUs wired to each other)."""
    rings = _mesh_rings(gi.devices) if mesh and gi.nodes == 1 else _rings(gi)
    n, R = gi.n, len(rings)
    pairs = [(ring[i], ring[(i + 1) % n]) for ring in rings for i in range(n)]
    if op == "allreduce":
        return [(_phase("ring", 2 * (n - 1), pairs, size / (n * R)),)]
    if op in ("allgather", "reducescatter"):
        return [(_phase("ring", n - 1, pairs, size / (n * R)),)]
    if op == "broadcast":                    # pipelined chain from rank 0 round each ring
        chain = [(ring[i], ring[i + 1]) for ring in rings for i in range(n - 1)]
        return [(_phase("ring-bcast", 1, chain, size / R),)]
    raise AssertionError(op)


def _btree_parent(rank: int, nranks: int) -> int:
    """Parent of *rank* in NCCL's binary tree over *nranks* (src/graph/trees.cc ``ncclGetBtree``,
    root 0): the tree is in-order, so a leaf's parent is its neighbour in rank order and a level's
    edges span twice the level below's. With b the lowest set bit of the rank, the parent is the
    rank with b cleared and 2b set, or, when that is past the last rank, the rank with b cleared."""
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < nranks else rank ^ bit


def _tree_edges(nodes: int) -> list[list[tuple[int, int]]]:
    """NCCL's double binary tree over node indices: (child, parent) edges of the two trees.

    Tree 0 is ``_btree_parent``'s; tree 1 is its mirror (node i -> nodes-1-i) for an even count,
    its shift by one (node i -> i+1 mod nodes) for an odd count (``ncclGetDtree``), so a node inner
    in one tree is a leaf in the other. Most edges join ranks close in order, which a fabric with
    locality (leaf switches, dragonfly groups) keeps under one switch."""
    t0 = [(i, _btree_parent(i, nodes)) for i in range(1, nodes)]
    if nodes % 2 == 0:
        t1 = [(nodes - 1 - c, nodes - 1 - p) for c, p in t0]
    else:
        t1 = [((c + 1) % nodes, (p + 1) % nodes) for c, p in t0]
    return [t0, t1]


def _tree_flows(gi: GroupInfo, size: float, rails: int | None = None
                ) -> tuple[list[tuple[int, int]], list[float]]:
    """Flows of the two trees between nodes: each tree carries half the data, each of *rails*
    rails (default: every rank of a node) its 1/rails share (one channel per rail), up (reduce)
    and down (broadcast) at once."""
    nodes = sorted(gi.by_node)
    k = gi.ppn if rails is None else max(1, min(rails, gi.ppn))
    pairs: list[tuple[int, int]] = []
    nbytes: list[float] = []
    for t in _tree_edges(len(nodes)):
        for c, p in t:
            for r in range(k):
                a, b = gi.by_node[nodes[c]][r], gi.by_node[nodes[p]][r]
                pairs += [(a, b), (b, a)]
                nbytes += [size / 2 / k] * 2
    return pairs, nbytes


def tree(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """All-reduce: reduce up and broadcast down the two trees (half the data each), pipelined,
    over the node's rails (every GPU's NIC, at most ``NET_RAILS``); inside a node a chain over
    NVLink."""
    nodes = sorted(gi.by_node)
    ppn = gi.ppn
    pairs, nbytes = _tree_flows(gi, size, rails=NET_RAILS)
    for k in nodes:                               # intra-node chain, both trees, both directions
        local = gi.by_node[k]
        for i in range(ppn - 1):
            pairs += [(local[i], local[i + 1]), (local[i + 1], local[i])]
            nbytes += [size, size]
    return [(_phase("tree", 1, pairs, nbytes),)]


def nvls(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """NVLink SHARP inside one node: the switch reduces (multimem loads) and multicasts (stores).

    All-reduce moves S + S/n up and S/n + S down each GPU's NVLinks; reduce-scatter S up, S/n down;
    all-gather S/n up, S down.
    """
    n = gi.n
    up = {"allreduce": size * (1 + 1 / n), "reducescatter": size, "allgather": size / n}[op]
    down = {"allreduce": size * (1 + 1 / n), "reducescatter": size / n, "allgather": size}[op]
    devs = np.asarray(gi.devices, dtype=np.int64)
    empty = np.zeros(0, np.int64)
    return [(Phase("nvls", 1, empty, empty, np.zeros(0), to_switch=(devs, up),
                   from_switch=(devs, down)),)]


def _intra_nvls(gi: GroupInfo, size: float, switch_reduces: bool = True) -> dict[str, Any]:
    """All-reduce inside each node through the NVSwitches: with NVLink SHARP (*switch_reduces*)
    S + S/ppn up and down every GPU; without it the GPUs reduce-scatter and all-gather among
    themselves through the switches, 2 (ppn - 1) / ppn x S each way."""
    devs = np.asarray(gi.devices, dtype=np.int64)
    ppn = gi.ppn
    vol = size * (1 + 1 / ppn) if switch_reduces else 2 * size * (ppn - 1) / ppn
    return {"to_switch": (devs, vol), "from_switch": (devs, vol)}


# The NICs of a node NCCL's graphs cross the network on: one NIC per ring/tree graph channel pair
# (16 graph channels across nodes, two per NIC: sim.collectives.nccl.channels, from DGX logs) and
# one NIC:GPU pair, the "head", per NVLS graph channel (NVIDIA/nccl src/graph/search.cc: "NVLS
# search only tries to find NIC:GPU combinations to compute the heads"; src/graph/connect.cc
# ``connectNvls``: nHeads = the NVLS graph's nChannels, 8 on DGX H100, NVIDIA/nccl#1197). On an
# 8-GPU node that is every NIC; a 72-GPU NVL72 rack (one node to NCCL) crosses on 8 of its 72.
NET_RAILS = 8


def nvls_tree(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """NVLSTree: NVLS reduce/multicast inside each node, a double binary tree between nodes on
    the node's NVLS heads (``NET_RAILS`` of its GPUs, each with its own NIC), each head carrying
    a 1/heads shard; pipelined."""
    pairs, nbytes = _tree_flows(gi, size, rails=NET_RAILS)
    ph = _phase("nvls_tree", 1, pairs, nbytes)
    return [(Phase(ph.name, 1, ph.src, ph.dst, ph.nbytes, **_intra_nvls(gi, size)),)]


def collnet(op: str, gi: GroupInfo, size: float, leaf_of: dict[int, str],
            switch_reduces: bool = True) -> list[Stage]:
    """InfiniBand SHARP (CollNet Direct) all-reduce: reduce-scatter in the node (NVLS where the
    NVSwitches reduce, *switch_reduces*; else the GPUs' own reduce-scatter over NVLink), each
    GPU's shard up to its leaf's reduction engine and the result back, then the node's
    all-gather (NVLS multicast, or the GPUs' own); pipelined."""
    ppn = gi.ppn
    extra = []
    for d in gi.devices:
        leaf = leaf_of[d]
        extra += [(d, ("sharp", leaf), size / ppn), (("sharp", leaf), d, size / ppn)]
    empty = np.zeros(0, np.int64)
    return [(Phase("collnet", 1, empty, empty, np.zeros(0), tuple(extra),
                   **_intra_nvls(gi, size, switch_reduces)),)]


def pat(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """PAT (Parallel Aggregated Trees, NCCL >= 2.23; one rank per node): all-gather in
    ceil(log2 n) rounds, rank r sending at round k to rank r + 2^k everything it holds
    (min(2^k, n - 2^k) blocks of size/n), the aggregation of the binomial trees rooted at every
    rank; reduce-scatter is the same rounds reversed. Each rank moves (n-1)/n of the buffer, as on
    a ring, in log2(n) rounds instead of n-1 steps."""
    n = gi.n
    devs = gi.devices
    stages: list[Stage] = []
    k = 1
    while k < n:
        pairs = [(devs[i], devs[(i + k) % n]) for i in range(n)]
        stages.append((_phase(f"pat-{k}", 1, pairs, min(k, n - k) * size / n),))
        k *= 2
    return stages if op == "allgather" else stages[::-1]


def pairwise(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """All-to-all: every rank sends size/n to every other rank at once (NCCL's grouped send/recv)."""
    n = gi.n
    if n > 2048:
        raise ConfigError(f"op alltoall: groups of more than 2048 ranks are not modelled yet, got {n}")
    devs = gi.devices
    pairs = [(a, b) for a in devs for b in devs if a != b]
    return [(_phase("pairwise", 1, pairs, size / n),)]


def p2p(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """send/recv as nccl-tests runs it: every rank sends ``size`` to the next, receives from the last."""
    n = gi.n
    pairs = [(gi.devices[i], gi.devices[(i + 1) % n]) for i in range(n)]
    return [(_phase("sendrecv", 1, pairs, size),)]


# --------------------------------------------------------------------------- TPU algorithms

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

    def axis_phase(axis: int, data: float, tag: str) -> Phase:
        """All-gather-style traffic on every line along *axis*: data = bytes gathered per chip."""
        L = lengths[axis]
        full_wrap = wraps[axis] and L == shape[axis]
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
                return _phase(f"{tag}-axis{axis}", steps, pairs, chunk * (L - 1) / 2 / steps)
            return _phase(f"{tag}-axis{axis}", steps, pairs, chunk)
        return _phase(f"{tag}-axis{axis}", L - 1, pairs, chunk)

    def gather_stages(total: float, tag: str) -> list[Stage]:
        # Part p gathers over axes in the order rotated by p; at stage k it holds total/D/prod(later).
        stages = []
        for k in range(D):
            phases = []
            for p in range(D):
                order = [axes[(p + j) % D] for j in range(D)]
                later = math.prod(lengths[a] for a in order[k + 1:])
                phases.append(axis_phase(order[k], total / D / later, tag))
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


def hierarchical(op: str, gi: GroupInfo, size: float, topo: Topology,
                 inner: list[list[int]]) -> list[Stage]:
    """All-reduce as reduce-scatter inside each island (NVLink node / TPU pod), all-reduce of the
    shards across islands (a ring per shard position), all-gather inside the island."""
    if op != "allreduce":
        raise ConfigError(f"algo hierarchical: only for allreduce, got {op}")
    k = len(inner[0])
    islands = len(inner)
    subs = [GroupInfo(tuple(m), {0: tuple(m)}) for m in inner]
    # Islands run their own stages side by side: stage j of every island is one stage.
    rs = [_inner_stage("reducescatter", sub, size, topo) for sub in subs]
    ag = [_inner_stage("allgather", sub, size, topo) for sub in subs]
    pairs = [(inner[i][j], inner[(i + 1) % islands][j]) for j in range(k) for i in range(islands)]
    cross = _phase("hier-cross", 2 * (islands - 1), pairs, size / k / islands)
    stages: list[Stage] = _zip_stages(rs) + [(cross,)] + _zip_stages(ag)
    return [s for s in stages if s]


def _inner_stage(op: str, sub: GroupInfo, size: float, topo: Topology) -> list[Stage]:
    if sub.n == 1:
        return []
    if topo.is_tpu:
        return torus(op, sub, size, topo)
    spec = topo.spec
    return ring(op, sub, size, mesh=isinstance(spec, GpuClusterSpec) and spec.mesh_links > 0)


def _zip_stages(per_island: list[list[Stage]]) -> list[Stage]:
    depth = max((len(s) for s in per_island), default=0)
    return [tuple(p for st in per_island if j < len(st) for p in st[j]) for j in range(depth)]


ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "collnet", "hierarchical", "torus", "pairwise",
              "p2p", "pat")


def build(algo: str, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
    """Stages of *algo* for *op* (the caller has checked that the pair is valid)."""
    if algo == "ring":
        spec = topo.spec
        return ring(op, gi, size, mesh=isinstance(spec, GpuClusterSpec) and spec.mesh_links > 0)
    if algo == "tree":
        return tree(op, gi, size)
    if algo == "nvls":
        return nvls(op, gi, size)
    if algo == "nvls_tree":
        return nvls_tree(op, gi, size)
    if algo == "collnet":
        g = topo.graph
        leaf_of = {d: next(x for x in g[f"n{g.nodes[d]['node']}/nic{g.nodes[d]['rail']}"]
                           if g.nodes[x]["kind"] == "leaf") for d in gi.devices}
        fab = topo.fabric
        return collnet(op, gi, size, leaf_of, isinstance(fab, GpuFabric) and fab.nvls)
    if algo == "pat":
        return pat(op, gi, size)
    if algo == "pairwise":
        return pairwise(op, gi, size)
    if algo == "p2p":
        return p2p(op, gi, size)
    if algo == "torus":
        return torus(op, gi, size, topo)
    if algo == "hierarchical":
        islands = gi.by_pod if topo.is_tpu else gi.by_node
        inner = [list(v) for _, v in sorted(islands.items())]
        if len({len(x) for x in inner}) != 1:
            raise ConfigError("algo hierarchical: needs the same number of ranks on every node/pod")
        return hierarchical(op, gi, size, topo, inner)
    raise AssertionError(algo)
