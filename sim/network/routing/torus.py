"""TPU slices: dimension-order routing on the ICI torus (x, then y, then z), the shorter way round
on a wrapped axis and half each way on a tie; slices (pods) talk over host -> DCN -> host. A
twisted torus, or a graph edited by failures where a hop's link is gone, takes ECMP over the
shortest ICI paths."""

from __future__ import annotations

from collections.abc import Hashable
from functools import cached_property

import networkx as nx
import numpy as np

from ...topology import Topology, TpuFabric
from ..links import LinkTable
from .base import Coo, NoPolicy, Router

__all__ = ["TorusRouter"]

_ICI = ("ici", "optical")                 # the edges of a slice (ECMP stays on them)


class TorusRouter(Router):
    """ICI tori joined by the data-center network."""

    def __init__(self, topo: Topology, links: LinkTable) -> None:
        super().__init__(topo, links)
        assert isinstance(topo.fabric, TpuFabric), topo.fabric
        self.fabric = topo.fabric

    def _bulk(self, src: np.ndarray, dst: np.ndarray, idx: np.ndarray, parts: list[Coo]) -> np.ndarray:
        # PERF: a flow between ICI neighbours (most of a torus collective's) is its one link,
        # found for all flows at once in the link table (``_chip_link``).
        a, b = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        link, chips = self._chip_link(a, b)
        hit = link >= 0
        parts.append((link[hit], idx[hit], np.ones(int(hit.sum()))))
        rest = ~hit
        far = np.flatnonzero(rest & chips & (a != b))
        if len(far) and not self.fabric.twisted:
            rest[far[self._dor_bulk(a[far], b[far], idx[far], parts)]] = False
        return rest

    def _dor_bulk(self, a: np.ndarray, b: np.ndarray, cols: np.ndarray, parts: list[Coo]) -> np.ndarray:
        """Dimension-order routes (``_dor``) of the multi-hop flows a[i] -> b[i] inside one slice,
        all flows one hop at a time; which of them it routed (a mask). A flow between slices, or
        one whose hop has no link (an edited graph), is left to ``route``. A tie on a wrapped axis
        sends half each way, and both halves meet again before the next axis, as in ``_dor``."""
        shape, wraps = self.fabric.shape, self.fabric.wraps
        per_pod = int(np.prod(shape))
        ok = (a // per_pod) == (b // per_pod)
        fixed = a.copy()                     # each flow's chip as it goes, updated axis by axis
        cur = np.array(np.unravel_index(a % per_pod, shape)).T
        goal = np.array(np.unravel_index(b % per_pod, shape)).T
        strides = [int(np.prod(shape[ax + 1:])) for ax in range(len(shape))]
        flow_l: list[np.ndarray] = []
        link_l: list[np.ndarray] = []
        val_l: list[np.ndarray] = []
        for ax, length in enumerate(shape):
            diff = goal[:, ax] - cur[:, ax]
            moving = ok & (diff != 0)
            if not moving.any():
                continue
            fwd = diff % length
            if wraps[ax]:
                plus, minus = 2 * fwd < length, 2 * fwd > length
            else:
                plus, minus = diff > 0, diff < 0
            tie = moving & ~plus & ~minus
            for step, sel in ((1, plus | tie), (-1, minus | tie)):
                f = np.flatnonzero(sel & moving)
                if not len(f):
                    continue
                hops = fwd[f] if step == 1 else (length - fwd[f]) % length   # (= -diff unwrapped)
                share = np.where(tie[f], 0.5, 1.0)
                pos = cur[f, ax].copy()
                off = fixed[f] - pos * strides[ax]     # the chip's number less this axis' part
                hop = self._hop_links[ax][0 if step == 1 else 1]
                for k in range(int(hops.max())):
                    live = np.flatnonzero(hops > k)
                    p = pos[live]
                    link = hop[off[live] + p * strides[ax]]
                    ok[f[live[link < 0]]] = False
                    flow_l.append(f[live])
                    link_l.append(link)
                    val_l.append(share[live])
                    pos[live] = (p + step) % length
            fixed[moving] += (goal[moving, ax] - cur[moving, ax]) * strides[ax]
            cur[moving, ax] = goal[moving, ax]
        if flow_l:
            flows = np.concatenate(flow_l)
            keep = ok[flows]
            parts.append((np.concatenate(link_l)[keep], cols[flows[keep]], np.concatenate(val_l)[keep]))
        return ok

    @cached_property
    def _chip_at(self) -> np.ndarray:
        """Each chip's node position in the link table, by chip number (-1: no such chip)."""
        chip = self.links.int_nodes()
        at = np.flatnonzero(chip >= 0)
        out = np.full(int(chip[at].max()) + 1 if len(at) else 0, -1, np.int64)
        out[chip[at]] = at
        return out

    def _chip_at_of(self, chips: np.ndarray) -> np.ndarray:
        """``_chip_at`` of each of *chips* (-1 for a number that is no chip)."""
        table = self._chip_at
        ok = (chips >= 0) & (chips < len(table))
        return np.where(ok, table[np.where(ok, chips, 0)] if len(table) else -1, -1)

    def _chip_link(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the link chip a[i] -> chip b[i], -1 where there is none; whether both are chips)."""
        pa, pb = self._chip_at_of(a), self._chip_at_of(b)
        both = (pa >= 0) & (pb >= 0)
        out = np.full(len(a), -1, np.int64)
        out[both] = self.links.find_at(pa[both], pb[both])
        return out, both

    @cached_property
    def _hop_links(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per axis, the link from each chip (by number) to its next chip along the axis, one
        way and the other (-1: none, as without a wrap link), found once a chip (PERF:
        ``_dor_bulk``'s hops, run-tpu-v4)."""
        shape = self.fabric.shape
        per_pod = int(np.prod(shape))
        chips = np.arange(len(self._chip_at))
        coords = np.unravel_index(chips % per_pod, shape)
        out = []
        for ax, length in enumerate(shape):
            stride = int(np.prod(shape[ax + 1:]))
            ways = [self._chip_link(chips, chips + ((coords[ax] + step) % length - coords[ax]) * stride)[0]
                    for step in (1, -1)]
            out.append((ways[0], ways[1]))
        return out

    def _policy(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        f = self.fabric
        if f.twisted:
            raise NoPolicy
        a, b = self.g.nodes[src], self.g.nodes[dst]
        if a["pod"] != b["pod"]:
            self._over_dcn(src, dst, w, acc)
            return
        shape, wraps = f.shape, f.wraps
        base = int(src) - _flat(a["coords"], shape)  # type: ignore[call-overload]
        self._dor(list(a["coords"]), tuple(b["coords"]), 0, shape, wraps, base, w, acc)

    def _over_dcn(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        """Chip -> its host -> DCN -> the other slice's host -> chip."""
        ha = next(n for n in self.g[src] if self.g.nodes[n]["kind"] == "host")
        hb = next(n for n in self.g[dst] if self.g.nodes[n]["kind"] == "host")
        for u, v in ((src, ha), (ha, "dcn"), ("dcn", hb), (hb, dst)):
            self._add(acc, u, v, w)

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

    def _ecmp(self, src: Hashable, dst: Hashable, w: float, acc: dict[int, float]) -> None:
        if self.g.nodes[src]["pod"] != self.g.nodes[dst]["pod"]:
            self._over_dcn(src, dst, w, acc)
            return
        super()._ecmp(src, dst, w, acc)

    def _allowed(self, u: Hashable, v: Hashable) -> bool:
        return self.g.edges[u, v]["kind"] in _ICI

    def _distances(self, dst: Hashable) -> dict[Hashable, int]:
        sub = self.g.edge_subgraph((u, v) for u, v, k in self.g.edges(data="kind") if k in _ICI)
        return nx.single_source_shortest_path_length(sub, dst) if dst in sub else {dst: 0}


def _flat(coords: tuple[int, ...] | list[int], shape: tuple[int, ...]) -> int:
    i = 0
    for c, d in zip(coords, shape):
        i = i * d + c
    return i
