"""NCCL's double binary tree: its all-reduce across nodes, and NCCL's cost model for it.

The trees are NCCL's (src/graph/trees.cc ``ncclGetBtree``, ``ncclGetDtree``): two in-order binary
trees over the nodes, each carrying half the data, a node inner in one a leaf in the other. The
cost constants are NVIDIA/nccl ``src/graph/tuning.cc`` @ 5067397c2676d5aed50042fc39e5c8ee96eb0027
(NCCL-TUNE, ../shared/reference/FACTS.md section 3b); the chunk rules ``src/enqueue.cc``
``calcCollChunking`` of the 2.19-2.28 releases.
"""

from __future__ import annotations

import math
from typing import ClassVar

from ..topology import Topology
from ..topology_spec import NCCL_PROTOCOLS
from .algorithm import PROTO_INDEX, REFERENCE_WIRES, Algorithm, Call, Wires, latency_terms_us
from .platform import Platform
from .stages import NET_RAILS, GroupInfo, Stage, phase

__all__ = ["TREE", "TREE_NET_US", "Tree", "tree", "tree_chunk_bytes", "tree_correction",
           "tree_depth", "tree_edges", "tree_fill_factor", "tree_flows"]

# hwLatencies[NET][TREE] [LL, LL128, Simple], us (tuning.cc @ 5067397c); rings use it too where
# one rank per node leaves their latencies "fully exposed"
TREE_NET_US = (5.0, 8.5, 14.0)
# Per-channel bus-bandwidth ceilings, GB/s, [1 node, 2 nodes, >= 3 nodes] (tuning.cc @ 5067397c:
# treeBw / LL128 per channel by arch)
_TREE_PER_CH = {"ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
                "blackwell": (70.0, 42.8, 24.0)}
_TREE_LL128_PER_CH = {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0),
                      "blackwell": (55.6, 31.67, 20.0)}

# NCCL's treeCorrectionFactor (tuning.cc, ncclTopoGetAlgoTime): the tree all-reduce's bandwidth
# at sizes 64 B x 2^k, k = 0..22, as a fraction of its model ("Trees are not perfectly sticking
# to the model for medium sizes"), per protocol LL, LL128, Simple; 1 outside the table.
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)

# The Simple protocol's step: its buffer (NCCL_BUFFSIZE, 4 MiB by default) over NCCL_STEPS (8)
TREE_SIMPLE_STEP = 4 * 2**20 // 8


def tree_correction(proto: str, size: int) -> float:
    """NCCL's bandwidth correction of the tree all-reduce at *size* bytes (``log2i(size >> 6)``)."""
    k = (int(size) >> 6).bit_length() - 1
    return _TREE_CORRECTION[PROTO_INDEX[proto]][k] if 0 <= k < 23 else 1.0


