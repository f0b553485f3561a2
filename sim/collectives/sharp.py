"""In-network reduction: NVLink SHARP inside a node (NVLS), across nodes under a tree (NVLSTree), and
InfiniBand SHARP (CollNet), with NCCL's cost model for each.

The switches reduce (multimem loads) and multicast (stores) (NV-NVS3; SB-GPU "in-network
reductions"). The cost constants are NVIDIA/nccl ``src/graph/tuning.cc`` @
5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL-TUNE, ../shared/reference/FACTS.md section 3b);
the chunk sizes ``src/enqueue.cc`` ``calcCollChunking`` of the 2.19-2.28 releases.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..topology import GpuFabric, Topology
from .algorithm import REFERENCE_WIRES, Algorithm, Call, Wires, latency_terms_us
from .platform import Platform
from .stages import NET_RAILS, GroupInfo, Phase, Stage, phase
from .tree import tree_flows

__all__ = ["COLLNET", "NVLS", "NVLS_CHUNK_MAX", "NVLS_EFFICIENCY", "NVLS_TREE", "CollNet", "Nvls",
           "NvlsTree", "nvls_efficiency"]

# nvlsEfficiency by arch (tuning.cc @ 5067397c)
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
# NVLSTree's bus bandwidth per channel by arch, GB/s, [1 node, 2 nodes, >= 3 nodes] (tuning.cc)
_NVLS_TREE_PER_CH = {"hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}

# NVLink SHARP moves each channel's data in chunks of at most nvlsChunkSize (128 KiB, NCCL's
# default) and smaller ones for smaller calls (enqueue.cc ``calcCollChunking``); each of its
# channels works on one chunk per local rank ("head") at a time.
NVLS_CHUNK_MAX = 128 * 1024


def nvls_efficiency(arch: str, chunk: int) -> float:
    """Fraction of the NVLink rate NVLS reaches with chunks of *chunk* bytes: every chunk costs a
    fixed synchronisation overhead, worth ``c0`` bytes of transfer, so ``chunk / (chunk + c0)``.
    NCCL's nvlsEfficiency is that fraction at its largest chunk (128 KiB), which fixes
    ``c0 = 128 KiB x (1 / nvlsEfficiency - 1)`` (22.6 KiB on Hopper)."""
    eff = NVLS_EFFICIENCY.get(arch, 0.85)
    c0 = NVLS_CHUNK_MAX * (1 / eff - 1)
    return chunk / (chunk + c0)


def _intra_nvls(gi: GroupInfo, size: float, switch_reduces: bool = True) -> dict[str, Any]:
    """All-reduce inside each node through the NVSwitches: with NVLink SHARP (*switch_reduces*)
    S + S/ppn up and down every GPU; without it the GPUs reduce-scatter and all-gather among
    themselves through the switches, 2 (ppn - 1) / ppn x S each way."""
    devs = np.asarray(gi.devices, dtype=np.int64)
    ppn = gi.ppn
    vol = size * (1 + 1 / ppn) if switch_reduces else 2 * size * (ppn - 1) / ppn
    return {"to_switch": (devs, vol), "from_switch": (devs, vol)}


class _NvlsBase(Algorithm):
    """What NVLS and NVLSTree share: Simple only, their NVLink SHARP part priced apart, stretched
    by NVLS's efficiency at the chunk a call gets (``chunk_bytes``)."""

    nccl_protocols = ("Simple",)
    switch_part = True
    # NVLS graph channels: 8 (DGX H100 log in NVIDIA/nccl#1197)
    channels_across = 8
    base_latency_us: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 0.0)
    nvlink_us: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 25.0)
    net_us: ClassVar[tuple[float, float, float]]

    def chunk_bytes(self, size: int, ranks: int, nodes: int) -> int:
        """The chunk NCCL moves for a call of *size* bytes (enqueue.cc ``calcCollChunking``)."""
        raise NotImplementedError(self.name)

    def _chunk_ops(self, ranks: int, nodes: int, max_heads: int | None) -> int:
        """The call's concurrent chunk operations, channels x NVLS heads (enqueue.cc
        ``calcCollChunking``: nChannels x nvls.nHeads)."""
        heads = max(1, ranks // max(nodes, 1))
        if max_heads is not None:
            heads = min(heads, max_heads)
        return 2 * self.channels(nodes == 1) * heads

    def switch_times_s(self, base_s: float, nvls_s: float | None, call: Call,
                       hw: Platform) -> tuple[float, float]:
        """NVLS's efficiency is its switches' (NCCL: intraBw = bwIntra x nvlsEfficiency, then the
        smaller of that and the network's bandwidth): *nvls_s*, the transfer time of the NVLS
        traffic alone at the links' rates, is what it stretches; a call whose network part
        (*base_s* is the whole, both parts at once) takes longer than the stretched NVLS part runs
        at the network's pace. None: all of it is NVLS traffic. The tuner prices NVLS at its fixed
        nvlsEfficiency; the call runs with the chunks its size gets (``chunk_bytes``)."""
        switch = base_s if nvls_s is None else nvls_s
        tuned = max(base_s, switch / NVLS_EFFICIENCY.get(hw.arch, 0.85))
        chunk = self.chunk_bytes(call.size, call.ranks, call.nodes)
        return tuned, max(base_s, switch / nvls_efficiency(hw.arch, chunk))


class Nvls(_NvlsBase):
    """NVLink SHARP inside one node."""

    name = "nvls"
    ops = frozenset({"allreduce", "allgather", "reducescatter"})
    channels_one_node = 8
    net_us: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 18.0)

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        return hw.nvls and gi.ppn > 1 and gi.nodes == 1

    def refusal(self, op: str, hw: Platform) -> str:
        return (f"needs NVLink SHARP (NVSwitch gen 3+) inside one node; {hw.where} "
                f"{'has none' if not hw.nvls else 'is used across nodes here'}")

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        """All-reduce moves S + S/n up and S/n + S down each GPU's NVLinks; reduce-scatter S up,
        S/n down; all-gather S/n up, S down."""
        n = gi.n
        up = {"allreduce": size * (1 + 1 / n), "reducescatter": size, "allgather": size / n}[op]
        down = {"allreduce": size * (1 + 1 / n), "reducescatter": size / n, "allgather": size}[op]
        devs = np.asarray(gi.devices, dtype=np.int64)
        empty = np.zeros(0, np.int64)
        return [(Phase("nvls", 1, empty, empty, np.zeros(0), to_switch=(devs, up),
                       from_switch=(devs, down)),)]

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        _, intra, inter = latency_terms_us(self.base_latency_us, self.nvlink_us, self.net_us, call,
                                           wires, net_us)
        return (intra + (inter if call.nodes > 1 else 0.0)) * 1e-6

    def chunk_bytes(self, size: int, ranks: int, nodes: int) -> int:
        """128 KiB, shrinking while the call is small for its concurrent operations (channels x
        heads, every GPU of the node a head)."""
        ops = self._chunk_ops(ranks, nodes, None)
        c = NVLS_CHUNK_MAX
        for mult, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if size < mult * ops * c and c > floor:
                c = floor
        return c


