"""The replay of a measured trace's program (``sim.traces.Program``) as simpy processes: one
process per op of one step of one dp rank; an op starts when its dependencies have ended, and a
group op (p2p pair, collective) ends at its group's latest arrival plus its own transfer time.

``sim.traces.replay`` evaluates the same thing as a longest path with numpy (fast); this is the
event-driven reference that a test compares it with on small traces.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from ..traces import Program

__all__ = ["simpy_replay_step"]


def simpy_replay_step(prog: Program, own_s: np.ndarray, step_index: int) -> np.ndarray:
    """Ends (ops, dp ranks) of step *step_index* replayed with per-op times *own_s* (ops, steps, dp)."""
    env = simpy.Environment()
    K, D = prog.n_ops, prog.n_dp
    done = [[env.event() for _ in range(D)] for _ in range(K)]
    end = np.zeros((K, D))
    # a group instance: (group, dp rank) or (group, -1) when it spans the dp ranks
    arrived: dict[tuple[int, int], list[float]] = {}
    met: dict[tuple[int, int], simpy.Event] = {}
    size = {g: len(grp.members) * (D if grp.across_dp else 1) for g, grp in enumerate(prog.groups)}

    def op(k: int, d: int) -> Generator[simpy.Event, Any, None]:
        if prog.deps[k]:
            yield simpy.AllOf(env, [done[j][d] for j in prog.deps[k]])
        g = int(prog.group_of[k])
        if g >= 0:
            key = (g, -1 if prog.groups[g].across_dp else d)
            arrived.setdefault(key, []).append(env.now)
            ev = met.setdefault(key, env.event())
            if len(arrived[key]) == size[g]:
                ev.succeed()
            yield ev                                            # the group's last arrival
        yield env.timeout(float(own_s[k, step_index, d]))
        end[k, d] = env.now
        done[k][d].succeed()

    for d in range(D):                                          # fixed creation order: fixed ties
        for k in range(K):
            env.process(op(k, d))
    env.run()
    return end
