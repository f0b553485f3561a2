"""Topologies: a sized cluster as a networkx graph plus the fabric facts other stages need.

``build_topology(cluster)`` dispatches on the spec kind and records the builder's typed fabric
(``GpuFabric`` or ``TpuFabric``, ``sim.topology.fabric``), so GPU-vs-TPU and the fabric's shape
are decided once, here; ``summarize`` (in ``analysis``) computes what ``clustersim topo show``
prints. Graph edits for failures live in ``edits``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
import numpy as np

from ..config import ClusterConfig
from ..topology_spec import TRANSPORTS, GpuClusterSpec, TopologySpec, TpuPodSpec
from .fabric import Fabric, GpuFabric, TpuFabric
from .gpu_cluster import build_gpu_cluster
from .tpu_pod import build_tpu_pod

__all__ = ["Fabric", "GpuFabric", "NET_KINDS", "Topology", "TpuFabric", "build_topology", "frozen_gc",
           "paused_gc"]


@dataclass(frozen=True)
class Topology:
    """A built cluster. ``devices`` lists the accelerator node ids in rank order (0..chips-1);
    ``fabric`` holds what the builder derived about the fabric; ``edited`` is True once a
    failure edit (``sim.topology.edits``) has changed the graph."""

    spec: TopologySpec
    cluster: ClusterConfig
    graph: nx.Graph
    devices: tuple[int, ...]
    fabric: Fabric
    edited: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def chips(self) -> int:
        return len(self.devices)

    @property
    def is_tpu(self) -> bool:
        """A TPU slice rather than a GPU cluster: the chip's answer (``Chip.is_tpu``), the one
        test of GPU versus TPU (the builders give a TPU chip a ``TpuFabric``, a GPU a
        ``GpuFabric``: tests/test_hardware.py)."""
        return self.spec.chip.is_tpu

    @property
    def nodes(self) -> int:
        """DGX nodes (GPU clusters) or TPU hosts."""
        return self.fabric.nodes

    @property
    def pods(self) -> int:
        """TPU slices (pods) joined over the data-center network; 1 for a GPU cluster."""
        return self.fabric.pods if isinstance(self.fabric, TpuFabric) else 1

    @property
    def background_load(self) -> float:
        """Share of every inter-node link's bandwidth taken by other jobs (already applied to the
        graph's ``bandwidth_GBps``)."""
        return self.cluster.background_load

    @property
    def facts(self) -> Mapping[str, Any]:
        """The fabric as the read-only dict of keys earlier versions stored (``nodes``, ``tiers``,
        ``shape``, ``pods``, ...), for callers outside ``sim``; ``sim`` reads the typed fields."""
        f = self.fabric
        out: dict[str, Any]
        if isinstance(f, TpuFabric):
            out = {"nodes": f.hosts, "tiers": 0, "shape": f.shape, "pods": f.pods, "wraps": f.wraps,
                   "twisted": f.twisted}
        else:
            out = {"nodes": f.nodes, "tiers": f.tiers, "scalable_units": f.scalable_units,
                   "oversubscription": f.oversubscription, "sharp": f.sharp, "shape": None, "pods": 1}
        if self.background_load > 0:
            out["background_load"] = self.background_load
        if self.edited:
            out["edited"] = True
        return types.MappingProxyType(out)

    @functools.cached_property
    def islands(self) -> np.ndarray:
        """Each device's island, by device number: its GPU node (the graph's ``node``) or TPU
        slice (``pod``), read from the graph once (PERF: collectives group thousands of devices
        by it, benchmarks/release.py run-98k)."""
        attrs = self.graph._node  # noqa: SLF001
        key = "pod" if self.is_tpu else "node"
        return np.fromiter((attrs[d][key] for d in self.devices), np.int64, len(self.devices))

    def with_graph(self, graph: nx.Graph) -> "Topology":
        """The same topology over an edited graph (see ``sim.topology.edits``)."""
        return replace(self, graph=graph, edited=True)


# Edge kinds that join nodes (and so carry other jobs' traffic too): the GPU fabrics' transports
# and the TPU hosts' data-center network.
NET_KINDS = frozenset(TRANSPORTS)
INTER_NODE_KINDS = NET_KINDS | {"dcn"}


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (and back as it was after).

    PERF: building a large graph or link table allocates millions of containers that all stay
    alive, and every collection the allocations trigger walks them for nothing: 40% of the
    98,304-GPU graph build (benchmarks/test_bench_training.py). Nothing built here forms garbage
    cycles, so no collection is lost."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def frozen_gc() -> Iterator[Callable[[], None]]:
    """A block in which the cyclic garbage collector can be told to skip what is alive: the
    callable it gives moves every object alive at that moment out of the collector's sight
    (``gc.freeze``) until the block ends (``gc.unfreeze``). Where the process keeps frozen
    objects of its own the callable does nothing, since ending the block would thaw them.

    PERF: freeze right after building a large graph and link table, with ``paused_gc`` still on,
    and no collection walks them while a step is played (``sim.run.run``)."""
    own = gc.get_freeze_count() == 0
    try:
        yield gc.freeze if own else _nothing
    finally:
        if own:
            gc.unfreeze()


def _nothing() -> None:
    pass


def build_topology(cluster: ClusterConfig) -> Topology:
    fabric: Fabric
    with paused_gc():
        if isinstance(cluster.topology, GpuClusterSpec):
            graph, fabric = build_gpu_cluster(cluster)
        else:
            assert isinstance(cluster.topology, TpuPodSpec)
            graph, fabric = build_tpu_pod(cluster)
    devices = tuple(range(cluster.chips))
    assert all(graph.nodes[d]["kind"] in ("gpu", "tpu") for d in devices)
    if cluster.background_load > 0:
        # Other jobs' traffic takes this share of every link between nodes (InfiniBand NIC, leaf
        # and spine links; the TPU hosts' DCN links); links inside a node or an ICI slice are the
        # job's own.
        for _, _, d in graph.edges(data=True):
            if d.get("kind") in INTER_NODE_KINDS:
                d["bandwidth_GBps"] *= 1.0 - cluster.background_load
    topo = Topology(cluster.topology, cluster, graph, devices, fabric)
    if cluster.degraded_links:
        from .edits import apply_link_edits

        topo = apply_link_edits(topo, cluster.degraded_links)
    return topo
