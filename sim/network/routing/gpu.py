"""The part of a route every GPU fabric shares: NVLink inside a node, PXN to the destination's
rail, the NIC and its switch. How a flow crosses from one edge switch to another is the fabric
kind's (``sim.network.routing.fat_tree``, ``sim.network.routing.dragonfly``).

Inside a node a flow goes over every NVSwitch in proportion to the GPU's NVLinks to it (straight
over the GPU-to-GPU link on a node without NVSwitch, ``mesh_links``). Between nodes it goes the way
NCCL moves data on a rail-optimized fabric: to the destination's rail first over NVLink (PXN) when
the rails differ, then NIC -> edge switch -> ... -> edge switch -> NIC -> GPU.

Pseudo-endpoints: ``("nvls", node)`` is the NVSwitch fabric of a GPU node (a flow to it uses the
GPU's uplinks, a flow from it the downlinks); ``("sharp", leaf)`` is a leaf switch's reduction
engine (InfiniBand SHARP).
"""

from __future__ import annotations

import abc
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ...errors import InfeasibleError, TopologyError
from ...topology import Topology, paused_gc
from ...topology_spec import GpuClusterSpec
from ..links import LinkTable
from .all_to_all import AllToAll
from .base import Coo, NoPolicy, Route, Router, add_rows

__all__ = ["GpuRouter", "NodeHops"]


@dataclass(frozen=True, slots=True, eq=False)
class NodeHops:
    """Link ids of the fixed hops of every policy route, one row per device (rank order).

    ``to_switch`` / ``from_switch``: (devices, NVSwitches) GPU -> each NVSwitch of its node and
    back, the flow split over them by ``switch_share``; ``to_nic`` / ``from_nic``: GPU -> its NIC
    (PCIe) and back; ``nic_up`` / ``nic_down``: the NIC -> its edge switch and back; ``leaf``: the
    edge switch's index (into ``leaf_names``); ``rail``: the device's rail."""

    to_switch: np.ndarray
    from_switch: np.ndarray
    switch_share: np.ndarray
    to_nic: np.ndarray
    from_nic: np.ndarray
    nic_up: np.ndarray
    nic_down: np.ndarray
    leaf: np.ndarray
    rail: np.ndarray
    leaf_names: tuple[str, ...]


