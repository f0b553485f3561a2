"""Directed links of a topology graph as arrays (capacity in bytes/s, latency in s)."""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from ..topology import Topology, paused_gc
from ..units import GB, US

__all__ = ["LinkTable"]


class LinkTable:
    """Each undirected graph edge becomes two directed links with the edge's per-direction bandwidth.

    ``efficiency`` scales the capacity by link kind (achievable fraction of the line rate, see
    ``sim.calibration``); kinds not named keep their full rate.
    """

    def __init__(self, topo: Topology, efficiency: dict[str, float] | None = None) -> None:
        with paused_gc():
            self._build(topo.graph, efficiency or {})

    def _build(self, g: Any, eff: dict[str, float]) -> None:
        # PERF: columns first, then arrays (benchmarks/release.py run-98k: 1.3 M directed links
        # at 98,304 GPUs). Edge i is link 2i one way and 2i + 1 the other. Links are found by
        # their ends' positions in the graph's node order (``ids``), not through a dict of
        # (u, v) tuples: building that dict took most of the table's time.
        adj = g._adj  # noqa: SLF001
        pos: dict[Hashable, int] = dict(zip(adj, range(len(adj))))
        pus: list[int] = []
        pvs: list[int] = []
        bws: list[float] = []
        lats: list[float] = []
        kinds: list[str] = []
        # PERF: the walk nx.Graph.edges(data=True) makes (each edge once, from the end met
        # first, in the adjacency's order), without its generator: the same edges in the same
        # order (tests/test_network.py), so the same link ids.
        for i, nbrs in enumerate(adj.values()):
            for v, d in nbrs.items():
                j = pos[v]
                if j >= i:
                    pus.append(i)
                    pvs.append(j)
                    bws.append(d["bandwidth_GBps"])
                    lats.append(d["latency_us"])
                    kinds.append(d["kind"])
        kind_eff = {k: eff.get(k, 1.0) for k in set(kinds)}
        cap = np.asarray(bws, dtype=float) * GB * np.fromiter((kind_eff[k] for k in kinds), float,
                                                                 len(kinds))
        self.capacity_Bps = np.repeat(cap, 2)
        self.latency_s = np.repeat(np.asarray(lats, dtype=float) * US, 2)
        self.kind = np.repeat(np.asarray(kinds), 2)
        self._pos = pos
        self._n_nodes = len(adj)
        pu, pv = np.asarray(pus, np.int64), np.asarray(pvs, np.int64)
        self._ends_at = (pu, pv)
        keys = np.empty(2 * len(pu), np.int64)             # link id -> its ends' key
        keys[0::2] = pu * self._n_nodes + pv
        keys[1::2] = pv * self._n_nodes + pu
        self._order = np.argsort(keys)
        self._keys = keys[self._order]

    @functools.cached_property
    def index(self) -> dict[tuple[Hashable, Hashable], int]:
        """{(u, v): link id} of every graph link, each way: built when first asked for."""
        nodes, (pu, pv) = list(self._pos), self._ends_at
        us, vs = [nodes[i] for i in pu.tolist()], [nodes[j] for j in pv.tolist()]
        out = dict(zip(zip(us, vs), range(0, 2 * len(us), 2)))
        out.update(zip(zip(vs, us), range(1, 2 * len(us), 2)))
        return out

    def positions(self, nodes: Iterable[Hashable]) -> np.ndarray:
        """Positions of *nodes* in the graph's node order (KeyError for a node not in it)."""
        pos = self._pos
        return np.asarray([pos[n] for n in nodes], np.int64)

    def ends_at(self) -> tuple[np.ndarray, np.ndarray]:
        """(u, v) node positions of each graph edge i (links 2i: u -> v, 2i + 1: v -> u)."""
        return self._ends_at

    def int_nodes(self) -> np.ndarray:
        """Each node position's integer node id (a chip), -1 for a node named otherwise."""
        return np.fromiter((n if type(n) is int else -1 for n in self._pos), np.int64, len(self._pos))

    def find_at(self, pu: np.ndarray | int, pv: np.ndarray | int) -> np.ndarray:
        """Link ids of pu[i] -> pv[i] given as node positions (``positions``, each >= 0), in
        their shape; -1 where the graph has no such edge."""
        want = np.asarray(pu, np.int64) * self._n_nodes + np.asarray(pv, np.int64)
        if not want.size or not len(self._keys):
            return np.full(want.shape, -1, np.int64)
        at = np.minimum(np.searchsorted(self._keys, want), len(self._keys) - 1)
        return np.where(self._keys[at] == want, self._order[at], -1)

    def ids_at(self, pu: np.ndarray | int, pv: np.ndarray | int) -> np.ndarray:
        """``find_at``, with a KeyError if the graph has no such edge."""
        ids = self.find_at(pu, pv)
        if (ids < 0).any():
            bad = np.flatnonzero(ids.ravel() < 0)[0]
            u, v = (np.broadcast_to(np.asarray(x, np.int64), ids.shape).ravel()[bad] for x in (pu, pv))
            nodes = list(self._pos)
            raise KeyError((nodes[u], nodes[v]))
        return ids

    def ids(self, us: Iterable[Hashable], vs: Iterable[Hashable]) -> np.ndarray:
        """Link ids of us[i] -> vs[i] (KeyError if the graph has no such edge)."""
        return self.ids_at(self.positions(us), self.positions(vs))

    def add_virtual(self, capacity_Bps: np.ndarray, latency_s: np.ndarray, kind: str) -> np.ndarray:
        """Append links that are not graph edges (trunks standing for parallel ECMP links); ids."""
        first = len(self.capacity_Bps)
        self.capacity_Bps = np.concatenate([self.capacity_Bps, capacity_Bps])
        self.latency_s = np.concatenate([self.latency_s, latency_s])
        self.kind = np.concatenate([self.kind, np.full(len(capacity_Bps), kind)])
        return np.arange(first, len(self.capacity_Bps))

    def __len__(self) -> int:
        return len(self.capacity_Bps)

    def id(self, u: Hashable, v: Hashable) -> int:
        """Link id of u -> v (KeyError if the graph has no such edge)."""
        try:
            return int(self.ids_at(self._pos[u], self._pos[v]))
        except KeyError:
            raise KeyError((u, v)) from None