class NvlsTree(_NvlsBase):
    """NVLSTree: NVLS reduce/multicast inside each node, a double binary tree between nodes on the
    node's NVLS heads (``NET_RAILS`` of its GPUs, each with its own NIC); pipelined."""

    name = "nvls_tree"
    ops = frozenset({"allreduce"})
    net_us: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 20.9)

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        return hw.nvls and gi.nodes > 1 and gi.ppn > 1

    def refusal(self, op: str, hw: Platform) -> str:
        return (f"needs NVLink SHARP and several nodes; {hw.where} "
                f"{'has no NVLS' if not hw.nvls else 'group is on one node'}")

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        """Each head carries a 1/heads shard of the tree's traffic."""
        pairs, nbytes = tree_flows(gi, size, rails=NET_RAILS)
        ph = phase("nvls_tree", 1, pairs, nbytes)
        return [(Phase(ph.name, 1, ph.src, ph.dst, ph.nbytes, **_intra_nvls(gi, size)),)]

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        base, intra, inter = latency_terms_us(self.base_latency_us, self.nvlink_us, self.net_us,
                                              call, wires, net_us)
        return (base + intra + 2 * math.log2(max(call.nodes, 1)) * inter) * 1e-6

    def channel_ceiling_GBps(self, proto: str, arch: str, col: int, nch: int) -> float:
        return nch * _NVLS_TREE_PER_CH.get(arch, _NVLS_TREE_PER_CH["hopper"])[col]

    def chunk_bytes(self, size: int, ranks: int, nodes: int) -> int:
        """128 KiB (64 KiB from 4 nodes on), shrinking while the call is small for its concurrent
        operations (channels x heads: the GPUs with the NICs the tree runs on, ``NET_RAILS`` at
        most)."""
        ops = self._chunk_ops(ranks, nodes, NET_RAILS)
        c = NVLS_CHUNK_MAX if nodes < 4 else 65536
        for mult, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
            if size < mult * ops * c and c > floor:
                c = floor
        return c

    def pipeline_fill_s(self, call: Call, net_Bps: float) -> float:
        """Simple moves whole chunks, so the first chunk of each channel crosses the pipeline's
        stages one after another before the stream runs full: NVLS reduce in the node, log2(nodes)
        network hops up the tree and as many down (the network stages set the pace: every channel
        of a GPU shares its NIC, *net_Bps*), the multicast at the end counted with the last hop;
        2 log2(nodes) + 1 chunk times at one channel's network rate. 0 without a network."""
        if net_Bps <= 0:
            return 0.0
        return self.fill_s(call.size, call.ranks, call.nodes, net_Bps)

    def fill_s(self, size: int, ranks: int, nodes: int, net_Bps: float) -> float:
        """``pipeline_fill_s`` of a call of *size* bytes on *ranks* ranks over *nodes* nodes."""
        stages = 2 * math.log2(max(nodes, 1)) + 1
        chunk = self.chunk_bytes(size, ranks, nodes)
        return stages * chunk / (net_Bps / (2 * self.channels(False)))


