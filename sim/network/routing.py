"""Routes as link fractions: which directed links a flow uses and what share of its rate each carries.

Policies (chosen once per topology kind):
- GPU clusters: inside a node, over every NVSwitch in proportion to the GPU's NVLinks to it. Between
  nodes, the way NCCL moves data on a rail-optimized fabric: to the destination's rail first over
  NVLink (PXN) when the rails differ, then NIC -> leaf -> (spines of the rail, ECMP split evenly)
  -> leaf -> NIC -> GPU.
- TPU slices: dimension-order routing on the torus (x, then y, then z), the shorter way round on a
  wrapped axis and half each way on a tie; pods talk over host -> DCN -> host.
- Anything else (twisted tori, graphs edited by failures where the policy's link is gone): ECMP
  over all shortest paths, the flow split evenly at each branching hop.

Pseudo-endpoints: ``("nvls", node)`` is the NVSwitch fabric of a GPU node (a flow to it uses the
GPU's uplinks, a flow from it the downlinks); ``("sharp", leaf)`` is a leaf switch's reduction
engine (InfiniBand SHARP).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Hashable
from typing import Any

import networkx as nx
import numpy as np

from ..errors import TopologyError
from ..topology import Topology, TpuFabric, paused_gc
from ..topology_spec import GpuClusterSpec
from .links import LinkTable

__all__ = ["Router"]

Route = tuple[np.ndarray, np.ndarray]


class Router:
    def __init__(self, topo: Topology, links: LinkTable) -> None:
        self.topo = topo
        self.links = links
        self.g = topo.graph
        self._cache: dict[tuple[Hashable, Hashable], Route] = {}
        self._bfs: dict[tuple[Hashable, bool], dict[Hashable, int]] = {}
        self._gpu = not topo.is_tpu
        self._tables: tuple[Any, ...] | None = None
        self._leaf_names: list[str] = []          # leaf index -> name (``_gpu_tables``)
        if self._gpu:
            spec = topo.spec
            assert isinstance(spec, GpuClusterSpec), spec
            self._gpn = spec.gpus_per_node
            self._su = spec.su_nodes
            self._switch_links = spec.gpu_switch_links
            self._rail_of = spec.rail_of
            self._spines_all = sorted((n for n, k in self.g.nodes(data="kind") if k == "spine"),
                                      key=str)
            # Spine group of a leaf: the spines of its rail (SuperPOD three tiers), of its pod and
            # rail plane (frontier pods: spines carry a ``pod``), or all spines (two tiers).
            by_rail: dict[Any, list[str]] = defaultdict(list)
            for n in self._spines_all:
                r = self.g.nodes[n].get("rail")
                if r is not None:
                    pod = self.g.nodes[n].get("pod")
                    by_rail[r if pod is None else (pod, r)].append(n)
            self._spines_rail = dict(by_rail)
        # A node without NVSwitch (GPUs wired to each other, ``mesh_links``) has no switch hops to
        # tabulate: its routes take the general path (direct NVLink inside the node).
        mesh = self._gpu and not self._switch_links
        self._tables = None
        if self._gpu and not topo.edited and not mesh:
            with paused_gc():
                self._tables = self._gpu_tables()

    def _gpu_tables(self) -> tuple[Any, ...]:
        """Per-device link ids of the policy routes' fixed hops (see ``routes_coo``)."""
        L, g, gpn = self.links, self.g, self._gpn
        devs = self.topo.devices
        nsw = len(self._switch_links)
        # PERF: plain lists and direct index lookups, arrays at the end (1.3 M lookups at
        # 98,304 GPUs: benchmarks/test_bench_training.py).
        idx = L.index
        up_l: list[int] = []
        dn_l: list[int] = []
        pup_l: list[int] = []
        pdn_l: list[int] = []
        nup_l: list[int] = []
        ndn_l: list[int] = []
        leaf_l: list[int] = []
        rail_l: list[int] = []
        leaf_ids: dict[str, int] = {}
        leaf_of_nic: dict[str, str] = {}
        nodes_view = g.nodes
        switches: list[str] = []
        switches_of = -1                                  # the node whose switches those are
        for d in devs:
            n = d // gpn
            attrs = nodes_view[d]
            r = attrs["rail"]
            assert attrs["node"] == n and r == self._rail_of(d % gpn)
            rail_l.append(r)
            if n != switches_of:
                switches, switches_of = [f"n{n}/nvs{s}" for s in range(nsw)], n
            up_l.extend([idx[(d, x)] for x in switches])
            dn_l.extend([idx[(x, d)] for x in switches])
            nic = f"n{n}/nic{r}"
            lf = leaf_of_nic.get(nic)
            if lf is None:
                lf = leaf_of_nic[nic] = next(x for x in g[nic] if nodes_view[x]["kind"] == "leaf")
            pup_l.append(idx[(d, nic)])
            pdn_l.append(idx[(nic, d)])
            nup_l.append(idx[(nic, lf)])
            ndn_l.append(idx[(lf, nic)])
            leaf_l.append(leaf_ids.setdefault(lf, len(leaf_ids)))
        up = np.asarray(up_l, int).reshape(len(devs), nsw)
        dn = np.asarray(dn_l, int).reshape(len(devs), nsw)
        pup, pdn, nup, ndn, leaf, rail = (np.asarray(x, int) for x in (pup_l, pdn_l, nup_l, ndn_l,
                                                                        leaf_l, rail_l))
        w = np.asarray(self._switch_links, float) / sum(self._switch_links)
        # PERF: an even ECMP split over a leaf's spine group loads every leaf->spine link of the
        # group equally (and every spine->leaf link of the destination's group), so on an
        # unedited fabric the group is one trunk link per leaf and direction whose capacity is
        # the sum: exact for max-min sharing, and 2 route entries instead of 2 x spines.
        ls = sl = None
        pods: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if self._spines_all:
            names = sorted(leaf_ids, key=leaf_ids.get)          # type: ignore[arg-type]
            cap_up, cap_dn, lat_up, lat_dn = [], [], [], []
            kind = str(L.kind[L.id(names[0], self._group_of(names[0])[0])])
            pod_ids: dict[Any, int] = {}
            pgroup = np.full(len(names), -1, int)
            for j, lf in enumerate(names):
                grp = self._group_of(lf)
                if g.nodes[lf].get("pod") is not None:
                    pgroup[j] = pod_ids.setdefault((g.nodes[lf]["pod"], g.nodes[lf]["rail"]),
                                                   len(pod_ids))
                ups = [L.id(lf, sp) for sp in grp]
                downs = [L.id(sp, lf) for sp in grp]
                cap_up.append(L.capacity_Bps[ups].sum())
                cap_dn.append(L.capacity_Bps[downs].sum())
                lat_up.append(L.latency_s[ups[0]])
                lat_dn.append(L.latency_s[downs[0]])
            ls = L.add_virtual(np.array(cap_up), np.array(lat_up), kind)
            sl = L.add_virtual(np.array(cap_dn), np.array(lat_dn), kind)
            if pod_ids:
                # PERF: the same trunking one tier up: a pod's plane-r spines to the core layer
                # and back, one link each way whose capacity is the sum of the spines' core links.
                pu_cap, pd_cap, pu_lat, pd_lat = [], [], [], []
                for key in sorted(pod_ids, key=pod_ids.get):      # type: ignore[arg-type]
                    ups, downs = [], []
                    for sp in self._spines_rail[key]:
                        for c in g[sp]:
                            if g.nodes[c]["kind"] == "core":
                                ups.append(L.id(sp, c))
                                downs.append(L.id(c, sp))
                    pu_cap.append(L.capacity_Bps[ups].sum())
                    pd_cap.append(L.capacity_Bps[downs].sum())
                    pu_lat.append(L.latency_s[ups[0]] if ups else 0.0)
                    pd_lat.append(L.latency_s[downs[0]] if downs else 0.0)
                pu = L.add_virtual(np.array(pu_cap), np.array(pu_lat), kind)
                pd = L.add_virtual(np.array(pd_cap), np.array(pd_lat), kind)
                pods = (pgroup, pu, pd)
        self._leaf_names = sorted(leaf_ids, key=leaf_ids.get)      # type: ignore[arg-type]
        return up, dn, w, pup, pdn, nup, ndn, leaf, ls, sl, rail, pods

    def _switch_route(self, a: Hashable, b: Hashable) -> Route:
        """Switch *a* to switch *b* of a dragonfly: ECMP over the minimal paths (local, global,
        local hops), the flow split evenly at each branching switch; cached."""
        key = (("switch", a), ("switch", b))
        r = self._cache.get(key)
        if r is None:
            acc: dict[int, float] = defaultdict(float)
            self._ecmp(a, b, 1.0, acc)
            r = self._cache[key] = (np.fromiter(acc.keys(), dtype=int, count=len(acc)),
                                    np.fromiter(acc.values(), dtype=float, count=len(acc)))
        return r

    def _group_of(self, leaf: Hashable) -> list[str]:
        """The spines a leaf's uplinks are split over (see ``_spines_rail``)."""
        d = self.g.nodes[leaf]
        key = d["rail"] if d.get("pod") is None else (d["pod"], d["rail"])
        return self._spines_rail.get(key) or self._spines_all

    # ------------------------------------------------------------------ public

    def routes_coo(self, src: np.ndarray, dst: np.ndarray, col0: int = 0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Routes of many device-to-device flows as COO triplets (link, flow column, fraction).

        PERF: on an unedited GPU cluster every policy route is assembled with array indexing
        (NVLink hop, PXN hop, NIC, leaf, spine split) instead of one dict walk per flow; on a TPU
        slice a one-hop flow is its link. benchmarks/test_bench_collectives.py (16,384-GPU and
        4,096-chip all-reduce) measures it; tests/test_collectives.py checks it against ``route``.
        """
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        idx = np.arange(len(src)) + col0
        slow = np.ones(len(src), bool)
        if self._tables is not None and len(src):
            slow = self._gpu_bulk(src, dst, idx, parts)
        elif not self._gpu and len(src):
            index = self.links.index
            one = np.fromiter((index.get((int(a), int(b)), -1) for a, b in zip(src, dst)),
                              dtype=np.int64, count=len(src))
            hit = one >= 0
            parts.append((one[hit], idx[hit], np.ones(int(hit.sum()))))
            slow = ~hit
        for i in np.nonzero(slow)[0]:
            ids, fr = self.route(int(src[i]), int(dst[i]))
            parts.append((ids, np.full(len(ids), idx[i]), fr))
        if not parts:
            return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]

    def switch_routes_coo(self, devs: np.ndarray, up: bool, col0: int = 0
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flows between GPUs and their node's NVSwitch fabric (``("nvls", node)``), one per device."""
        cols = np.arange(len(devs)) + col0
        if self._tables is not None:
            table = self._tables[0] if up else self._tables[1]
            w = self._tables[2]
            r = table[devs]
            return r.ravel(), np.repeat(cols, r.shape[1]), np.tile(w, len(devs))
        parts = []
        for d, c in zip(devs, cols):
            node = self.g.nodes[int(d)]["node"]
            ids, fr = self.route(int(d), ("nvls", node)) if up else self.route(("nvls", node), int(d))
            parts.append((ids, np.full(len(ids), c), fr))
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]

    def _gpu_bulk(self, src: np.ndarray, dst: np.ndarray, idx: np.ndarray,
                  parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
        up, dn, w, pup, pdn, nup, ndn, leaf, ls, sl, rail, pods = self._tables  # type: ignore[misc]
        gpn = self._gpn

        def add(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
            parts.append((rows.ravel(), np.repeat(cols, rows.shape[1]), vals.ravel()))

        def nvlink(a: np.ndarray, b: np.ndarray, cols: np.ndarray) -> None:
            r = np.concatenate([up[a], dn[b]], axis=1)
            add(r, cols, np.tile(np.concatenate([w, w]), (len(a), 1)))

        same = (src // gpn) == (dst // gpn)
        if same.any():
            nvlink(src[same], dst[same], idx[same])
        cross = ~same
        if cross.any():
            a, b, c = src[cross], dst[cross], idx[cross]
            # PXN: when the rails differ, hop over NVLink to the source node's GPU in dst's place
            # (same rail as dst) and leave through its NIC.
            hop = np.where(rail[a] == rail[b], a, (a // gpn) * gpn + (b % gpn))
            pxn = hop != a
            if pxn.any():
                nvlink(a[pxn], hop[pxn], c[pxn])
            add(np.stack([pup[hop], nup[hop], ndn[b], pdn[b]], axis=1), c, np.ones((len(c), 4)))
            far = leaf[hop] != leaf[b]
            if far.any() and ls is None:                  # dragonfly: switch to switch, minimal
                for j in np.nonzero(far)[0]:
                    ids, fr = self._switch_route(self._leaf_names[leaf[hop[j]]],
                                                 self._leaf_names[leaf[b[j]]])
                    parts.append((ids, np.full(len(ids), c[j]), fr))
            elif far.any():
                assert ls is not None, "leaves without spines"
                r = np.stack([ls[leaf[hop[far]]], sl[leaf[b[far]]]], axis=1)
                add(r, c[far], np.ones(r.shape))
                if pods is not None:                      # frontier pods: through the core
                    pgroup, pu, pd = pods
                    ga, gb = pgroup[leaf[hop[far]]], pgroup[leaf[b[far]]]
                    x = ga != gb
                    if x.any():
                        r = np.stack([pu[ga[x]], pd[gb[x]]], axis=1)
                        add(r, c[far][x], np.ones(r.shape))
        return np.zeros(len(src), bool)

    def route(self, src: Hashable, dst: Hashable) -> Route:
        """(link ids, fractions) for a flow src -> dst; cached."""
        key = (src, dst)
        r = self._cache.get(key)
        if r is None:
            r = self._cache[key] = self._route(src, dst)
        return r

    def path_latency_s(self, src: Hashable, dst: Hashable) -> float:
        """Latency of the route's heaviest branch (fraction-weighted sum of link latencies)."""
        ids, fr = self.route(src, dst)
        return float(np.sum(self.links.latency_s[ids] * fr))

    # ------------------------------------------------------------------ dispatch

    def _route(self, src: Hashable, dst: Hashable) -> Route:
        if src == dst:
            return np.zeros(0, int), np.zeros(0)
        if self._tables is not None and isinstance(src, int) and isinstance(dst, int):
            parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
            self._gpu_bulk(np.array([src]), np.array([dst]), np.zeros(1, int), parts)
            acc0: dict[int, float] = defaultdict(float)
            for rows, _, vals in parts:
                for r, v in zip(rows.tolist(), vals.tolist()):
                    acc0[r] += v
            return (np.fromiter(acc0.keys(), dtype=int, count=len(acc0)),
                    np.fromiter(acc0.values(), dtype=float, count=len(acc0)))
        acc: dict[int, float] = defaultdict(float)
        try:
            if self._gpu:
                self._gpu_route(src, dst, 1.0, acc)
            else:
                self._tpu_route(src, dst, 1.0, acc)
        except (KeyError, _NoPolicy):
            acc = defaultdict(float)
            self._ecmp(src, dst, 1.0, acc)
        ids = np.fromiter(acc.keys(), dtype=int, count=len(acc))
        return ids, np.fromiter(acc.values(), dtype=float, count=len(acc))

    def _add(self, acc: dict[int, float], u: Hashable, v: Hashable, w: float) -> None:
        acc[self.links.id(u, v)] += w

    # ------------------------------------------------------------------ GPU clusters

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

    def _gpu_route(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
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
        self._leaf_to_leaf(nic_s, nic_d, w, acc)
        self._add(acc, nic_d, dst, w)

    def _leaf_to_leaf(self, nic_s: str, nic_d: str, w: float, acc: dict[int, float]) -> None:
        leaf_s = next((n for n in self.g[nic_s] if self.g.nodes[n]["kind"] == "leaf"), None)
        leaf_d = next((n for n in self.g[nic_d] if self.g.nodes[n]["kind"] == "leaf"), None)
        if leaf_s is None or leaf_d is None:            # a NIC's uplink is down: no policy route
            raise _NoPolicy
        self._add(acc, nic_s, leaf_s, w)
        if leaf_s != leaf_d and not self._spines_all:       # dragonfly: no spines
            ids, fr = self._switch_route(leaf_s, leaf_d)
            for i, x in zip(ids.tolist(), fr.tolist()):
                acc[i] += w * x
        elif leaf_s != leaf_d:
            if self.g.nodes[leaf_s].get("pod") != self.g.nodes[leaf_d].get("pod"):
                raise _NoPolicy                    # frontier pods: across the core, by ECMP
            spines = self._group_of(leaf_s)
            if not spines:
                raise _NoPolicy
            for sp in spines:
                self._add(acc, leaf_s, sp, w / len(spines))
                self._add(acc, sp, leaf_d, w / len(spines))
        self._add(acc, leaf_d, nic_d, w)

    def _pseudo(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        total = sum(self._switch_links)
        if isinstance(dst, tuple) and dst[0] == "nvls":            # GPU -> its NVSwitch fabric
            n = self._node(src)
            for s, nl in enumerate(self._switch_links):
                self._add(acc, src, f"n{n}/nvs{s}", w * nl / total)
        elif isinstance(src, tuple) and src[0] == "nvls":          # NVSwitch fabric -> GPU
            n = self._node(dst)
            for s, nl in enumerate(self._switch_links):
                self._add(acc, f"n{n}/nvs{s}", dst, w * nl / total)
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

    # ------------------------------------------------------------------ TPU slices

    def _tpu_route(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        f = self.topo.fabric
        assert isinstance(f, TpuFabric), f
        if f.twisted:
            raise _NoPolicy
        a, b = self.g.nodes[src], self.g.nodes[dst]
        if a["pod"] != b["pod"]:
            ha = next(n for n in self.g[src] if self.g.nodes[n]["kind"] == "host")
            hb = next(n for n in self.g[dst] if self.g.nodes[n]["kind"] == "host")
            for u, v in ((src, ha), (ha, "dcn"), ("dcn", hb), (hb, dst)):
                self._add(acc, u, v, w)
            return
        shape, wraps = f.shape, f.wraps
        base = int(src) - _flat(a["coords"], shape)  # type: ignore[call-overload]
        self._dor(list(a["coords"]), tuple(b["coords"]), 0, shape, wraps, base, w, acc)

    def _dor(self, cur: list[int], goal: tuple[int, ...], axis: int, shape: tuple[int, ...],
             wraps: tuple[bool, ...], base: int, w: float, acc: dict[int, float]) -> None:
        while axis < len(shape) and cur[axis] == goal[axis]:
            axis += 1
        if axis == len(shape):
            return
        length = shape[axis]
        fwd = (goal[axis] - cur[axis]) % length
        if not wraps[axis]:
            dirs = [(1 if goal[axis] > cur[axis] else -1, 1.0)]
        elif 2 * fwd < length:
            dirs = [(1, 1.0)]
        elif 2 * fwd > length:
            dirs = [(-1, 1.0)]
        else:
            dirs = [(1, 0.5), (-1, 0.5)]
        for step, share in dirs:
            pos = list(cur)
            while pos[axis] != goal[axis]:
                nxt = list(pos)
                nxt[axis] = (pos[axis] + step) % length
                self._add(acc, base + _flat(pos, shape), base + _flat(nxt, shape), w * share)
                pos = nxt
            self._dor(pos, goal, axis + 1, shape, wraps, base, w * share, acc)

    # ------------------------------------------------------------------ generic ECMP

    def _allowed(self, u: Hashable, v: Hashable) -> bool:
        if self._gpu:
            return True
        kind = self.g.edges[u, v]["kind"]
        return kind in ("ici", "optical")

    def _ecmp(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        if not self._gpu and self.g.nodes[src]["pod"] != self.g.nodes[dst]["pod"]:
            self._tpu_route(src, dst, w, acc)
            return
        dist = self._dist_to(dst)
        if src not in dist:
            raise TopologyError(f"no route {src!r} -> {dst!r} in {self.topo.name} "
                                "(the graph is disconnected between them)")
        weight: dict[Hashable, float] = {src: w}
        frontier = deque([src])
        order: list[Hashable] = []
        seen = {src}
        while frontier:                       # BFS order = decreasing distance to dst
            u = frontier.popleft()
            order.append(u)
            for v in self.g[u]:
                if v not in seen and dist.get(v, -1) == dist[u] - 1 and self._allowed(u, v):
                    seen.add(v)
                    frontier.append(v)
        for u in order:
            if u == dst:
                continue
            nexts = [v for v in self.g[u] if dist.get(v, -1) == dist[u] - 1 and self._allowed(u, v)]
            share = weight.get(u, 0.0) / len(nexts)
            for v in nexts:
                self._add(acc, u, v, share)
                weight[v] = weight.get(v, 0.0) + share

    def _dist_to(self, dst: Hashable) -> dict[Hashable, int]:
        key = (dst, self._gpu)
        if key not in self._bfs:
            if self._gpu:
                self._bfs[key] = nx.single_source_shortest_path_length(self.g, dst)
            else:
                sub = self.g.edge_subgraph((u, v) for u, v, k in self.g.edges(data="kind")
                                           if k in ("ici", "optical"))
                self._bfs[key] = (nx.single_source_shortest_path_length(sub, dst)
                                  if dst in sub else {dst: 0})
        return self._bfs[key]


class _NoPolicy(Exception):
    """The policy router does not apply here; use ECMP over shortest paths."""


def _flat(coords: tuple[int, ...] | list[int], shape: tuple[int, ...]) -> int:
    i = 0
    for c, d in zip(coords, shape):
        i = i * d + c
    return i