def tree_depth(ranks: int, nodes: int) -> int:
    """NCCL's tree depth: the node's chain plus log2(nodes) hops between nodes
    (src/graph/connect.cc ``connectTrees``: nRanks/nNodes - 1 + log2i(nNodes))."""
    return max(1, ranks // max(nodes, 1)) - 1 + max(0, int(math.log2(max(nodes, 1))))


def tree_chunk_bytes(size: int, channels_: int, depth: int) -> int:
    """The chunk NCCL's tree all-reduce moves per step on the Simple protocol: one buffer step,
    halved while the call gives each channel few chunks for the tree's depth (enqueue.cc
    ``calcCollChunking``: fewer than depth x 8 down to 128 KiB, depth x 4 down to 64 KiB, depth
    down to 32 KiB)."""
    c = TREE_SIMPLE_STEP
    for mult, floor in ((8, 131072), (4, 65536), (1, 32768)):
        while size / (channels_ * c) < depth * mult and c > floor:
            c //= 2
    return c


def tree_fill_factor(size: int, ranks: int, nodes: int, channels_: int) -> float:
    """How much longer than its streaming time a tree all-reduce on Simple takes because it moves
    whole chunks from stage to stage: a channel's first chunk crosses every stage of the tree (its
    depth, the node's chain and the hops between nodes, up and back down) before the pipeline
    runs full, so a channel's n chunks take n + 2 depth - 1 chunk times: 1 + (2 depth - 1) / n.
    Each stage moves a channel's chunk at about one channel's rate, NVLink hop or network hop:
    a channel is one thread block copying and reducing, whichever link it feeds."""
    depth = tree_depth(ranks, nodes)
    chunk = tree_chunk_bytes(size, channels_, depth)
    n = max(1.0, size / (channels_ * chunk))
    return 1 + (2 * depth - 1) / n


# --------------------------------------------------------------------------- phases

def _btree_parent(rank: int, nranks: int) -> int:
    """Parent of *rank* in NCCL's binary tree over *nranks* (src/graph/trees.cc ``ncclGetBtree``,
    root 0): the tree is in-order, so a leaf's parent is its neighbour in rank order and a level's
    edges span twice the level below's. With b the lowest set bit of the rank, the parent is the
    rank with b cleared and 2b set, or, when that is past the last rank, the rank with b cleared."""
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < nranks else rank ^ bit


def tree_edges(nodes: int) -> list[list[tuple[int, int]]]:
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


def tree_flows(gi: GroupInfo, size: float, rails: int | None = None
               ) -> tuple[list[tuple[int, int]], list[float]]:
    """Flows of the two trees between nodes: each tree carries half the data, each of *rails*
    rails (default: every rank of a node) its 1/rails share (one channel per rail), up (reduce)
    and down (broadcast) at once."""
    nodes = sorted(gi.by_node)
    k = gi.ppn if rails is None else max(1, min(rails, gi.ppn))
    pairs: list[tuple[int, int]] = []
    nbytes: list[float] = []
    for t in tree_edges(len(nodes)):
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
    pairs, nbytes = tree_flows(gi, size, rails=NET_RAILS)
    for k in nodes:                               # intra-node chain, both trees, both directions
        local = gi.by_node[k]
        for i in range(ppn - 1):
            pairs += [(local[i], local[i + 1]), (local[i + 1], local[i])]
            nbytes += [size, size]
    return [(phase("tree", 1, pairs, nbytes),)]


# --------------------------------------------------------------------------- the record

class Tree(Algorithm):
    """NCCL's double binary tree all-reduce across nodes (LL, LL128, Simple)."""

    name = "tree"
    ops = frozenset({"allreduce"})
    nccl_protocols = NCCL_PROTOCOLS
    follows_net_channels = True
    drops_channels = True
    # baseLatencies, hwLatencies[NVLINK] [LL, LL128, Simple], us (tuning.cc @ 5067397c)
    base_latency_us: ClassVar[tuple[float, float, float]] = (6.8, 14.0, 8.4)
    nvlink_us: ClassVar[tuple[float, float, float]] = (0.6, 1.25, 4.0)

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        return gi.nodes > 1

    def refusal(self, op: str, hw: Platform) -> str:
        return "is an all-reduce across several nodes"

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        return tree(op, gi, size)

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        """Base + the node's chain up and down + log2(nodes) network hops up and down."""
        base, intra, inter = latency_terms_us(self.base_latency_us, self.nvlink_us, TREE_NET_US, call,
                                              wires, net_us)
        lat = base + 2 * ((call.ppn - 1) * intra + math.log2(max(call.nodes, 1)) * inter)
        return lat * 1e-6

    def protocol_factor(self, proto: str, nodes: int) -> float:
        """Tree LL 1/3.8; tree LL128 7/9 on one node, 120/128 across; Simple 1."""
        if proto == "Simple":
            return 1.0
        if proto == "LL":
            return 1 / 3.8
        return 7 / 9 if nodes == 1 else 120 / 128

    def channel_ceiling_GBps(self, proto: str, arch: str, col: int, nch: int) -> float:
        tree_cap = nch * _TREE_PER_CH.get(arch, _TREE_PER_CH["hopper"])[col]
        if proto == "LL128":
            return min(nch * _TREE_LL128_PER_CH.get(arch, _TREE_LL128_PER_CH["hopper"])[col], tree_cap)
        return tree_cap

    def tuner_correction(self, call: Call) -> float:
        """NCCL's treeCorrectionFactor of an all-reduce (``tree_correction``)."""
        return tree_correction(call.proto, call.size) if call.op == "allreduce" else 1.0

    def slowdown(self, call: Call, used: int, full: int) -> float:
        """NCCL's tree correction is what its developers measured trees to lose at medium sizes,
        channel shortfall and pipeline fill included: the largest of the losses, counted once;
        on Simple across nodes its pipeline fill (``tree_fill_factor``), the same medium-size
        loss where a deep tree makes it larger."""
        slowdown = full / used
        if call.op == "allreduce":
            slowdown = max(slowdown, 1 / tree_correction(call.proto, call.size))
            if call.proto == "Simple" and call.nodes > 1:
                slowdown = max(slowdown, tree_fill_factor(call.size, call.ranks, call.nodes, used))
        return slowdown

    def network_steps(self, call: Call) -> float:
        """log2(nodes) hops up and as many down."""
        return 2 * math.log2(call.nodes)


TREE = Tree()
