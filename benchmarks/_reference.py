"""The fixed reference workload benchmarks divide by, so that machine speed cancels: bare simpy,
one process that yields *n* timeouts."""

from __future__ import annotations

import time

import simpy


def bare_simpy_events_per_s(n: int = 200_000) -> float:
    """Events per second of bare simpy on this machine: *n* timeouts of 1 us, played in-process."""
    env = simpy.Environment()

    def proc():
        for _ in range(n):
            yield env.timeout(1e-6)

    env.process(proc())
    t0 = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t0)