class CollNet(Algorithm):
    """InfiniBand SHARP (CollNet Direct) all-reduce across nodes."""

    name = "collnet"
    ops = frozenset({"allreduce"})
    channels_across = 8
    base_latency_us: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 0.0)
    nvlink_us: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 3.7)
    net_us: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 31.0)

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        return hw.sharp and gi.nodes > 1

    def refusal(self, op: str, hw: Platform) -> str:
        return "needs InfiniBand SHARP switches (cluster.sharp: true) and several nodes"

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        """Reduce-scatter in the node (NVLS where the NVSwitches reduce; else the GPUs' own
        reduce-scatter over NVLink), each GPU's shard up to its leaf's reduction engine and the
        result back, then the node's all-gather (NVLS multicast, or the GPUs' own); pipelined."""
        g = topo.graph
        ppn = gi.ppn
        extra = []
        for d in gi.devices:
            leaf = next(x for x in g[f"n{g.nodes[d]['node']}/nic{g.nodes[d]['rail']}"]
                        if g.nodes[x]["kind"] == "leaf")
            extra += [(d, ("sharp", leaf), size / ppn), (("sharp", leaf), d, size / ppn)]
        fab = topo.fabric
        switch_reduces = isinstance(fab, GpuFabric) and fab.nvls
        empty = np.zeros(0, np.int64)
        return [(Phase("collnet", 1, empty, empty, np.zeros(0), tuple(extra),
                       **_intra_nvls(gi, size, switch_reduces)),)]

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        base, intra, inter = latency_terms_us(self.base_latency_us, self.nvlink_us, self.net_us,
                                              call, wires, net_us)
        ppn = call.ppn
        return (base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter) * 1e-6

    def switch_times_s(self, base_s: float, nvls_s: float | None, call: Call,
                       hw: Platform) -> tuple[float, float]:
        """The node-local part is NVLS traffic where the NVSwitches reduce (``Platform.nvls``),
        at NVLS's fixed efficiency; elsewhere the GPUs' own reduce-scatter and all-gather carry
        it at the links' rate."""
        if not hw.nvls:
            return base_s, base_s
        t = max(base_s, base_s / NVLS_EFFICIENCY.get(hw.arch, 0.85))
        return t, t


NVLS = Nvls()
NVLS_TREE = NvlsTree()
COLLNET = CollNet()
