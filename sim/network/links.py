"""Directed links of a topology graph as arrays (capacity in bytes/s, latency in s)."""

from __future__ import annotations

from collections.abc import Hashable
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
        # PERF: columns first, then arrays and one dict build (benchmarks/test_bench_training.py,
        # 1.3 M directed links at 98,304 GPUs). Edge i is link 2i one way and 2i + 1 the other.
        us: list[Hashable] = []
        vs: list[Hashable] = []
        bws: list[float] = []
        lats: list[float] = []
        kinds: list[str] = []
        # PERF: the walk nx.Graph.edges(data=True) makes (each edge once, from the end met
        # first, in the adjacency's order), without its generator: the same edges in the same
        # order (tests/test_network.py), so the same link ids.
        seen: set[Hashable] = set()
        for u, nbrs in g._adj.items():  # noqa: SLF001
            for v, d in nbrs.items():
                if v not in seen:
                    us.append(u)
                    vs.append(v)
                    bws.append(d["bandwidth_GBps"])
                    lats.append(d["latency_us"])
                    kinds.append(d["kind"])
            seen.add(u)
        kind_eff = {k: eff.get(k, 1.0) for k in set(kinds)}
        cap = np.asarray(bws, dtype=float) * GB * np.fromiter((kind_eff[k] for k in kinds), float,
                                                                 len(kinds))
        self.capacity_Bps = np.repeat(cap, 2)
        self.latency_s = np.repeat(np.asarray(lats, dtype=float) * US, 2)
        self.kind = np.repeat(np.asarray(kinds), 2)
        self.index: dict[tuple[Hashable, Hashable], int] = dict(
            zip(zip(us, vs), range(0, 2 * len(us), 2)))
        self.index.update(zip(zip(vs, us), range(1, 2 * len(us), 2)))

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
        return self.index[(u, v)]
