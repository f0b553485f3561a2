"""Rail-optimized fat-trees: leaf -> (the spines of the leaf's group, ECMP split evenly) -> leaf.

``FatTreeRouter``: two tiers (every leaf reaches every spine) and the SuperPOD's three tiers (a
spine group per rail, cores joining the groups: a rail-aligned flow never needs them).
``PodRouter``: frontier-scale pods (``pod_sus``, ``sim.topology.gpu_cluster``): a non-blocking
leaf-spine per pod and rail plane, a core layer between the pods.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...topology import Topology
from ..links import LinkTable
from .base import Coo, NoPolicy, add_rows
from .gpu import GpuRouter, NodeHops

__all__ = ["FatTreeRouter", "PodRouter"]


@dataclass(frozen=True, slots=True, eq=False)
class Trunks:
    """Virtual links (ids in the LinkTable) standing for parallel ECMP links, indexed by group:
    ``up[i]`` all of group i's links one way, ``down[i]`` the other way; *kind* the links'."""

    up: np.ndarray
    down: np.ndarray
    kind: str


class FatTreeRouter(GpuRouter):
    """A leaf's uplinks split evenly over the spines of its group: its rail's spines (three tiers)
    or all spines (two tiers)."""

    def __init__(self, topo: Topology, links: LinkTable) -> None:
        # the spine groups first: GpuRouter.__init__ builds the trunk tables from them
        g = topo.graph
        self._spines_all = sorted((n for n, a in g._node.items()  # noqa: SLF001
                                   if a.get("kind") == "spine"), key=str)
        groups: dict[Hashable, list[str]] = defaultdict(list)
        for n in self._spines_all:
            if g.nodes[n].get("rail") is not None:
                groups[self._group_key(g.nodes[n])].append(n)
        self._spines_of: dict[Hashable, list[str]] = dict(groups)
        self._spine_trunks: Trunks | None = None          # per leaf index (``NodeHops.leaf``)
        super().__init__(topo, links)

    def _group_key(self, attrs: Mapping[str, Any]) -> Hashable:
        """The spine group of a leaf or spine with these attributes: its rail."""
        return attrs["rail"]

    def _group_of(self, leaf: Hashable) -> list[str]:
        """The spines a leaf's uplinks are split over."""
        return self._spines_of.get(self._group_key(self.g.nodes[leaf])) or self._spines_all

    def _trunks(self, hops: NodeHops) -> None:
        # PERF: an even ECMP split over a leaf's spine group loads every leaf->spine link of the
        # group equally (and every spine->leaf link of the destination's group), so on an
        # unedited fabric the group is one trunk link per leaf and direction whose capacity is
        # the sum: exact for max-min sharing, and 2 route entries instead of 2 x spines.
        if not self._spines_all:                          # one node: no spines
            return
        L = self.links
        names = hops.leaf_names
        cap_up, cap_dn, lat_up, lat_dn = [], [], [], []
        kind = str(L.kind[L.id(names[0], self._group_of(names[0])[0])])
        # PERF: each group's spine positions found once, each leaf's links all at once
        at_of: dict[tuple[str, ...], np.ndarray] = {}
        for lf, lf_at in zip(names, L.positions(names).tolist()):
            grp = tuple(self._group_of(lf))
            sp_at = at_of.get(grp)
            if sp_at is None:
                sp_at = at_of[grp] = L.positions(grp)
            ups, downs = L.ids_at(lf_at, sp_at), L.ids_at(sp_at, lf_at)
            cap_up.append(L.capacity_Bps[ups].sum())
            cap_dn.append(L.capacity_Bps[downs].sum())
            lat_up.append(L.latency_s[ups[0]])
            lat_dn.append(L.latency_s[downs[0]])
        self._spine_trunks = Trunks(*_virtual_pair(L, cap_up, lat_up, cap_dn, lat_dn, kind), kind)

    def _between_leaves_bulk(self, la: np.ndarray, lb: np.ndarray, cols: np.ndarray,
                             parts: list[Coo]) -> None:
        t = self._spine_trunks
        assert t is not None, "leaves without spines"
        r = np.stack([t.up[la], t.down[lb]], axis=1)
        add_rows(parts, r, cols, np.ones(r.shape))

    def _between_leaves(self, leaf_s: str, leaf_d: str, w: float, acc: dict[int, float]) -> None:
        spines = self._group_of(leaf_s)
        if not spines:
            raise NoPolicy
        for sp in spines:
            self._add(acc, leaf_s, sp, w / len(spines))
            self._add(acc, sp, leaf_d, w / len(spines))


