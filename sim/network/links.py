"""Directed links of a topology graph as arrays (capacity in bytes/s, latency in s)."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ..topology import Topology
from ..units import GB, US

__all__ = ["LinkTable"]


class LinkTable:
    """Each undirected graph edge becomes two directed links with the edge's per-direction bandwidth.

    ``efficiency`` scales the capacity by link kind (achievable fraction of the line rate, see
    ``sim.calibration``); kinds not named keep their full rate.
    """

    def __init__(self, topo: Topology, efficiency: dict[str, float] | None = None) -> None:
        g = topo.graph
        eff = efficiency or {}
        self.index: dict[tuple[Hashable, Hashable], int] = {}
        caps: list[float] = []
        lats: list[float] = []
        kinds: list[str] = []
        for u, v, d in g.edges(data=True):
            c = d["bandwidth_GBps"] * GB * eff.get(d["kind"], 1.0)
            for a, b in ((u, v), (v, u)):
                self.index[(a, b)] = len(caps)
                caps.append(c)
                lats.append(d["latency_us"] * US)
                kinds.append(d["kind"])
        self.capacity_Bps = np.asarray(caps, dtype=float)
        self.latency_s = np.asarray(lats, dtype=float)
        self.kind = np.asarray(kinds)

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
