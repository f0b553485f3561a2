"""Topologies: a sized cluster as a networkx graph plus the facts other stages need.

``build_topology(cluster)`` dispatches on the spec kind; ``summarize`` (in ``analysis``) computes
what ``clustersim topo show`` prints. Graph edits for failures live in ``edits``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from ..config import ClusterConfig
from .gpu_cluster import build_gpu_cluster
from ..topology_spec import GpuClusterSpec, TopologySpec, TpuPodSpec
from .tpu_pod import build_tpu_pod

__all__ = ["Topology", "build_topology"]


@dataclass(frozen=True)
class Topology:
    """A built cluster. ``devices`` lists the accelerator node ids in rank order (0..chips-1)."""

    spec: TopologySpec
    cluster: ClusterConfig
    graph: nx.Graph
    devices: tuple[int, ...]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def chips(self) -> int:
        return len(self.devices)

    @property
    def nodes(self) -> int:
        """DGX nodes (GPU clusters) or TPU hosts."""
        return int(self.facts["nodes"])

    def with_graph(self, graph: nx.Graph) -> "Topology":
        """The same topology over an edited graph (see ``sim.topology.edits``)."""
        return Topology(self.spec, self.cluster, graph, self.devices, {**self.facts, "edited": True})


# Edge kinds that join nodes (and so carry other jobs' traffic too).
INTER_NODE_KINDS = frozenset({"ib", "dcn"})


def build_topology(cluster: ClusterConfig) -> Topology:
    if isinstance(cluster.topology, GpuClusterSpec):
        graph, facts = build_gpu_cluster(cluster)
    else:
        assert isinstance(cluster.topology, TpuPodSpec)
        graph, facts = build_tpu_pod(cluster)
    devices = tuple(range(cluster.chips))
    assert all(graph.nodes[d]["kind"] in ("gpu", "tpu") for d in devices)
    if cluster.background_load > 0:
        # Other jobs' traffic takes this share of every link between nodes (InfiniBand NIC, leaf
        # and spine links; the TPU hosts' DCN links); links inside a node or an ICI slice are the
        # job's own.
        for _, _, d in graph.edges(data=True):
            if d.get("kind") in INTER_NODE_KINDS:
                d["bandwidth_GBps"] *= 1.0 - cluster.background_load
        facts = {**facts, "background_load": cluster.background_load}
    topo = Topology(cluster.topology, cluster, graph, devices, facts)
    if cluster.degraded_links:
        from .edits import apply_link_edits

        topo = apply_link_edits(topo, cluster.degraded_links)
    return topo