class PodRouter(FatTreeRouter):
    """Frontier-scale pods: inside a pod, a leaf-spine per rail plane (the spines of the leaf's pod
    and plane); between pods, through the core layer (ECMP over shortest paths, or one trunk per
    pod and plane each way on an unedited fabric)."""

    def __init__(self, topo: Topology, links: LinkTable) -> None:
        self._plane_of_leaf = np.zeros(0, int)            # leaf index -> (pod, plane) index
        self._core_trunks: Trunks | None = None           # per (pod, plane) index
        super().__init__(topo, links)

    def _group_key(self, attrs: Mapping[str, Any]) -> Hashable:
        """The spines of a leaf's (or spine's) pod and rail plane."""
        pod = attrs.get("pod")
        return attrs["rail"] if pod is None else (pod, attrs["rail"])

    def _trunks(self, hops: NodeHops) -> None:
        super()._trunks(hops)
        if self._spine_trunks is None:
            return
        kind = self._spine_trunks.kind
        # PERF: the same trunking one tier up: a pod's plane-r spines to the core layer and back,
        # one link each way whose capacity is the sum of the spines' core links.
        g, L = self.g, self.links
        planes: dict[Hashable, int] = {}
        plane_of_leaf = np.full(len(hops.leaf_names), -1, int)
        for j, lf in enumerate(hops.leaf_names):
            if g.nodes[lf].get("pod") is not None:
                plane_of_leaf[j] = planes.setdefault((g.nodes[lf]["pod"], g.nodes[lf]["rail"]),
                                                     len(planes))
        if not planes:
            return
        pu_cap, pd_cap, pu_lat, pd_lat = [], [], [], []
        for key in planes:                                # insertion order = index order
            ends = [(sp, c) for sp in self._spines_of[key] for c in g[sp]
                    if g.nodes[c]["kind"] == "core"]
            ups = L.ids([sp for sp, _ in ends], [c for _, c in ends])
            downs = L.ids([c for _, c in ends], [sp for sp, _ in ends])
            pu_cap.append(L.capacity_Bps[ups].sum())
            pd_cap.append(L.capacity_Bps[downs].sum())
            pu_lat.append(L.latency_s[ups[0]] if len(ups) else 0.0)
            pd_lat.append(L.latency_s[downs[0]] if len(downs) else 0.0)
        self._plane_of_leaf = plane_of_leaf
        self._core_trunks = Trunks(*_virtual_pair(L, pu_cap, pu_lat, pd_cap, pd_lat, kind), kind)

    def _between_leaves_bulk(self, la: np.ndarray, lb: np.ndarray, cols: np.ndarray,
                             parts: list[Coo]) -> None:
        super()._between_leaves_bulk(la, lb, cols, parts)
        t = self._core_trunks
        if t is None:
            return
        ga, gb = self._plane_of_leaf[la], self._plane_of_leaf[lb]
        x = ga != gb
        if x.any():
            r = np.stack([t.up[ga[x]], t.down[gb[x]]], axis=1)
            add_rows(parts, r, cols[x], np.ones(r.shape))

    def _between_leaves(self, leaf_s: str, leaf_d: str, w: float, acc: dict[int, float]) -> None:
        if self.g.nodes[leaf_s].get("pod") != self.g.nodes[leaf_d].get("pod"):
            raise NoPolicy                        # across the core: ECMP over shortest paths
        super()._between_leaves(leaf_s, leaf_d, w, acc)


def _virtual_pair(L: LinkTable, cap_up: list[float], lat_up: list[float], cap_dn: list[float],
                  lat_dn: list[float], kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Ids of the up trunks then the down trunks, appended to *L* as one block (the same ids as
    two ``add_virtual`` calls; PERF: one copy of the table's columns, 1.3 M links at 98,304 GPUs)."""
    ids = L.add_virtual(np.array(cap_up + cap_dn), np.array(lat_up + lat_dn), kind)
    return ids[:len(cap_up)], ids[len(cap_up):]
