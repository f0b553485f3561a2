"""Two jobs on one fabric: one step of a job while a second job steps all along, both playing
their transfers on one set of shared links (``cluster.shared_with``)."""

from __future__ import annotations

import numpy as np
import simpy

from ..network.shared import SharedLinks
from .loads import played_loads, private_loads
from .records import EngineResult, Schedule, StagePlan
from .step import ProcGen, StepEngine

__all__ = ["simulate_together"]


def simulate_together(plan: list[StagePlan], other: list[StagePlan], capacity_Bps: np.ndarray, *,
                      job: Schedule, other_job: Schedule,
                      trace: bool = False) -> tuple[EngineResult, list[float]]:
    """One step of a job while a second job on the same fabric runs step after step; both play
    their transfers on one set of links. *job* / *other_job*: the schedule of each. Returns the
    job's step and the other's completed step times."""
    env = simpy.Environment()
    sends = max(job.micro * job.vs, other_job.micro * other_job.vs)
    private = private_loads(plan + other, capacity_Bps, sends)
    links = SharedLinks(env, capacity_Bps, played_loads(plan + other, private))
    eng = StepEngine(plan, job, trace=trace, env=env, links=links, private=private)
    done = eng.start()
    other_steps: list[float] = []

    def neighbour() -> ProcGen:
        while not done.triggered:
            t0 = env.now
            yield StepEngine(other, other_job, env=env, links=links, private=private).start()
            other_steps.append(env.now - t0)

    env.process(neighbour())
    env.run(until=done)
    return eng.result(), other_steps
