"""NCCL's ring: every operation but all-to-all and send/recv, on GPUs and (as the fallback) TPUs.

Rings as NCCL builds them: each crosses every node once, entering and leaving on the same rail
(NVIDIA/nccl ``src/graph``); inside a node of GPUs wired to each other every Hamiltonian cycle of
the mesh (``src/graph/search.cc``). The cost constants are NVIDIA/nccl ``src/graph/tuning.cc`` @
5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL-TUNE, ../shared/reference/FACTS.md section 3b).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from ..topology import Topology
from ..topology_spec import NCCL_PROTOCOLS, GpuClusterSpec
from .algorithm import REFERENCE_WIRES, Algorithm, Call, Wires, latency_terms_us
from .stages import NET_RAILS, GroupInfo, Phase, Stage, group_info, phase
from .tree import TREE_NET_US

__all__ = ["RING", "Ring", "mesh_of", "ring"]

_NET_OVERHEAD_US = 1.0          # getNetOverhead, Intel x86 host; x3 for Simple
# LL128 bus bandwidth per channel by arch, GB/s (tuning.cc @ 5067397c)
_LL128_PER_CH = {"ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}


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
        return [(phase("ring", 2 * (n - 1), pairs, size / (n * R)),)]
    if op in ("allgather", "reducescatter"):
        return [(phase("ring", n - 1, pairs, size / (n * R)),)]
    if op == "broadcast":                    # pipelined chain from rank 0 round each ring
        chain = [(ring[i], ring[i + 1]) for ring in rings for i in range(n - 1)]
        return [(phase("ring-bcast", 1, chain, size / R),)]
    raise AssertionError(op)


def mesh_of(topo: Topology) -> bool:
    """Whether *topo*'s nodes wire their GPUs to each other (no NVSwitch): rings use every link."""
    spec = topo.spec
    return isinstance(spec, GpuClusterSpec) and spec.mesh_links > 0


class Ring(Algorithm):
    """NCCL's ring (LL, LL128, Simple); on TPU slices the fallback after the torus."""

    name = "ring"
    ops = frozenset({"allreduce", "allgather", "reducescatter", "broadcast"})
    on_tpu = True
    needs_even_nodes = False
    tpu_fallback = True
    nccl_protocols = NCCL_PROTOCOLS
    # 12 graph channels on an 8-GPU NVSwitch node (NCCL logs: "Pattern 4, nChannels 12, bw 20/20"
    # on A100, "nChannels 12, bw 30/30" on DGX H100); 16 across nodes (8 NICs, two channels each)
    channels_one_node = 12
    follows_net_channels = True
    drops_channels = True
    # baseLatencies, hwLatencies[NVLINK], hwLatencies[NET] [LL, LL128, Simple], us (tuning.cc @
    # 5067397c)
    base_latency_us: ClassVar[tuple[float, float, float]] = (6.6, 14.0, 8.4)
    nvlink_us: ClassVar[tuple[float, float, float]] = (0.6, 1.9, 3.4)
    net_us: ClassVar[tuple[float, float, float]] = (2.7, 4.0, 14.0)

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        return ring(op, gi, size, mesh=mesh_of(topo))

    def bulk_phases(self, op: str, groups: Sequence[Sequence[int]], size: float,
                    topo: Topology) -> list[Phase] | None:
        """Every group's rings at once where the groups are one group shifted (``_shifts``):
        a ring is built from its group's ranks and how they sit on nodes alone, so the shifted
        group's rings are the first group's shifted, and each phase of them all is the first
        group's phase repeated at each shift, in group order (what ``merge_phases`` makes of
        them one by one; PERF: tensor- and data-parallel groups of a 16,384-GPU stage,
        benchmarks/release.py run-16k)."""
        shifts = _shifts(groups, topo)
        if shifts is None:
            return None
        gi = group_info(topo, groups[0])
        out = []
        for stage in self.stages(op, gi, size, topo):
            for p in stage:
                assert not (p.extra or p.uniform or p.to_switch or p.from_switch), p.name
                out.append(Phase(p.name, p.steps, (p.src[None, :] + shifts[:, None]).ravel(),
                                 (p.dst[None, :] + shifts[:, None]).ravel(),
                                 np.tile(p.nbytes, len(shifts)), hops_per_step=p.hops_per_step))
        return out

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        """Base + one NVLink step per step inside a node + one network step per step between
        nodes; x1.4 for a Simple all-reduce across nodes with >= 64 bytes per channel and rank."""
        op, ranks, nodes = call.op, call.ranks, call.nodes
        # "With ppn=1 latencies are fully exposed, use the Tree network latency" (tuning.cc, 2.23+)
        row = TREE_NET_US if exposed_net and call.ppn == 1 else self.net_us
        base, intra, inter = latency_terms_us(self.base_latency_us, self.nvlink_us, row, call, wires,
                                              net_us)
        nsteps = 2 * (ranks - 1) if op == "allreduce" else (ranks - 1 if op in
                                                             ("allgather", "reducescatter") else ranks)
        n_inter = self._network_steps(op, nodes) if nodes > 1 else 0
        if nodes > 1:
            intra = max(intra, _NET_OVERHEAD_US * (3 if call.proto == "Simple" else 1))
        lat = base + (nsteps - n_inter) * intra + n_inter * inter
        nch = self.channels(nodes == 1, net_channels)
        if nodes > 1 and op == "allreduce" and call.proto == "Simple" and call.size / (nch * ranks) >= 64:
            lat *= 1.4
        return lat * 1e-6

    def thread_bytes_scale(self, proto: str, ranks: int) -> int:
        """A ring LL channel wants nRanks times the bytes per thread (NCCL_LL_THREAD_THRESHOLD)."""
        return ranks if proto == "LL" else 1

    def channel_ceiling_GBps(self, proto: str, arch: str, col: int, nch: int) -> float:
        if proto == "LL128":
            return nch * _LL128_PER_CH.get(arch, 36.7)
        return super().channel_ceiling_GBps(proto, arch, col, nch)

    def ceiling_whole_call(self, proto: str) -> bool:
        """A ring LL call bounds its whole self by LL's ceiling (llMaxBw) whatever its channels:
        NCCL gives each ring LL channel nRanks times the bytes of any other before it adds one, and
        the few channels a small call runs on each stream at their links' share."""
        return proto == "LL"

    def network_steps(self, call: Call) -> float:
        return self._network_steps(call.op, call.nodes)

    @staticmethod
    def _network_steps(op: str, nodes: int) -> int:
        """The ring's steps between nodes: each node's boundary crossed once per pass, twice for an
        all-reduce (reduce-scatter, then all-gather)."""
        return 2 * (nodes - 1) if op == "allreduce" else nodes - 1


RING = Ring()


def _shifts(groups: Sequence[Sequence[int]], topo: Topology) -> np.ndarray | None:
    """How far each group's ranks sit from the first group's (one number a group), where every
    group is the first shifted rank by rank and its ranks' GPU nodes are the first's shifted
    alike (the same ranks a node, nodes in the same order); None where they are not, or for
    fewer than two groups."""
    if len(groups) < 2 or len({len(g) for g in groups}) != 1:
        return None
    g = np.asarray(groups, np.int64)
    shift = g[:, :1] - g[:1, :1]
    if not np.array_equal(g - shift, np.broadcast_to(g[:1], g.shape)):
        return None
    if not topo.is_tpu:
        node = topo.islands[g]
        moved = node[:, :1] - node[:1, :1]
        if not np.array_equal(node - moved, np.broadcast_to(node[:1], node.shape)):
            return None
    return shift.ravel()
