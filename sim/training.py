"""One training step of a resolved job (``sim.job``): the engine plays it, alone, with every
data-parallel replica's stragglers (``sim.straggler_step``) or beside a second job on the same
links (``sim.shared_step``), and the result is a ``StepResult``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .engine import EngineResult, simulate
from .errors import InfeasibleError
from .job import Job
from .results import SharedJobRecord, StepResult, StragglerRecord
from .shared_step import shared_step
from .units import GiB

__all__ = ["PlayedStep", "play_step", "MAX_STEP_S"]

# A training step longer than this (100 days) means an input outside any real range.
MAX_STEP_S = 100 * 86400.0


@dataclass(frozen=True)
class PlayedStep:
    """A step as played: its result, the engine's record (intervals for a trace) and, where the
    scenario has them, the stragglers' and the neighbour job's records."""

    result: StepResult
    engine: EngineResult
    stragglers: StragglerRecord | None = None
    shared: SharedJobRecord | None = None


def play_step(job: Job, seed: int, *, per_rank: bool = False, trace: bool = False,
              extras: bool = True) -> PlayedStep:
    """One step of *job* with the draws of *seed*. *per_rank*: every rank of a stage played (not
    one representative); *trace*: keep the intervals for a timeline. *extras*: also play what
    explains the step (the straggler attribution, the step with its transfers alone, the
    neighbour's step alone); without them only the step itself is played and the records are
    None (``run --steps``' further draws, which keep only the step time)."""
    scn = job.scenario
    stragglers: StragglerRecord | None = None
    shared: SharedJobRecord | None = None
    link_sharing_s: float | None = None
    if job.neighbour is not None:
        eng, shared = shared_step(job, trace, extras)
    elif scn.stragglers is not None and not per_rank:
        # PERF: imported here, as before the run layer: the draws need scipy.special (~50 ms of
        # every command's start), which only straggler scenarios use.
        from .straggler_step import straggler_step

        eng, stragglers = straggler_step(job, seed, trace, extras)
    else:
        eng = simulate(job.plans, job.schedule, ranks_per_stage=job.ranks_per_stage(per_rank),
                       groups=job.layout.local_group if per_rank else None,
                       trace=trace, capacity_Bps=job.capacity_Bps)
        if eng.network_solves and not per_rank and extras:
            # What sharing links cost: the same step with every transfer at its time alone.
            alone = simulate(job.plans, job.schedule).step_time_s
            link_sharing_s = max(0.0, eng.step_time_s - alone)
    if not (0 < eng.step_time_s <= MAX_STEP_S):
        worst = max(eng.breakdown_s, key=lambda k: eng.breakdown_s[k])
        raise InfeasibleError(f"{scn.source}: a step of {eng.step_time_s:.3g} s (mostly {worst}) is "
                              f"over {MAX_STEP_S / 86400:.0f} days; some input (a bandwidth, a "
                              "latency, the batch) is outside any real range")
    return PlayedStep(_result(job, eng, seed, link_sharing_s), eng, stragglers, shared)


def _result(job: Job, eng: EngineResult, seed: int, link_sharing_s: float | None) -> StepResult:
    scn, wl = job.scenario, job.workload
    par, chip = scn.parallelism, scn.cluster.chip
    return StepResult(
        scenario=scn.name, topology=job.topology.name, chip=chip.name, chips=scn.cluster.chips,
        step_time_s=eng.step_time_s, tokens_per_step=wl.tokens_per_step,
        model_flops_per_step=wl.model_flops_per_step, peak_flops_per_chip=chip.bf16_flops,
        memory_per_chip_GiB=job.memory.total_B / GiB,
        memory_breakdown_GiB=job.memory.as_GiB(),
        breakdown_s=eng.breakdown_s, usd_per_chip_hour=scn.cost.usd_per_chip_hour,
        parallelism={"tp": par.tp, "pp": par.pp, "cp": par.cp, "ep": par.ep, "dp": par.dp,
                     "zero": par.zero, "zero_group": par.shard_dp, "slices": scn.cluster.pods,
                     "schedule": par.schedule, "virtual_stages": job.schedule.vs,
                     "microbatches": wl.microbatches},
        critical_stage=eng.critical_stage, engine_events=eng.events,
        seed=seed, software=scn.software.describe(), link_sharing_s=link_sharing_s,
        network_solves=eng.network_solves)
