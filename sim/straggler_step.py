"""A step with stragglers: every data-parallel replica played with its own draws (jitter, slow
chips, on degraded links), the slowest setting the step, and who made everyone wait. The engine
record returned is the median replica's (the breakdown ``run`` reports) with its step time set
to the slowest replica's and its ``straggler_wait`` grown by the difference.

The draws and their statistics are ``sim.stragglers``; this plays them on the engine and
attributes the slowdown with the definitions of the measured what-if (``sim.traces.whatif``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .engine import EngineResult, StagePlan, simulate
from .job import Job
from .results import StragglerAttribution, StragglerRecord
from .stragglers import ReplicaDraws, draw_slow_devices, replica_draws, replica_jitter
from .traces.whatif import slowdowns

__all__ = ["straggler_step"]

# A replica's step: its time, its draws and the engine's record of it.
_Played = tuple[float, ReplicaDraws, EngineResult]


def straggler_step(job: Job, seed: int, trace: bool,
                   extras: bool = True) -> tuple[EngineResult, StragglerRecord | None]:
    """Every data-parallel replica simulated with its own draws; the slowest sets the step (the
    module docstring says what the engine record returned holds). *extras*: also attribute the
    slowdown and return the record (else None: the step time alone is wanted)."""
    scn = job.scenario
    cfg = scn.stragglers
    assert cfg is not None
    # Every draw comes from the step's seed (--seed included): slow chips, then each replica's
    # jitter; the same seed gives the same step, another seed other slow chips.
    slow = draw_slow_devices(cfg, scn.cluster.chips, np.random.default_rng([seed, 1]))
    results: list[_Played] = []
    for draws in replica_draws(scn, slow):
        eng = simulate(job.plans, job.schedule, jitter=replica_jitter(scn, draws, seed),
                       capacity_Bps=job.capacity_Bps)
        results.append((eng.step_time_s, draws, eng))
    step = max(r[0] for r in results)
    ordered = sorted(results, key=lambda r: (r[0], r[1].replica))
    median = ordered[len(ordered) // 2]
    slowest = ordered[-1]
    eng = median[2]
    if trace:
        # The trace shows the replica the breakdown reports: the median one, replayed with its
        # own draws (the same generator seeds give the same times).
        eng = simulate(job.plans, job.schedule, jitter=replica_jitter(scn, median[1], seed),
                       trace=True, capacity_Bps=job.capacity_Bps)
        # (the replay plays every segment for the timeline: the same times up to rounding)
        assert abs(eng.step_time_s - median[0]) <= 1e-9 * median[0], (eng.step_time_s, median[0])
    eng.breakdown_s["straggler_wait"] += step - median[0]
    eng.step_time_s = step
    if not extras:
        return eng, None
    record = StragglerRecord(
        attribution=_attribution(job, seed, slow, step, results),
        slowest_replica=slowest[1].replica,
        slowest_replica_chips=tuple(slowest[1].slow_chips),
        excess_s=step - median[0],
        slow_chips=tuple(int(x) for x in slow),
        replica_step_s={"min": ordered[0][0], "median": median[0], "max": step})
    return eng, record


def _attribution(job: Job, seed: int, slow: np.ndarray, step_s: float,
                 results: list[_Played]) -> StragglerAttribution:
    """The slowdown the stragglers caused and who caused it, with the definitions of the measured
    what-if (``sim.traces.whatif.slowdowns``; Lin et al. OSDI 2025, Eq. 1-4): S = step / the
    straggler-free step (no jitter, no slow chip, every link at its rate); a group's attributed
    slowdown is the step with only that group's stragglers kept.

    - ``by_stage`` / ``by_replica``: only that pipeline stage's (in every replica) / that
      data-parallel replica's compute stragglers (jitter and slow chips), on undegraded links;
    - ``by_cause``: only the jitter, only the slow chips, or only the degraded links.
    The same draws as the step itself (``replica_jitter(keep=...)``), so each is exact, not
    re-sampled. *results*: the step's (replica time, its draws, engine) per replica.
    """
    scn = job.scenario
    cfg = scn.stragglers
    assert cfg is not None
    sigma = cfg.compute_jitter_sigma
    draws = [r[1] for r in results]
    links_degraded = job.plans is not job.clean_plans

    def play(plans: list[StagePlan], cap: np.ndarray,
             jitter: Callable[[int, int], float] | None = None) -> float:
        return simulate(plans, job.schedule, jitter=jitter, capacity_Bps=cap).step_time_s

    ideal_s = play(job.clean_plans, job.clean_capacity_Bps)

    def replica_s(d: ReplicaDraws, keep: Callable[[int, str], bool]) -> float:
        """One replica on undegraded links with only the sources *keep(stage, cause)* acting."""
        if sigma <= 0 and not any(f > 1 and keep(s, "slow_chips")
                                  for s, f in enumerate(d.stage_slowdown)):
            return ideal_s                               # nothing of this replica acts
        return play(job.clean_plans, job.clean_capacity_Bps, replica_jitter(scn, d, seed, keep))

    def step_with(keep: Callable[[int, str], bool]) -> float:
        return max(replica_s(d, keep) for d in draws)

    # A replica alone: the others run straggler-free, so the step is the longer of the two.
    alone = ({d.replica: t for t, d, _ in results} if not links_degraded
             else {d.replica: replica_s(d, lambda s, c: True) for d in draws})
    causes: dict[str, Callable[[int, str], bool]] = {}
    if sigma > 0:
        causes["jitter"] = lambda s, c: c == "jitter"
    if len(slow):
        causes["slow_chips"] = lambda s, c: c == "slow_chips"
    by_cause = slowdowns(step_with, causes, ideal_s)
    if links_degraded:
        by_cause["degraded_links"] = play(job.plans, job.capacity_Bps) / ideal_s
    return StragglerAttribution(
        slowdown=step_s / ideal_s,
        straggler_free_step_s=ideal_s,
        by_stage=slowdowns(step_with, {str(st): (lambda s, c, st=st: s == st)
                                       for st in range(job.schedule.pp)}, ideal_s),
        by_replica={str(r): max(t, ideal_s) / ideal_s for r, t in sorted(alone.items())},
        by_cause=by_cause)
