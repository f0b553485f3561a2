"""What the step engine (``sim.engine.step``) keeps per simulated rank and per collective."""

from __future__ import annotations

from collections import defaultdict

import simpy

from .records import StagePlan

__all__ = ["Barrier", "Rank"]


class Barrier:
    """Fires when ``n`` members have arrived; remembers who came last and the transfer the group
    then runs together."""

    __slots__ = ("event", "n", "arrived", "last", "transfer")

    def __init__(self, env: simpy.Environment, n: int) -> None:
        self.event = env.event()
        self.n = n
        self.arrived = 0
        self.last: int | None = None
        self.transfer: simpy.Event | None = None

    def arrive(self, rank: int) -> simpy.Event:
        self.arrived += 1
        if self.arrived == self.n:
            self.last = rank
            self.event.succeed()
        return self.event


class Rank:
    """One simulated rank: where it sits and what it has spent its time on."""

    __slots__ = ("rank", "local", "stage", "plan", "busy", "computed", "dp_open")

    def __init__(self, rank: int, local: int, stage: int, plan: StagePlan) -> None:
        self.rank = rank
        self.local = local
        self.stage = stage
        self.plan = plan
        self.busy: dict[str, float] = defaultdict(float)
        self.computed = 0                 # compute segments so far (the jitter's index)
        self.dp_open = 0                  # items on its data-parallel stream, queued or in flight
