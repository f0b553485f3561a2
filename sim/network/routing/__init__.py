"""Routes as link fractions: which directed links a flow uses and what share of its rate each
carries, by a router of the topology's fabric kind (chosen once, by ``make_router``).

Every router has the interface of ``base.Router``: ``route(src, dst)`` and ``path_latency_s``
for one flow, ``routes_coo`` for many device-to-device flows at once, ``switch_routes_coo`` for
flows to and from a GPU node's NVSwitch fabric. The fabric kinds:

- ``fat_tree.FatTreeRouter``: GPU nodes on a rail-optimized fat-tree (two tiers, or the
  SuperPOD's three with a spine group per rail): inside a node over the NVSwitches, between nodes
  the way NCCL moves data (PXN to the destination's rail, NIC -> leaf -> the leaf's spine group,
  ECMP split evenly -> leaf -> NIC -> GPU); ``gpu`` holds the node part every GPU fabric shares.
- ``fat_tree.PodRouter``: frontier-scale pods, a leaf-spine per pod and rail plane, cores between.
- ``dragonfly.DragonflyRouter``: switch to switch over the dragonfly's minimal paths.
- ``torus.TorusRouter``: TPU slices, dimension-order routing on the torus, DCN between slices.

Anything a policy does not cover (twisted tori, graphs edited by failures where the policy's link
is gone) takes ECMP over all shortest paths, the flow split evenly at each branching hop.

A new fabric kind is a subclass of ``Router`` (or of ``gpu.GpuRouter`` for GPU nodes on another
switched fabric) in a module of its own, and a line in ``make_router``.
"""

from __future__ import annotations

from ...topology import Topology, TpuFabric
from ...topology_spec import GpuClusterSpec
from ..links import LinkTable
from .base import Coo, Route, Router
from .dragonfly import DragonflyRouter
from .fat_tree import FatTreeRouter, PodRouter
from .torus import TorusRouter

__all__ = ["Coo", "DragonflyRouter", "FatTreeRouter", "PodRouter", "Route", "Router", "TorusRouter",
           "make_router"]


def make_router(topo: Topology, links: LinkTable) -> Router:
    """The router of *topo*'s fabric kind over *links* (virtual trunk links may be appended to
    *links*: build one router per link table)."""
    if isinstance(topo.fabric, TpuFabric):
        return TorusRouter(topo, links)
    spec = topo.spec
    assert isinstance(spec, GpuClusterSpec), spec
    if spec.layout == "dragonfly":
        return DragonflyRouter(topo, links)
    if spec.pod_sus:
        return PodRouter(topo, links)
    return FatTreeRouter(topo, links)
