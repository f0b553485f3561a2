"""Dragonflies (HPE Slingshot, ``layout: dragonfly``): edge switches in groups joined all-to-all
inside and group to group by global links, no spines.

A flow between switches of one group takes the local link. Between groups Slingshot routes
adaptively, UGAL-style: per packet, the minimal path (local, global, local hops) or a non-minimal
one through an intermediate group (Valiant), whichever the switches see less loaded (De Sensi et
al., SC20, "An In-Depth Analysis of the Slingshot Interconnect": minimal paths of at most 3
switch-to-switch hops, adaptive routing over non-minimal ones; Kim et al., ISCA 2008, UGAL). As
fixed fractions for the fluid model: a flow from group A to group B goes minimally (ECMP over
the shortest paths) with the direct cables' share of the capacity open to it, and through each
group of the machine the job does not occupy (``system_groups``, one node each in the graph)
with that group's share: with k job groups and I other groups, each pair of job groups has its
own cables plus 1/(k - 1) of every other group's cables to each end, so the non-minimal share is
I / (k - 1 + I). A job on every group of the machine routes minimally; one on two groups of a
ten-group machine sends 8/9 of its inter-group traffic through the other eight. Paths through
the job's own groups are not used here (their switches carry the job's own traffic).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable

import numpy as np

from ...topology import Topology
from ..links import LinkTable
from .base import Coo, Route
from .gpu import GpuRouter

__all__ = ["DragonflyRouter"]


class DragonflyRouter(GpuRouter):
    """GPU nodes on a dragonfly: switch to switch minimally, and through the machine's other
    groups in proportion to their cables (module docstring)."""

    def __init__(self, topo: Topology, links: LinkTable) -> None:
        super().__init__(topo, links)
        g = topo.graph
        self._transits = sorted((n for n, d in g.nodes(data=True) if d.get("kind") == "transit"),
                                key=str)
        self._transit_set = frozenset(self._transits)
        groups = {d["group"] for _, d in g.nodes(data=True)
                  if d.get("kind") == "leaf" and "group" in d}
        k, i = len(groups), len(self._transits)
        self.nonminimal_share = i / (k - 1 + i) if k > 1 and i else 0.0
        self._switches_only = g.subgraph([n for n, d in g.nodes(data=True)
                                          if d.get("kind") != "transit"])

    def _distances(self, dst: Hashable) -> dict[Hashable, int]:
        """Minimal routes never pass through another group's transit node; a route to one (the
        first half of a non-minimal route) goes over the switches to it."""
        if dst in self._transit_set:
            return self._distances_in(self.g.subgraph([*self._switches_only.nodes, dst]), dst)
        return self._distances_in(self._switches_only, dst)

    def _switch_route(self, a: str, b: str) -> Route:
        """Switch *a* to switch *b*: minimal ECMP, and the non-minimal share through the other
        groups when they are in different groups; cached."""
        key = (("switch", a), ("switch", b))
        r = self._cache.get(key)
        if r is None:
            acc: dict[int, float] = defaultdict(float)
            v = self.nonminimal_share
            if v and self.g.nodes[a].get("group") != self.g.nodes[b].get("group"):
                self._ecmp(a, b, 1.0 - v, acc)
                w = v / len(self._transits)
                for t in self._transits:
                    self._ecmp(a, t, w, acc)
                    self._from_transit(t, b, w, acc)
            else:
                self._ecmp(a, b, 1.0, acc)
            r = self._cache[key] = (np.fromiter(acc.keys(), dtype=int, count=len(acc)),
                                    np.fromiter(acc.values(), dtype=float, count=len(acc)))
        return r

    def _from_transit(self, t: str, b: str, w: float, acc: dict[int, float]) -> None:
        """The second half of a non-minimal route: from transit group *t* over its cables to the
        switches of *b*'s group nearest *b*, then minimally."""
        dist = self._dist_to(b)
        near = [s for s in self.g[t] if s in dist]
        best = min(dist[s] for s in near)
        nexts = [s for s in near if dist[s] == best]
        for s in nexts:
            self._add(acc, t, s, w / len(nexts))
            if s != b:
                self._ecmp(s, b, w / len(nexts), acc)

    def _between_leaves_bulk(self, la: np.ndarray, lb: np.ndarray, cols: np.ndarray,
                             parts: list[Coo]) -> None:
        assert self._hops is not None
        names = self._hops.leaf_names
        for a, b, c in zip(la, lb, cols):
            ids, fr = self._switch_route(names[a], names[b])
            parts.append((ids, np.full(len(ids), c), fr))

    def _between_leaves(self, leaf_s: str, leaf_d: str, w: float, acc: dict[int, float]) -> None:
        ids, fr = self._switch_route(leaf_s, leaf_d)
        for i, x in zip(ids.tolist(), fr.tolist()):
            acc[i] += w * x
