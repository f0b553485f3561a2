"""The send/recv-based collectives: all-to-all (``pairwise``) and send/recv itself (``p2p``).

NCCL's tuning model has no entry for them: a call costs one ring Simple step's latency (NCCL's
``src/graph/tuning.cc`` @ 5067397c2676d5aed50042fc39e5c8ee96eb0027, the ring's rows) and moves its
bytes at the links' rate; an all-to-all across nodes also pays its net plugin's cost per remote
peer where one is fitted (``Pairwise.peer_cost_s``).
"""

from __future__ import annotations

import numpy as np

from ..calibration import NET_PEER_SMALL_B
from ..topology import Topology
from .algorithm import REFERENCE_WIRES, Algorithm, Call, Wires
from .ring import RING
from .stages import GroupInfo, Stage, phase

__all__ = ["P2P", "PAIRWISE", "P2p", "Pairwise", "p2p", "pairwise"]


def pairwise(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """All-to-all: every rank sends size/n to every other rank at once (NCCL's grouped send/recv),
    kept as the group (``Phase.uniform``): its links' bytes are counted by the router's
    ``all_to_all_link_bytes`` at any rank count."""
    devs = np.asarray(gi.devices, np.int64)
    return [(phase("pairwise", 1, [], 0.0, uniform=((devs, size / gi.n),)),)]


def p2p(op: str, gi: GroupInfo, size: float) -> list[Stage]:
    """send/recv as nccl-tests runs it: every rank sends ``size`` to the next, receives from the last."""
    n = gi.n
    pairs = [(gi.devices[i], gi.devices[(i + 1) % n]) for i in range(n)]
    return [(phase("sendrecv", 1, pairs, size),)]


class _SendRecv(Algorithm):
    """Send/recv-based: on GPUs and TPUs alike, any group, Simple; one ring step's latency."""

    on_tpu = True
    needs_even_nodes = False

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        """One ring Simple step between two ranks (across nodes where the call crosses them)."""
        step = Call("sendrecv", call.proto, call.size, 2, min(call.nodes, 2))
        return RING.latency_s(step, wires, net_us=net_us)


class Pairwise(_SendRecv):
    name = "pairwise"
    ops = frozenset({"alltoall"})

    def peer_cost_s(self, call: Call, peer_us: tuple[float, float] | None) -> float:
        """Each remote peer's messages posted by the GPU's network proxy one after another
        (``sim.calibration.NET_PEER_US``: (large, small) us a peer; a small message is under
        ``NET_PEER_SMALL_B`` bytes a peer): the ranks on other nodes times that."""
        if peer_us is None or call.nodes < 2:
            return 0.0
        remote = call.ranks - call.ranks // call.nodes
        large, small = peer_us
        return remote * (small if call.size / call.ranks < NET_PEER_SMALL_B else large) * 1e-6

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        return pairwise(op, gi, size)


class P2p(_SendRecv):
    name = "p2p"
    ops = frozenset({"sendrecv"})

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        return p2p(op, gi, size)


PAIRWISE = Pairwise()
P2P = P2p()
