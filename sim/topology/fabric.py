"""What a built topology is, beyond its graph: the fabric facts its builder derived, typed.

``build_gpu_cluster`` returns a ``GpuFabric`` and ``build_tpu_pod`` a ``TpuFabric``; the
``Topology`` record carries the one it got, so GPU-vs-TPU and the fabric's shape are decided once,
when the topology is built, and read everywhere else (``topo.is_tpu``, ``topo.fabric``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..topology_spec import SliceShape

__all__ = ["Fabric", "GpuFabric", "TpuFabric"]


@dataclass(frozen=True, slots=True)
class GpuFabric:
    """DGX-style nodes on an InfiniBand fat-tree (``sim.topology.gpu_cluster``)."""

    nodes: int                   # GPU nodes
    tiers: int                   # switch tiers between nodes: 1 (one node), 2 (leaf-spine) or 3 (+ core)
    scalable_units: int
    oversubscription: float      # leaf down:up capacity ratio, 1 = non-blocking
    sharp: bool                  # InfiniBand SHARP in the switches (CollNet)
    nvls: bool                   # NVLink SHARP in the nodes' NVSwitches (NVLS, NVLSTree)


@dataclass(frozen=True, slots=True)
class TpuFabric:
    """TPU slices: ICI tori (cubes joined by OCS, or 2-D pods), pods joined by DCN
    (``sim.topology.tpu_pod``)."""

    shape: SliceShape            # chips along each axis of one slice
    wraps: tuple[bool, ...]      # which axes have wraparound links
    pods: int                    # slices (pods) joined over the data-center network
    hosts: int                   # host CPUs in all
    twisted: bool                # twisted-torus wraparounds

    @property
    def nodes(self) -> int:
        """Hosts: a TPU topology's nodes."""
        return self.hosts


Fabric = GpuFabric | TpuFabric
