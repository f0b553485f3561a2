"""A step with a second job on the next chips of the fabric (``cluster.shared_with``), stepping
all along: both jobs' transfers on one set of links, and each job's step alone on the same graph
for what sharing cost."""

from __future__ import annotations

from .engine import EngineResult, simulate, simulate_together
from .job import Job
from .results import SharedJobRecord

__all__ = ["shared_step"]


def shared_step(job: Job, trace: bool,
                extras: bool = True) -> tuple[EngineResult, SharedJobRecord | None]:
    """The job's step while its neighbour steps on the same links and, with *extras*, the record
    of both (each job's step alone on the same links, for what sharing cost)."""
    other = job.neighbour
    assert other is not None
    cap = job.capacity_Bps
    eng, other_steps = simulate_together(job.plans, other.plans, cap, job=job.schedule,
                                         other_job=other.schedule, trace=trace)
    if not extras:
        return eng, None
    alone = simulate(job.plans, job.schedule, capacity_Bps=cap).step_time_s
    other_alone = simulate(other.plans, other.schedule, capacity_Bps=cap).step_time_s
    return eng, SharedJobRecord(
        scenario=other.scenario.name, chips=other.scenario.cluster.chips, step_time_alone_s=alone,
        slowdown=eng.step_time_s / alone,
        neighbour_step_time_s=(sum(other_steps) / len(other_steps)) if other_steps else None,
        neighbour_step_time_alone_s=other_alone)