class GpuRouter(Router):
    """GPU nodes on a switched fabric; subclasses route between edge switches."""

    def __init__(self, topo: Topology, links: LinkTable) -> None:
        super().__init__(topo, links)
        spec = topo.spec
        assert isinstance(spec, GpuClusterSpec), spec
        self._gpn = spec.gpus_per_node
        self._switch_links = spec.gpu_switch_links
        self._rail_of = spec.rail_of
        self._hops: NodeHops | None = None
        # A node without NVSwitch (GPUs wired to each other, ``mesh_links``) has no switch hops to
        # tabulate, and an edited graph may lack a table's link: their routes take the policy walk.
        if not topo.edited and self._switch_links:
            with paused_gc():
                self._hops = self._node_hops()
                self._trunks(self._hops)

    # ------------------------------------------------------------------ what a fabric kind says

    def _trunks(self, hops: NodeHops) -> None:
        """Build the fabric's tables for the edge-switch-to-edge-switch part of bulk routes (on an
        unedited fabric with NVSwitch nodes, once the node tables exist)."""

    @abc.abstractmethod
    def _between_leaves_bulk(self, la: np.ndarray, lb: np.ndarray, cols: np.ndarray,
                             parts: list[Coo]) -> None:
        """Append the routes from edge switch la[i] to edge switch lb[i] (indices into
        ``NodeHops.leaf_names``, never equal) of flows *cols* to *parts*."""

    @abc.abstractmethod
    def _between_leaves(self, leaf_s: str, leaf_d: str, w: float, acc: dict[int, float]) -> None:
        """Add the route of weight *w* from edge switch *leaf_s* to *leaf_d* (distinct) to *acc*;
        raise ``NoPolicy`` where the fabric's policy does not apply."""

    # ------------------------------------------------------------------ the interface

    def switch_routes_coo(self, devs: np.ndarray, up: bool, col0: int = 0) -> Coo:
        cols = np.arange(len(devs)) + col0
        h = self._hops
        if h is not None:
            r = (h.to_switch if up else h.from_switch)[devs]
            return r.ravel(), np.repeat(cols, r.shape[1]), np.tile(h.switch_share, len(devs))
        parts = []
        for d, c in zip(devs, cols):
            node = self.g.nodes[int(d)]["node"]
            ids, fr = self.route(int(d), ("nvls", node)) if up else self.route(("nvls", node), int(d))
            parts.append((ids, np.full(len(ids), c), fr))
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))

    def all_to_all_link_bytes(self, devs: np.ndarray) -> np.ndarray:
        """One byte from every device of *devs* to every other, counted by the hops routes share
        instead of route by route (``sim.network.routing.all_to_all``); an edited graph, whose
        routes may leave the policy, takes every route (``Router.all_to_all_link_bytes``)."""
        if self.topo.edited:
            return super().all_to_all_link_bytes(devs)
        return AllToAll(self, devs, self._gpn, [self._rail_of(x) for x in range(self._gpn)]).count()

    # ------------------------------------------------------------------ bulk

    def _bulk(self, src: np.ndarray, dst: np.ndarray, idx: np.ndarray, parts: list[Coo]) -> np.ndarray:
        h = self._hops
        if h is None:
            return super()._bulk(src, dst, idx, parts)
        gpn = self._gpn
        w2 = np.concatenate([h.switch_share, h.switch_share])

        def nvlink(a: np.ndarray, b: np.ndarray, cols: np.ndarray) -> None:
            r = np.concatenate([h.to_switch[a], h.from_switch[b]], axis=1)
            add_rows(parts, r, cols, np.tile(w2, (len(a), 1)))

        same = (src // gpn) == (dst // gpn)
        if same.any():
            nvlink(src[same], dst[same], idx[same])
        cross = ~same
        if cross.any():
            a, b, c = src[cross], dst[cross], idx[cross]
            # PXN: when the rails differ, hop over NVLink to the source node's GPU in dst's place
            # (same rail as dst) and leave through its NIC.
            hop = np.where(h.rail[a] == h.rail[b], a, (a // gpn) * gpn + (b % gpn))
            pxn = hop != a
            if pxn.any():
                nvlink(a[pxn], hop[pxn], c[pxn])
            add_rows(parts, np.stack([h.to_nic[hop], h.nic_up[hop], h.nic_down[b], h.from_nic[b]],
                                     axis=1), c, np.ones((len(c), 4)))
            far = h.leaf[hop] != h.leaf[b]
            if far.any():
                self._between_leaves_bulk(h.leaf[hop[far]], h.leaf[b[far]], c[far], parts)
        return np.zeros(len(src), bool)

    def _route(self, src: Hashable, dst: Hashable) -> Route:
        if self._hops is None or src == dst or not (isinstance(src, int) and isinstance(dst, int)):
            return super()._route(src, dst)
        parts: list[Coo] = []
        self._bulk(np.array([src]), np.array([dst]), np.zeros(1, int), parts)
        acc: dict[int, float] = defaultdict(float)
        for rows, _, vals in parts:
            for r, v in zip(rows.tolist(), vals.tolist()):
                acc[r] += v
        return (np.fromiter(acc.keys(), dtype=int, count=len(acc)),
                np.fromiter(acc.values(), dtype=float, count=len(acc)))

    def _node_hops(self) -> NodeHops:
        """The per-device link ids of the policy routes' fixed hops (``NodeHops``)."""
        L, g, gpn = self.links, self.g, self._gpn
        nsw = len(self._switch_links)
        # PERF: names and node positions gathered in one pass, then every link id found at once
        # (``LinkTable.ids_at``): 1.2 M lookups at 98,304 GPUs (benchmarks/release.py run-98k).
        node_attrs = g._node  # noqa: SLF001
        devices = self.topo.devices
        adj = g._adj  # noqa: SLF001
        rails = [self._rail_of(x) for x in range(gpn)]
        rail_l: list[int] = []
        nic_l: list[str] = []
        leaf_of_nic: dict[str, str] = {}
        leaf_ids: dict[str, int] = {}
        leaf_l: list[int] = []
        leaf_names: list[str] = []
        for d in devices:
            attrs = node_attrs[d]
            n, r = attrs["node"], attrs["rail"]
            assert n == d // gpn and r == rails[d % gpn]
            rail_l.append(r)
            nic = f"n{n}/nic{r}"
            nic_l.append(nic)
            lf = leaf_of_nic.get(nic)
            if lf is None:
                for lf in adj[nic]:
                    if node_attrs[lf]["kind"] == "leaf":
                        break
                else:
                    raise TopologyError(f"{nic}: no edge switch")
                leaf_of_nic[nic] = lf
            leaf_names.append(lf)
            leaf_l.append(leaf_ids.setdefault(lf, len(leaf_ids)))
        dev_at = L.positions(devices)
        nic_at = L.positions(nic_l)
        leaf_at = L.positions(leaf_names)
        nodes, row = np.unique(np.asarray(devices, np.int64) // gpn, return_inverse=True)
        sw_at = L.positions(f"n{n}/nvs{s}" for n in nodes.tolist() for s in range(nsw))
        sw_at = sw_at.reshape(len(nodes), nsw)[row.reshape(-1)]    # each device's node's switches
        return NodeHops(
            to_switch=L.ids_at(dev_at[:, None], sw_at),
            from_switch=L.ids_at(sw_at, dev_at[:, None]),
            switch_share=np.asarray(self._switch_links, float) / sum(self._switch_links),
            to_nic=L.ids_at(dev_at, nic_at), from_nic=L.ids_at(nic_at, dev_at),
            nic_up=L.ids_at(nic_at, leaf_at), nic_down=L.ids_at(leaf_at, nic_at),
            leaf=np.asarray(leaf_l, int), rail=np.asarray(rail_l, int),
            leaf_names=tuple(leaf_ids))                   # insertion order = index order

    # ------------------------------------------------------------------ the policy walk

    def _node(self, dev: Hashable) -> int:
        return self.g.nodes[dev]["node"]

    def _nvlink(self, a: int, b: int, w: float, acc: dict[int, float]) -> None:
        if not self._switch_links:                     # NVLink mesh: the direct link
            self._add(acc, a, b, w)
            return
        n = self._node(a)
        total = sum(self._switch_links)
        for s, nl in enumerate(self._switch_links):
            sw = f"n{n}/nvs{s}"
            self._add(acc, a, sw, w * nl / total)
            self._add(acc, sw, b, w * nl / total)

    def _policy(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        if isinstance(src, tuple) or isinstance(dst, tuple):
            self._pseudo(src, dst, w, acc)
            return
        assert isinstance(src, int) and isinstance(dst, int)
        ns, nd = self._node(src), self._node(dst)
        if ns == nd:
            self._nvlink(src, dst, w, acc)
            return
        rail = self.g.nodes[dst]["rail"]
        hop = src
        if self.g.nodes[src]["rail"] != rail:                # PXN: the source node's GPU in dst's place
            hop = ns * self._gpn + self.g.nodes[dst]["local"]
        if hop != src:
            self._nvlink(src, hop, w, acc)
        nic_s, nic_d = f"n{ns}/nic{rail}", f"n{nd}/nic{rail}"
        self._add(acc, hop, nic_s, w)
        leaf_s = next((n for n in self.g[nic_s] if self.g.nodes[n]["kind"] == "leaf"), None)
        leaf_d = next((n for n in self.g[nic_d] if self.g.nodes[n]["kind"] == "leaf"), None)
        if leaf_s is None or leaf_d is None:            # a NIC's uplink is down: no policy route
            raise NoPolicy
        self._add(acc, nic_s, leaf_s, w)
        if leaf_s != leaf_d:
            self._between_leaves(leaf_s, leaf_d, w, acc)
        self._add(acc, leaf_d, nic_d, w)
        self._add(acc, nic_d, dst, w)

    def _switches_up(self, gpu: Hashable) -> list[tuple[str, int]]:
        """(NVSwitch, NVLinks) of *gpu*'s links to its node's switches that are not down."""
        n = self._node(gpu)
        up = [(f"n{n}/nvs{s}", nl) for s, nl in enumerate(self._switch_links)
              if self.g.has_edge(gpu, f"n{n}/nvs{s}")]
        if not up:
            raise InfeasibleError(f"chip {gpu}: every NVLink to its node's NVSwitches is down "
                                  "(cluster.degraded_links); NVLink SHARP and the node's NVLink "
                                  "collectives cannot include it")
        return up

    def _pseudo(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        if isinstance(dst, tuple) and dst[0] == "nvls":            # GPU -> its NVSwitch fabric
            up = self._switches_up(src)
            total = sum(nl for _, nl in up)
            for sw, nl in up:
                self._add(acc, src, sw, w * nl / total)
        elif isinstance(src, tuple) and src[0] == "nvls":          # NVSwitch fabric -> GPU
            up = self._switches_up(dst)
            total = sum(nl for _, nl in up)
            for sw, nl in up:
                self._add(acc, sw, dst, w * nl / total)
        elif isinstance(dst, tuple) and dst[0] == "sharp":         # GPU -> NIC -> leaf (reduction)
            nic = f"n{self._node(src)}/nic{self.g.nodes[src]['rail']}"
            self._add(acc, src, nic, w)
            self._add(acc, nic, dst[1], w)
        elif isinstance(src, tuple) and src[0] == "sharp":         # leaf -> NIC -> GPU (result)
            nic = f"n{self._node(dst)}/nic{self.g.nodes[dst]['rail']}"
            self._add(acc, src[1], nic, w)
            self._add(acc, nic, dst, w)
        else:
            raise TopologyError(f"no route {src!r} -> {dst!r}")
