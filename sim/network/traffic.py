"""What one communication step of a training step puts on the links.

A ``Traffic`` is a transfer as the engine plays it: how long it takes when nothing else uses its
links (the collective model's time: algorithm, protocol, latency), and the bytes per second it
puts on each directed link while it runs at that speed. It stands for every group that runs the
same collective at the same moment (all the data-parallel groups of one pipeline stage, all its
tensor-parallel groups, every pipeline pair of two stages): the symmetry the engine uses for ranks
made explicit for links, by summing the routed flows of all those groups, so a rail-aligned ring
on rail 3 loads rail 3's links and not rail 0's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["Traffic"]


@dataclass(frozen=True, eq=False)
class Traffic:
    """*seconds* alone on the network, of which *latency_s* is fixed (software and wire latency,
    not stretched when links are shared); during the rest, *link_Bps[i]* bytes/s on link
    *link_ids[i]*.

    *groups*: how many groups (or pipeline pairs) it stands for; a per-rank simulation admits each
    group's share (1 / groups of the load) when that group's last member arrives.
    """

    seconds: float
    link_ids: np.ndarray
    link_Bps: np.ndarray
    groups: int = 1
    label: str = ""
    latency_s: float = 0.0

    @cached_property
    def work_s(self) -> float:
        """Seconds of transfer at full speed (the part link sharing can stretch); worked out once
        (PERF: every quiet load's end, ``end_alone``)."""
        return max(0.0, self.seconds - self.latency_s)

    def end_alone(self, t: float) -> float:
        """When it ends, started at *t* on links it has to itself, in ``SharedLinks``' arithmetic
        (``transfer``, ``_arm``; a load with links): its transfer at speed 1, then its latency."""
        end = t + self.work_s
        return end + self.latency_s if self.latency_s > 0 else end

    @classmethod
    def of(cls, seconds: float, link_ids: np.ndarray, link_bytes: np.ndarray, alone_s: float,
           latency_s: float = 0.0, groups: int = 1, label: str = "") -> "Traffic":
        """*link_bytes* moved by a transfer of *alone_s* seconds alone (*latency_s* of them
        latency), played for *seconds* (less when compute hides part of it) at that rate."""
        work = alone_s - latency_s
        if work <= 0 or seconds <= 0:
            return cls(max(0.0, seconds), np.zeros(0, np.int64), np.zeros(0), groups, label,
                       max(0.0, seconds))
        keep = link_bytes > 0
        return cls(seconds, np.asarray(link_ids)[keep].astype(np.int64),
                   np.asarray(link_bytes, float)[keep] / work, groups, label,
                   min(latency_s, seconds))

    def with_seconds(self, seconds: float) -> "Traffic":
        """The same load for another duration (a part exposed beyond the compute that hides it)."""
        return Traffic(max(0.0, seconds), self.link_ids, self.link_Bps, self.groups, self.label,
                       min(self.latency_s, max(0.0, seconds)))

    def with_latency(self, seconds: float) -> "Traffic":
        """The same transfer taking *seconds* in all (no less than now), the rest fixed latency (a
        DCN reduction's per-layer ring steps, ``sim.stages._data_parallel``)."""
        extra = max(0.0, seconds - self.seconds)
        return Traffic(self.seconds + extra, self.link_ids, self.link_Bps, self.groups, self.label,
                       self.latency_s + extra)

    def then(self, other: "Traffic") -> "Traffic":
        """This transfer followed by *other*, played as one with their average load."""
        work = self.work_s + other.work_s
        if work <= 0:
            return Traffic(self.seconds + other.seconds, self.link_ids[:0], self.link_Bps[:0],
                           max(self.groups, other.groups), self.label or other.label,
                           self.seconds + other.seconds)
        ids = np.concatenate([self.link_ids, other.link_ids])
        bts = np.concatenate([self.link_Bps * self.work_s, other.link_Bps * other.work_s])
        uniq, inv = np.unique(ids, return_inverse=True)
        summed = np.bincount(inv, weights=bts, minlength=len(uniq))
        return Traffic(self.seconds + other.seconds, uniq, summed / work,
                       max(self.groups, other.groups), self.label or other.label,
                       self.latency_s + other.latency_s)
