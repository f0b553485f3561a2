"""PAT (Parallel Aggregated Trees, NCCL >= 2.23): all-gather and reduce-scatter across nodes with one
GPU per node, in log2(n) rounds.

The cost constants are NVIDIA/nccl ``src/graph/tuning.cc`` @ 5067397c2676d5aed50042fc39e5c8ee96eb0027
(NCCL-TUNE, ../shared/reference/FACTS.md section 3b) and, for what 2.23 added, the 2.23-2.28
releases' ``tuning.cc`` (``ncclPatEnable``, PAT's latency and bandwidth terms).
"""

from __future__ import annotations

import math
from typing import ClassVar

from ..topology import Topology
from .algorithm import PROTO_INDEX, REFERENCE_WIRES, Algorithm, Call, Wires
from .platform import Platform
from .stages import GroupInfo, Stage, phase
from .tree import TREE_NET_US

__all__ = ["PAT", "Pat", "pat"]


def pat(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """All-gather in ceil(log2 n) rounds, rank r sending at round k to rank r + 2^k everything it
    holds (min(2^k, n - 2^k) blocks of size/n), the aggregation of the binomial trees rooted at
    every rank; reduce-scatter is the same rounds reversed. Each rank moves (n-1)/n of the buffer,
    as on a ring, in log2(n) rounds instead of n-1 steps."""
    n = gi.n
    devs = gi.devices
    stages: list[Stage] = []
    k = 1
    while k < n:
        pairs = [(devs[i], devs[(i + k) % n]) for i in range(n)]
        stages.append((phase(f"pat-{k}", 1, pairs, min(k, n - k) * size / n),))
        k *= 2
    return stages if op == "allgather" else stages[::-1]


class Pat(Algorithm):
    """NCCL's PAT: one GPU per node only (``ncclPatEnable``), from NCCL 2.23; Simple."""

    name = "pat"
    ops = frozenset({"allgather", "reducescatter"})
    drops_channels = True
    base_latency_us: ClassVar[tuple[float, float, float]] = (8.0, 8.0, 8.0)   # baseLatencies

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        return gi.nodes > 1 and gi.ppn == 1 and hw.since(2, 23)

    def refusal(self, op: str, hw: Platform) -> str:
        return ("is NCCL's all-gather / reduce-scatter across nodes with one GPU per node, "
                "from NCCL 2.23" + (f" (this run: {hw.nccl[0]}.{hw.nccl[1]})" if hw.nccl else ""))

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        return pat(op, gi, size)

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        """8 us + log2(nodes) network steps at a 3.5th of the tree's network latency each (PAT
        aggregates them) + 2.8 us per rank, "still a linear part" (tuning.cc, NCCL >= 2.23)."""
        p = PROTO_INDEX[call.proto]
        net = wires.inter_us(TREE_NET_US[p])
        lat = self.base_latency_us[p] + math.log2(max(call.nodes, 1)) * net / 3.5 + 2.8 * call.ranks
        return lat * 1e-6

    def protocol_factor(self, proto: str, nodes: int) -> float:
        """tuning.cc: PAT busBw x .75."""
        return 0.75


PAT = Pat()
