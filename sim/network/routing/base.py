"""The interface every fabric kind's router has, and what they share: the route cache, the
assembly of many routes as COO triplets, and ECMP over shortest paths (the fallback where a
fabric's policy does not apply: twisted tori, graphs edited by failures where the policy's link is
gone).

A fabric kind is a subclass that says how a flow crosses its fabric (``_policy``) and, where it
can, routes many flows at once with array indexing (``_bulk``); ``sim.network.routing.make_router``
picks the subclass once per topology.
"""

from __future__ import annotations

import abc
from collections import defaultdict, deque
from collections.abc import Hashable

import networkx as nx
import numpy as np

from ...errors import TopologyError
from ...topology import Topology
from ..links import LinkTable

__all__ = ["Coo", "NoPolicy", "Route", "Router"]

# (link ids, fraction of the flow's rate on each)
Route = tuple[np.ndarray, np.ndarray]
# (link ids, flow columns, fractions): many routes as the entries of a (links x flows) matrix
Coo = tuple[np.ndarray, np.ndarray, np.ndarray]


class NoPolicy(Exception):
    """The fabric's policy does not apply to this flow; use ECMP over shortest paths."""


class Router(abc.ABC):
    """Routes of flows between graph nodes (and the pseudo-endpoints a fabric kind understands) as
    link fractions: which directed links of *links* a flow uses and what share of its rate each
    carries. Routes are cached: ask as often as needed."""

    def __init__(self, topo: Topology, links: LinkTable) -> None:
        self.topo = topo
        self.links = links
        self.g = topo.graph
        self._cache: dict[tuple[Hashable, Hashable], Route] = {}
        self._bfs: dict[Hashable, dict[Hashable, int]] = {}

    # ------------------------------------------------------------------ the interface

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

    def routes_coo(self, src: np.ndarray, dst: np.ndarray, col0: int = 0) -> Coo:
        """Routes of many device-to-device flows as COO triplets (link, flow column, fraction).

        PERF: a fabric kind assembles what it can with array indexing (``_bulk``) instead of one
        dict walk per flow; the rest take ``route``. benchmarks/test_bench_collectives.py
        (16,384-GPU and 4,096-chip all-reduce) measures it; tests/test_network.py checks it
        against ``route``.
        """
        parts: list[Coo] = []
        idx = np.arange(len(src)) + col0
        slow = self._bulk(src, dst, idx, parts) if len(src) else np.ones(0, bool)
        for i in np.nonzero(slow)[0]:
            ids, fr = self.route(int(src[i]), int(dst[i]))
            parts.append((ids, np.full(len(ids), idx[i]), fr))
        return _concat(parts)

    def switch_routes_coo(self, devs: np.ndarray, up: bool, col0: int = 0) -> Coo:
        """Flows between devices and their node's NVSwitch fabric (``("nvls", node)``), one per
        device: to it when *up*, from it otherwise."""
        raise TopologyError(f"{self.topo.name} has no NVSwitch fabric to route to")

    def all_to_all_link_bytes(self, devs: np.ndarray) -> np.ndarray:
        """Bytes on every link of the table when each device of *devs* sends one byte to each
        other: the sum of the n (n - 1) routes. Here one source's routes at a time (no cap on n,
        memory of one source's flows); a fabric kind that can count them by their shared hops
        does it faster (``gpu.GpuRouter``)."""
        total = np.zeros(len(self.links))
        devs = np.asarray(devs, np.int64)
        for a in devs:
            dst = devs[devs != a]
            rows, _, vals = self.routes_coo(np.full(len(dst), a), dst)
            if len(rows):
                total += np.bincount(rows, weights=vals, minlength=len(self.links))
        return total

    # ------------------------------------------------------------------ what a fabric kind says

    def _bulk(self, src: np.ndarray, dst: np.ndarray, idx: np.ndarray, parts: list[Coo]) -> np.ndarray:
        """Append the routes of the flows src[i] -> dst[i] (columns *idx*) that array indexing
        can build to *parts*; which flows are left for ``route`` (a mask). Default: all of them."""
        return np.ones(len(src), bool)

    @abc.abstractmethod
    def _policy(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        """Add the fabric's route of weight *w* from *src* to *dst* to *acc* (link id -> fraction);
        raise ``NoPolicy`` (or KeyError, for a link the graph has lost) where it does not apply."""

    def _allowed(self, u: Hashable, v: Hashable) -> bool:
        """Whether ECMP may take the edge u - v (every edge unless a fabric kind says otherwise)."""
        return True

    def _distances(self, dst: Hashable) -> dict[Hashable, int]:
        """Hops from every node to *dst* over the edges ECMP may take."""
        return self._distances_in(self.g, dst)

    @staticmethod
    def _distances_in(graph: nx.Graph, dst: Hashable) -> dict[Hashable, int]:
        """Hops from every node of *graph* to *dst*."""
        return nx.single_source_shortest_path_length(graph, dst)

    # ------------------------------------------------------------------ shared

    def _route(self, src: Hashable, dst: Hashable) -> Route:
        if src == dst:
            return np.zeros(0, int), np.zeros(0)
        acc: dict[int, float] = defaultdict(float)
        try:
            self._policy(src, dst, 1.0, acc)
        except (KeyError, NoPolicy):
            acc = defaultdict(float)
            self._ecmp(src, dst, 1.0, acc)
        return _as_route(acc)

    def _add(self, acc: dict[int, float], u: Hashable, v: Hashable, w: float) -> None:
        acc[self.links.id(u, v)] += w

    def _ecmp(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        """ECMP over all shortest paths, the flow split evenly at each branching hop."""
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
            if u == dst:                      # (a node off the hops' graph is no "-1" past dst)
                continue
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
        hit = self._bfs.get(dst)
        if hit is None:
            hit = self._bfs[dst] = self._distances(dst)
        return hit


def add_rows(parts: list[Coo], rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
    """Append the routes of flows *cols* given as rows of link ids (one row per flow) and their
    fractions to *parts*."""
    parts.append((rows.ravel(), np.repeat(cols, rows.shape[1]), vals.ravel()))


def _as_route(acc: dict[int, float]) -> Route:
    return (np.fromiter(acc.keys(), dtype=int, count=len(acc)),
            np.fromiter(acc.values(), dtype=float, count=len(acc)))


def _concat(parts: list[Coo]) -> Coo:
    if not parts:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]))
