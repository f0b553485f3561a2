"""Hierarchical all-reduce: inside each island (NVLink node, TPU slice), then across islands.

On TPU slices it is how XLA runs a Multislice all-reduce; on GPUs NCCL has no such algorithm of
its own, so it runs only when forced, priced as a ring all-reduce's latency (NCCL's ring rows,
``src/graph/tuning.cc`` @ 5067397c2676d5aed50042fc39e5c8ee96eb0027).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from ..topology import Topology
from .algorithm import REFERENCE_WIRES, Algorithm, Call, Wires
from .platform import Platform
from .ring import RING, mesh_of, ring
from .stages import GroupInfo, Stage, phase
from .torus import torus

__all__ = ["HIERARCHICAL", "Hierarchical", "hierarchical"]


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
    cross = phase("hier-cross", 2 * (islands - 1), pairs, size / k / islands)
    stages: list[Stage] = _zip_stages(rs) + [(cross,)] + _zip_stages(ag)
    return [s for s in stages if s]


def _inner_stage(op: str, sub: GroupInfo, size: float, topo: Topology) -> list[Stage]:
    if sub.n == 1:
        return []
    if topo.is_tpu:
        return torus(op, sub, size, topo)
    return ring(op, sub, size, mesh=mesh_of(topo))


def _zip_stages(per_island: list[list[Stage]]) -> list[Stage]:
    depth = max((len(s) for s in per_island), default=0)
    return [tuple(p for st in per_island if j < len(st) for p in st[j]) for j in range(depth)]


class Hierarchical(Algorithm):
    """Islands' reduce-scatter, a ring across islands, islands' all-gather."""

    name = "hierarchical"
    ops = frozenset({"allreduce"})
    on_tpu = True
    forced_only_on_gpu = True

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        if hw.tpu:
            return len(gi.by_pod) > 1 and gi.even_pods
        return gi.nodes > 1 and gi.ppn > 1

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        islands = gi.by_pod if topo.is_tpu else gi.by_node
        inner = [list(v) for _, v in sorted(islands.items())]
        if len({len(x) for x in inner}) != 1:
            raise ConfigError("algo hierarchical: needs the same number of ranks on every node/pod")
        return hierarchical(op, gi, size, topo, inner)

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        """The ring all-reduce's."""
        return RING.latency_s(replace(call, op="allreduce"), wires, net_us, exposed_net, net_channels)


HIERARCHICAL = Hierarchical()
