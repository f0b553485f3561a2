"""What a collective algorithm is made of: the group's ranks on the machine and its steps' flows.

Each algorithm (``sim.collectives.algorithms``) turns (operation, group, bytes) into a list of
*stages* run one after another; a stage is a set of *phases* run at the same time; a phase is
``steps`` identical steps, each a set of flows that start together (ring steps, torus steps) or,
for pipelined algorithms (trees, NVLS, SHARP), one step carrying the whole volume. Sizes follow
nccl-tests: ``size`` is the full array for all-reduce, all-gather and reduce-scatter, the bytes
each rank sends for all-to-all, and the message for send/recv and broadcast.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..topology import Topology
from ..topology_spec import GpuClusterSpec

__all__ = ["NET_GRAPH_CHANNELS", "NET_RAILS", "GroupInfo", "Phase", "Stage", "first_gpus", "group_info",
           "island_of_devices", "merge_phases", "phase", "one_node_class", "fabric_class"]

# The NICs of a node NCCL's graphs cross the network on: one NIC per ring/tree graph channel pair
# (16 graph channels across nodes, two per NIC, NET_GRAPH_CHANNELS, from DGX logs) and one
# NIC:GPU pair, the "head", per NVLS graph channel (NVIDIA/nccl src/graph/search.cc: "NVLS search
# only tries to find NIC:GPU combinations to compute the heads"; src/graph/connect.cc
# ``connectNvls``: nHeads = the NVLS graph's nChannels, 8 on DGX H100, NVIDIA/nccl#1197). On an
# 8-GPU node that is every NIC; a 72-GPU NVL72 rack (one node to NCCL) crosses on 8 of its 72.
NET_RAILS = 8
# Graph channels of NCCL's rings and trees across nodes (before the runtime doubling): 8 NICs, two
# channels each, on DGX nodes (NCCL logs); a topology's ``fabric.net_channels`` replaces it.
NET_GRAPH_CHANNELS = 16


@dataclass(frozen=True)
class Phase:
    """``steps`` repetitions of one step whose flows (src[i] -> dst[i], nbytes[i]) start together."""

    name: str
    steps: int
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    extra: tuple[tuple[Hashable, Hashable, float], ...] = ()   # flows with pseudo-endpoints
    hops_per_step: int = 1                                    # TPU: links crossed per step
    # NVLink SHARP traffic: GPU -> its node's NVSwitch fabric and back, (devices, bytes each)
    to_switch: tuple[np.ndarray, float] | None = None
    from_switch: tuple[np.ndarray, float] | None = None
    # All-to-all: (devices, bytes) for each group whose every device sends that many bytes to
    # every other, kept as the group instead of its n (n - 1) flows (``explicit`` lists them)
    uniform: tuple[tuple[np.ndarray, float], ...] = ()

    @property
    def has_flows(self) -> bool:
        """Whether the phase has flows to route (beside its all-to-all groups)."""
        return bool(len(self.nbytes) or self.extra or self.to_switch is not None)

    def explicit(self) -> Phase:
        """The phase with its all-to-all groups listed as flows (for small groups: n^2 of them)."""
        if not self.uniform:
            return self
        src, dst, b = [self.src], [self.dst], [self.nbytes]
        for devs, per_pair in self.uniform:
            a, c = np.repeat(devs, len(devs)), np.tile(devs, len(devs))
            keep = a != c
            src.append(a[keep])
            dst.append(c[keep])
            b.append(np.full(int(keep.sum()), float(per_pair)))
        return Phase(self.name, self.steps, np.concatenate(src), np.concatenate(dst),
                     np.concatenate(b), self.extra, self.hops_per_step, self.to_switch,
                     self.from_switch)


Stage = tuple[Phase, ...]


def phase(name: str, steps: int, pairs: list[tuple[int, int]], nbytes: float | Sequence[float],
          extra: tuple[tuple[Hashable, Hashable, float], ...] = (), hops: int = 1,
          uniform: tuple[tuple[np.ndarray, float], ...] = ()) -> Phase:
    """A phase of device-to-device flows: *pairs* (src, dst) moving *nbytes* each (one number for
    all, or one per pair), and the all-to-all groups of *uniform*."""
    src = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
    dst = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))
    b = (np.full(len(pairs), float(nbytes)) if isinstance(nbytes, (int, float))  # noqa: UP038
         else np.asarray(nbytes, float))
    return Phase(name, steps, src, dst, b, extra, hops, uniform=uniform)


@dataclass(frozen=True)
class GroupInfo:
    """The ranks of a collective and how they sit on the machine."""

    devices: tuple[int, ...]
    by_node: dict[int, tuple[int, ...]] = field(default_factory=dict)   # GPU node -> its ranks
    by_pod: dict[int, tuple[int, ...]] = field(default_factory=dict)    # TPU slice -> its ranks
    # Derived once (PERF: every algorithm's applicability and cost asks them,
    # benchmarks/test_bench_collectives.py)
    n: int = field(init=False, repr=False, compare=False)         # ranks
    nodes: int = field(init=False, repr=False, compare=False)     # GPU nodes (1 on TPU slices)
    ppn: int = field(init=False, repr=False, compare=False)       # most ranks on one node
    # Every node holds the same number of the group's ranks (trees and hierarchical need it)
    even: bool = field(init=False, repr=False, compare=False)
    # Every TPU slice holds the same number of the group's ranks (hierarchical needs it)
    even_pods: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        per_node = {len(v) for v in self.by_node.values()}
        put = object.__setattr__                   # frozen: derived fields are set once, here
        put(self, "n", len(self.devices))
        put(self, "nodes", max(1, len(self.by_node)))
        put(self, "ppn", max(per_node) if per_node else 1)
        put(self, "even", len(per_node) <= 1)
        put(self, "even_pods", len({len(v) for v in self.by_pod.values()}) <= 1)


def group_info(topo: Topology, devices: Sequence[int],
               island_of: Mapping[int, int] | None = None) -> GroupInfo:
    """*devices* grouped by GPU node (``by_node``) or, on TPU slices, by slice (``by_pod``).

    *island_of*: the node (slice) of each device, at least of *devices* (``island_of_devices``;
    PERF: a caller asking for many groups reads the graph once, benchmarks/test_bench_training.py);
    read from the graph when None."""
    by: dict[int, list[int]] = {}
    if island_of is None:
        island_of = island_of_devices(topo, devices)
    for d in devices:
        by.setdefault(island_of[d], []).append(d)
    groups = {k: tuple(v) for k, v in by.items()}
    if topo.is_tpu:
        return GroupInfo(tuple(devices), by_pod=groups)
    return GroupInfo(tuple(devices), by_node=groups)


def one_node_class(topo: Topology, gi: GroupInfo) -> tuple[str, tuple[int, ...]]:
    """The symmetry class of a GPU group on one node: its ranks' places on that node (the
    graph's ``local``). Every node of a GPU cluster is built alike (its NVLink links added in the
    same order, sim/topology/gpu_cluster.py) and such a group's flows never leave it, so it costs
    the same on every node (tests/test_collectives.py checks it, to the bit, on every bundled
    fabric); a topology a failure edit changed (``Topology.edited``) is not alike."""
    nodes = topo.graph.nodes
    return ("node", tuple(nodes[d]["local"] for d in gi.devices))


def fabric_class(topo: Topology, gi: GroupInfo) -> tuple[str, tuple[tuple[int, ...], ...]] | None:
    """The symmetry class of a GPU group across nodes of a fat-tree (two or three tiers, pods):
    each rank's (pod, scalable unit, node) ranked among the group's own in id order, and its
    place on its node; None on other fabrics (a dragonfly's global links are not alike).

    Nodes of one scalable unit hang off the same leaves alike, the units' leaves off their spine
    group alike and the pods' spines off the cores alike (``sim.topology.gpu_cluster``), and the
    routers split evenly over ECMP paths (``sim.network.routing.fat_tree``): mapping one group's
    nodes, units and pods onto another's in id order maps every flow's route onto the other's,
    link for link and capacity for capacity, and keeps the ranks' order, which the algorithms
    build their rings and trees from. Such groups cost the same (tests/test_collectives.py checks
    it, to the bit, on every bundled fat-tree)."""
    spec = topo.spec
    if not isinstance(spec, GpuClusterSpec) or spec.layout != "fat-tree":
        return None
    devs = np.asarray(gi.devices)
    node = topo.islands[devs]
    su = node // spec.su_nodes
    pod = su // spec.pod_sus if spec.pod_sus else np.zeros_like(su)

    def ranks(a: np.ndarray) -> list[int]:
        return np.unique(a, return_inverse=True)[1].ravel().tolist()
    # GPU g of node n is device n x gpus_per_node + g (sim.topology.gpu_cluster)
    return ("fabric", tuple(zip(ranks(pod), ranks(su), ranks(node),
                                (devs - node * spec.gpus_per_node).tolist())))


def island_of_devices(topo: Topology, devices: Sequence[int] | None = None) -> dict[int, int]:
    """The GPU node (TPU slice) of each of *devices* (all of *topo*'s when None), from the graph."""
    devs = list(topo.devices if devices is None else devices)
    return dict(zip(devs, topo.islands[devs].tolist()))


def first_gpus(topo: Topology) -> tuple[int | None, int | None, int | None]:
    """The first GPU (device 0 of a GPU cluster; None on a TPU slice), the next GPU on its node
    and the next on another node (None where there is none), by ``Topology.islands``."""
    if topo.is_tpu or not topo.devices:
        return None, None, None
    devs, node = topo.devices, topo.islands
    same = node[1:] == node[0]
    intra = devs[1 + int(np.argmax(same))] if same.any() else None
    inter = devs[1 + int(np.argmax(~same))] if not same.all() else None
    return devs[0], intra, inter


def merge_phases(phases: list[Phase]) -> Phase:
    """One phase carrying the flows of the same phase of several groups (same step count)."""
    head = phases[0]
    if len({p.steps for p in phases}) != 1:
        raise ConfigError(f"concurrent collectives: phase {head.name!r} has different step counts "
                          "in different groups")

    def switch(attr: str) -> tuple[np.ndarray, float] | None:
        parts = [getattr(p, attr) for p in phases]
        if all(x is None for x in parts):
            return None
        if any(x is None for x in parts) or len({x[1] for x in parts}) != 1:
            raise ConfigError(f"concurrent collectives: phase {head.name!r} moves different "
                              "switch volumes in different groups")
        return np.concatenate([x[0] for x in parts]), parts[0][1]

    return Phase(head.name, head.steps, np.concatenate([p.src for p in phases]),
                 np.concatenate([p.dst for p in phases]), np.concatenate([p.nbytes for p in phases]),
                 tuple(x for p in phases for x in p.extra), head.hops_per_step,
                 switch("to_switch"), switch("from_switch"),
                 tuple(u for p in phases for u in p.uniform))
