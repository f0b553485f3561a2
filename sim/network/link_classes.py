"""Links that no load of a step tells apart, played as one (PERF, issue 32: the shared links'
bookkeeping by symmetry class).

Two links are in one class when they have the same capacity and every load of the step puts the
same bytes/s on both (or neither). The shared links (``sim.network.shared``) keep one load per
class instead of one per link: every transfer adds the same rates to each link of a class in
the same order, so their loads are equal to the bit at every moment, one is over capacity
exactly when the others are, and max-min filling over one row per class gives the speeds it
gives over the duplicated rows. A pipeline send of 6,144 pairs over 24,992 links of the
98,304-GPU fabric is 8 classes.

The classes are refined load by load: start from the capacities, then split each class by the
rate each load puts on its links (none on the links it does not cross).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .fill import firsts
from .fluid import unique_links
from .traffic import Traffic

__all__ = ["LinkClasses"]


class LinkClasses:
    """The classes of the links the *loads* cross (each load's link ids distinct, as every
    ``Traffic`` of a step has them); ``capacity_Bps``: per class."""

    def __init__(self, loads: Iterable[Traffic], capacity_Bps: np.ndarray) -> None:
        capacity_Bps = np.asarray(capacity_Bps, float)
        # one refinement per distinct load (a load for another duration shares its arrays)
        distinct = {(id(t.link_ids), id(t.link_Bps)): t for t in loads if len(t.link_ids)}
        tables = [(t.link_ids, t.link_Bps) for t in distinct.values()]
        label = np.full(len(capacity_Bps), -1, np.int64)
        if tables:
            used = np.zeros(len(capacity_Bps), bool)
            for ids, _ in tables:
                used[ids] = True
            links = np.flatnonzero(used)
            label[links] = _small_labels(capacity_Bps[links])
            n = int(label[links].max()) + 1
            for ids, rate in tables:
                key = label[ids]
                if len(rate) and rate.min() != rate.max():
                    values, which = np.unique(rate, return_inverse=True)
                    key = key * len(values) + which.reshape(-1)
                new, at = unique_links(key, int(key.max()) + 1)
                label[ids] = n + at
                n += len(new)
            classes, at = unique_links(label[links], n)
            label[links] = at
            first = np.empty(len(classes), np.int64)
            first[at[::-1]] = links[::-1]                 # each class's first link
            self.capacity_Bps = capacity_Bps[first]
            self._size = np.bincount(at, minlength=len(classes))
        else:
            self.capacity_Bps = np.zeros(0)
            self._size = np.zeros(0, np.int64)
        self._label = label

    def __len__(self) -> int:
        return len(self.capacity_Bps)

    def of(self, traffic: Traffic) -> tuple[np.ndarray, np.ndarray]:
        """*traffic*'s classes (sorted) and its bytes/s on each link of each. ValueError for a
        load that tells links of one class apart (it was not among the loads the classes were
        made of)."""
        ids, rate = traffic.link_ids, traffic.link_Bps
        cls = self._label[ids]
        if len(ids) and cls.min() < 0:
            raise ValueError(f"load {traffic.label!r} crosses links none of the step's loads cross")
        order = np.argsort(cls, kind="stable")
        c, r = cls[order], rate[order]
        first = firsts(c)
        ours, counts = c[first], np.diff(np.append(np.flatnonzero(first), len(c)))
        if not (np.array_equal(counts, self._size[ours])
                and np.array_equal(r, np.repeat(r[first], counts))):
            raise ValueError(f"load {traffic.label!r} tells apart links the step's loads do not")
        return ours, r[first]


def _small_labels(values: np.ndarray) -> np.ndarray:
    """Each of *values* numbered by its place among the distinct ones (``np.unique``'s inverse),
    from the distinct values of a sample first where they are few (PERF: the capacities of a
    fabric's 1.2 M links are a handful)."""
    few = np.unique(values[:: max(1, len(values) // 4096)])
    at = np.searchsorted(few, values)
    if np.array_equal(few[np.minimum(at, len(few) - 1)], values):
        return at
    return np.unique(values, return_inverse=True)[1].reshape(-1)
