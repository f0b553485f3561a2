"""An all-to-all's link bytes on a GPU fabric, counted by the hops its routes share.

Every device of the group sends one byte to every other. A flow a -> b across nodes goes the way
``gpu.GpuRouter`` routes it: over NVLink to the GPU of b's local index when a's rail is not b's
(PXN; the hop h is a itself when it is), h's NIC and edge switch, the edge switches' path, b's
edge switch and NIC. So:

- each destination's NIC hops carry one flow from every source off its node;
- each hop GPU's NIC hops carry the flows its node's sources send through it;
- the path between edge switches depends only on the two switches: it is routed once per pair
  of switches, weighted with the flows between them (hop -> destination pairs counted with a
  matrix product over the destinations' local index);
- flows on one node, and the PXN hops, are routed as flows (a node's worth each).

n (n - 1) routes become (edge switches)^2 plus a few per node: a 2,160-rank all-to-all on a
dragonfly takes under a second (benchmarks/test_bench_collectives.py), with the same bytes on
every link as routing each flow (tests/test_all_to_all_scale.py).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .gpu import GpuRouter

__all__ = ["AllToAll"]


class AllToAll:
    """The counting for one group of devices on *router*'s fabric (``count``)."""

    def __init__(self, router: GpuRouter, devs: np.ndarray, gpn: int, rail: list[int]) -> None:
        self.r, self.gpn, self.rail = router, gpn, rail
        self.devs = np.unique(np.asarray(devs, np.int64))
        self.node_of = self.devs // gpn
        self.nodes, per_node = np.unique(self.node_of, return_counts=True)
        self.count_on = dict(zip(self.nodes.tolist(), per_node.tolist()))
        self.members = set(self.devs.tolist())
        self.total = np.zeros(len(router.links))
        self.acc: dict[int, float] = defaultdict(float)
        self._nics: dict[int, tuple[int, int, int, int, str]] = {}
        self.leaves: dict[str, int] = {}

    def count(self) -> np.ndarray:
        """Bytes on every link of the router's table (one byte a pair)."""
        if len(self.devs) < 2:
            return self.total
        self._on_nodes()
        by_local = self._into_destinations()
        hops = self._out_of_sources(by_local)
        self._between_switches(by_local, *hops)
        if self.acc:
            ids = np.fromiter(self.acc.keys(), int, len(self.acc))
            np.add.at(self.total, ids, np.fromiter(self.acc.values(), float, len(self.acc)))
        return self.total

    def _nic(self, d: int) -> tuple[int, int, int, int, str]:
        """(to NIC, NIC up, NIC down, from NIC) link ids of device *d*, and its edge switch."""
        hit = self._nics.get(d)
        if hit is None:
            g, L = self.r.g, self.r.links
            c = f"n{d // self.gpn}/nic{self.rail[d % self.gpn]}"
            leaf = next(x for x in g[c] if g.nodes[x]["kind"] == "leaf")
            hit = self._nics[d] = (L.id(d, c), L.id(c, leaf), L.id(leaf, c), L.id(c, d), leaf)
        return hit

    def _add_flows(self, src: list[int] | np.ndarray, dst: list[int] | np.ndarray,
                   weight: list[float] | np.ndarray | float = 1.0) -> None:
        rows, cols, vals = self.r.routes_coo(np.asarray(src, np.int64), np.asarray(dst, np.int64))
        w = vals * (np.asarray(weight, float)[cols] if np.ndim(weight) else weight)
        self.total += np.bincount(rows, weights=w, minlength=len(self.total))

    def _on_nodes(self) -> None:
        """The flows between devices of one node, routed."""
        for nd in self.nodes.tolist():
            m = self.devs[self.node_of == nd]
            if len(m) > 1:
                src, dst = np.repeat(m, len(m)), np.tile(m, len(m))
                keep = src != dst
                self._add_flows(src[keep], dst[keep])

    def _into_destinations(self) -> np.ndarray:
        """Each destination's NIC hops: every source off its node. Returns the destinations per
        (local index, edge switch)."""
        n = len(self.devs)
        leaf = np.array([self.leaves.setdefault(self._nic(int(d))[4], len(self.leaves))
                         for d in self.devs])
        for d in self.devs.tolist():
            ins = n - self.count_on[d // self.gpn]
            if ins:
                _, _, down, frm, _ = self._nic(d)
                self.acc[down] += ins
                self.acc[frm] += ins
        by_local = np.zeros((self.gpn, len(self.leaves)))
        np.add.at(by_local, (self.devs % self.gpn, leaf), 1.0)
        return by_local

    def _out_of_sources(self, by_local: np.ndarray) -> tuple[np.ndarray, ...]:
        """Each source node, per destination local index: the hop each source leaves by (PXN
        flows routed, the hop's NIC hops counted). Returns the hops as (edge switch, local
        index, sources, edge switch of the node's own destination there or -1)."""
        gpn, rail = self.gpn, self.rail
        t_leaf, t_local, t_count, t_same = [], [], [], []
        pxn_src, pxn_dst, pxn_w = [], [], []
        for nd in self.nodes.tolist():
            m = self.devs[self.node_of == nd].tolist()
            for loc in range(gpn):
                own = nd * gpn + loc
                off = by_local[loc].sum() - (own in self.members)    # destinations off the node
                if not off:
                    continue
                hops: dict[int, int] = defaultdict(int)
                for a in m:
                    h = a if rail[a % gpn] == rail[loc] else own
                    hops[h] += 1
                    if h != a:
                        pxn_src.append(a)
                        pxn_dst.append(h)
                        pxn_w.append(off)
                for h, k in hops.items():
                    up_nic, up_leaf, _, _, leaf = self._nic(h)
                    self.acc[up_nic] += k * off
                    self.acc[up_leaf] += k * off
                    t_leaf.append(self.leaves.setdefault(leaf, len(self.leaves)))
                    t_local.append(loc)
                    t_count.append(k)
                    t_same.append(self.leaves[self._nic(own)[4]] if own in self.members else -1)
        if pxn_src:
            self._add_flows(pxn_src, pxn_dst, pxn_w)
        return (np.asarray(t_leaf, int), np.asarray(t_local, int), np.asarray(t_count, float),
                np.asarray(t_same, int))

    def _between_switches(self, by_local: np.ndarray, t_leaf: np.ndarray, t_local: np.ndarray,
                          t_count: np.ndarray, t_same: np.ndarray) -> None:
        """The edge switch to edge switch paths, once per pair with the flows between them."""
        n = len(self.leaves)                   # sources' edge switches after destinations'
        by_local = np.pad(by_local, ((0, 0), (0, n - by_local.shape[1])))
        pairs = np.zeros((n, n))
        for loc in range(self.gpn):
            sel = t_local == loc
            if sel.any():
                np.add.at(pairs, t_leaf[sel], t_count[sel, None] * by_local[loc][None, :])
        same = t_same >= 0                     # the hop's own node's destination: not a flow
        np.subtract.at(pairs, (t_leaf[same], t_same[same]), t_count[same])
        np.fill_diagonal(pairs, 0.0)           # one edge switch: nothing between switches
        names = list(self.leaves)
        ii, jj = np.nonzero(pairs > 1e-9)
        hops = self.r._hops  # noqa: SLF001
        if hops is not None and len(ii):
            # the routes' own switch-to-switch part (trunks where the fabric has them, the
            # core between pods), as every route takes it
            at = {name: k for k, name in enumerate(hops.leaf_names)}
            parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
            self.r._between_leaves_bulk(np.array([at[names[i]] for i in ii], int),  # noqa: SLF001
                                        np.array([at[names[j]] for j in jj], int),
                                        np.arange(len(ii)), parts)
            for rows, cols, vals in parts:
                self.total += np.bincount(rows, weights=vals * pairs[ii[cols], jj[cols]],
                                          minlength=len(self.total))
            return
        for i, j in zip(ii, jj):
            self.r._between_leaves(names[i], names[j], float(pairs[i, j]), self.acc)
