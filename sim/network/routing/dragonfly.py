"""Dragonflies (HPE Slingshot, ``layout: dragonfly``): edge switches in groups joined all-to-all
inside and group to group by global links, no spines. A flow crosses from its switch to the
destination's over the minimal paths (local, global, local hops), split evenly at each branching
switch (ECMP over shortest paths)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .base import Coo, Route
from .gpu import GpuRouter

__all__ = ["DragonflyRouter"]


class DragonflyRouter(GpuRouter):
    """GPU nodes on a dragonfly: switch to switch by minimal ECMP."""

    def _switch_route(self, a: str, b: str) -> Route:
        """Switch *a* to switch *b*: ECMP over the minimal paths; cached."""
        key = (("switch", a), ("switch", b))
        r = self._cache.get(key)
        if r is None:
            acc: dict[int, float] = defaultdict(float)
            self._ecmp(a, b, 1.0, acc)
            r = self._cache[key] = (np.fromiter(acc.keys(), dtype=int, count=len(acc)),
                                    np.fromiter(acc.values(), dtype=float, count=len(acc)))
        return r

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
