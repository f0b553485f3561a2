"""Failures over days: interruptions, lost work, checkpoints, recoveries and spare pools, as events
on top of the simulated step time (never step by step).

Each Monte Carlo history draws its fleet's factor (``sim.reliability.fleet_lognormal``: how much
this fleet's rates differ from the reference, unless ``failures.fleet_factor`` fixes it), then the
interruptions over the horizon: every cause of ``sim.reliability`` at its rate for the job's
chips, optionally with a Weibull hazard over the fleet's age (``weibull_shape``: below 1 a young
fleet's infant mortality fading, above 1 wear-out), silent data corruption found only
``sdc_detect_h`` later (the job rolls back to the checkpoint before it), a failed unit failing
again after its restart with ``repeat_probability`` (a bad node the diagnostics missed: a restart
loop), and planned interruptions (a checkpoint first, nothing lost). The recovery strategy
(``sim.recovery``) says what each costs: a whole-job restart from the last checkpoint (``restart``,
``hot_spare``, ``in_memory_checkpoint``, with their swap, load and checkpoint costs) or the
surviving replicas going on at a reduced rate while the lost one comes back (``replica``).
Hardware failures take a spare swap unit where the strategy keeps a pool; a dry pool waits for a
repaired one. Goodput = training progress / wall time.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .errors import ConfigError
from .recovery import Recovery
from .reliability import Cause
from .units import DAY_S, HOUR_S

__all__ = ["FailureRun", "FailureSummary", "MAX_FAILURE_EVENTS", "simulate_histories",
           "NEEDS_SWAP"]

# Causes that need a replacement unit: hardware (a software crash restarts on the same hosts).
NEEDS_SWAP = frozenset({"GPU", "Host", "Network", "Unplanned Maintenance"})

# Interruptions the failure Monte Carlo may draw in all (~10 s of its Python loop).
MAX_FAILURE_EVENTS = 3_000_000


@dataclass(frozen=True)
class FailureRun:
    """One Monte Carlo history."""

    goodput: float
    interruptions: dict[str, int]          # unexpected, by cause
    planned: int
    lost_work_s: float
    downtime_s: dict[str, float]           # by recovery part
    checkpoint_s: float
    fleet_factor: float


@dataclass(frozen=True)
class FailureSummary:
    horizon_s: float
    recovery: Recovery
    mtbf_s: float                          # at the fleet's median factor
    mtbf_band_s: tuple[float, float]       # 5-95% over the fleet factor
    runs: tuple[FailureRun, ...]

    def goodput(self) -> tuple[float, float, float]:
        """(mean, p5, p95) over the Monte Carlo runs."""
        g = np.array([r.goodput for r in self.runs])
        return float(g.mean()), float(np.percentile(g, 5)), float(np.percentile(g, 95))

    def interruptions(self) -> tuple[float, float, float]:
        n = np.array([sum(r.interruptions.values()) for r in self.runs])
        return float(n.mean()), float(np.percentile(n, 5)), float(np.percentile(n, 95))

    def by_cause(self) -> dict[str, float]:
        total: Counter[str] = Counter()
        for r in self.runs:
            total.update(r.interruptions)
        return {k: v / len(self.runs) for k, v in total.most_common()}

    def downtime_parts(self) -> dict[str, float]:
        """Mean seconds per history lost to each recovery part, lost work and checkpoints."""
        total: dict[str, float] = {}
        for r in self.runs:
            for k, v in (*r.downtime_s.items(), ("lost_work", r.lost_work_s),
                         ("checkpoint_writes", r.checkpoint_s)):
                total[k] = total.get(k, 0.0) + v
        return {k: v / len(self.runs) for k, v in total.items()}


@dataclass
class _Job:
    """One history's running state."""

    rec: Recovery
    t: float = 0.0             # wall clock: the job runs from here on (after any downtime)
    progress: float = 0.0      # training seconds done
    since_ckpt: float = 0.0    # work since the last completed checkpoint
    ckpt_s: float = 0.0
    lost: float = 0.0
    rate: float = 1.0          # share of the full rate the job trains at (replicas away)
    down: dict[str, float] = field(default_factory=dict)

    def advance(self, until: float) -> None:
        """Run (training and checkpointing) from ``t`` to *until*."""
        span = until - self.t
        interval, write, rate = self.rec.interval_s, self.rec.write_s, self.rate
        while span > 0:
            to_ckpt = (interval - self.since_ckpt) / rate
            if span < to_ckpt:
                self._work(span * rate)
                break
            self._work(interval - self.since_ckpt)
            span -= to_ckpt
            if span < write:                   # stopped inside a write: it never completes
                self.ckpt_s += span
                break
            self.ckpt_s += write
            span -= write
            self.since_ckpt = 0.0
            cycle = interval / rate + write
            full = math.floor(span / cycle)
            self.progress += full * interval
            self.ckpt_s += full * write
            span -= full * cycle
        self.t = max(self.t, until)

    def _work(self, w: float) -> None:
        self.progress += w
        self.since_ckpt += w

    def stop(self, parts: dict[str, float], horizon: float) -> None:
        """Down for the sum of *parts* (capped at the horizon), from ``t``."""
        room = horizon - self.t
        for k, v in parts.items():
            d = min(v, room)
            self.down[k] = self.down.get(k, 0.0) + d
            room -= d
        self.t = min(horizon, self.t + sum(parts.values()))

    def rollback(self, to_progress: float) -> None:
        """Lose the work done since progress *to_progress* (a restart from a checkpoint)."""
        lost = max(0.0, self.progress - to_progress)
        self.lost += lost
        self.progress -= lost
        self.since_ckpt = 0.0


def _draw_times(rng: np.random.Generator, rate_per_s: float, horizon: float, shape: float,
                age_s: float) -> np.ndarray:
    """Failure times over [0, horizon): Poisson at *rate_per_s*, or with a Weibull hazard of
    *shape* over a fleet *age_s* old at the start (the rate at the start is *rate_per_s*)."""
    if shape == 1.0:
        return rng.uniform(0, horizon, rng.poisson(rate_per_s * horizon))
    peak = max(1.0, ((age_s + horizon) / age_s) ** (shape - 1))
    cand = rng.uniform(0, horizon, rng.poisson(rate_per_s * peak * horizon))
    keep = rng.uniform(0, peak, cand.size) < ((age_s + cand) / age_s) ** (shape - 1)
    return cand[keep]


def simulate_histories(causes: tuple[Cause, ...], rates_per_h: tuple[float, ...],
                       rec: Recovery, *, horizon_days: float, planned_per_day: float,
                       fleet: tuple[float, float] | float, seed: int, runs: int,
                       sdc_detect_s: float, repeat_probability: float, weibull_shape: float,
                       fleet_age_days: float) -> FailureSummary:
    """Monte Carlo of *runs* histories (seeds seed .. seed+runs-1); *fleet*: a fixed factor, or
    the (median, sigma) of its log-normal."""
    base = float(sum(rates_per_h)) / HOUR_S
    assert base > 0, "sim.goodput refuses a zero failure rate"
    H = horizon_days * DAY_S
    median, sigma = (fleet, 0.0) if isinstance(fleet, (int, float)) else fleet
    z = 1.6448536269514722
    mtbf = 1.0 / (base * median)
    band = (mtbf / math.exp(z * sigma), mtbf * math.exp(z * sigma))
    expected = runs * (base * median * math.exp(sigma * sigma / 2) + planned_per_day / DAY_S) * H
    if expected > MAX_FAILURE_EVENTS:
        raise ConfigError(f"failures: {runs} Monte Carlo runs of {horizon_days:g} days would draw "
                          f"~{expected:,.0f} interruptions (over {MAX_FAILURE_EVENTS:,}, ~10 s); "
                          "lower failures.monte_carlo_runs, horizon_days, rate_scale or "
                          "planned_per_day")
    p = np.array(rates_per_h) / sum(rates_per_h)
    from .progress import progress as track

    out = []
    for k in track(range(runs), runs if expected > 200_000 else 0, "failure histories"):
        rng = np.random.default_rng(seed + k)
        factor = median * math.exp(sigma * rng.standard_normal()) if sigma else median
        times = _draw_times(rng, base * factor, H, weibull_shape, fleet_age_days * DAY_S)
        kinds = rng.choice(len(causes), size=times.size, p=p)
        n_plan = rng.poisson(planned_per_day / DAY_S * H)
        events = [(float(t), int(c), 0) for t, c in zip(times, kinds)]
        events += [(float(t), _PLANNED, 0) for t in rng.uniform(0, H, n_plan)]
        heapq.heapify(events)
        out.append(_history(events, causes, rec, H, rng, sdc_detect_s, repeat_probability, factor))
    return FailureSummary(H, rec, mtbf, band, tuple(out))


@dataclass
class _Pool:
    """Spare swap units: how many are ready (None: a free one is always found) and when the
    failed ones come back repaired. A dry pool of hot spares falls back to scheduling a cold
    replacement (``cold_s``); a dry pool with no fallback (None) waits for the first repair."""

    ready: int | None
    repair_s: float
    cold_s: float | None
    repairs: list[float] = field(default_factory=list)
    size: int = field(init=False)   # the pool's own units: a repaired one refills it up to this

    def __post_init__(self) -> None:
        self.size = self.ready or 0

    def take(self, when: float, swap_s: float) -> float:
        """A replacement at *when*: the seconds until it is in; the failed unit goes to repair."""
        if self.ready is None:
            return swap_s
        while self.repairs and self.repairs[0] <= when:
            heapq.heappop(self.repairs)
            self.ready = min(self.size, self.ready + 1)
        heapq.heappush(self.repairs, when + self.repair_s)
        if self.ready > 0:
            self.ready -= 1
            return swap_s
        if self.cold_s is not None:
            return max(swap_s, self.cold_s)
        return max(swap_s, heapq.heappop(self.repairs) - when)


_PLANNED, _SDC_FOUND, _REJOIN = -1, -2, -3


def _history(events: list[tuple[float, int, int]], causes: tuple[Cause, ...], rec: Recovery,
             H: float, rng: np.random.Generator, sdc_detect_s: float, repeat: float,
             factor: float) -> FailureRun:
    """Play one history's events: a heap of (time, kind, tag); kind a cause index, or _PLANNED,
    _SDC_FOUND, _REJOIN (tag: which lost replica)."""
    job = _Job(rec)
    counts: Counter[str] = Counter()
    planned = 0
    pool = _Pool(rec.spares, rec.repair_s, rec.cold_swap_s)
    away: set[int] = set()                     # lost replicas on their way back
    lost_replicas = 0                          # ids for them
    sdc_target: float | None = None            # progress before the first undetected corruption
    while events:
        when, kind, tag = heapq.heappop(events)
        if when >= H:
            break
        if kind == _REJOIN:
            if tag in away:
                job.advance(when)
                away.discard(tag)
                job.rate = (rec.replicas - len(away)) / rec.replicas
                job.stop({"rejoin": rec.rejoin_stall_s}, H)
            continue
        if kind >= 0:
            counts[causes[kind].name] += 1
        else:
            planned += int(kind == _PLANNED)
        hardware = kind >= 0 and causes[kind].category in NEEDS_SWAP
        if when < job.t:                       # while the job is down: no work lost
            if hardware:
                job.stop({"swap": pool.take(when, rec.swap_s)}, H)
            continue
        job.advance(when)
        if kind == _PLANNED:                   # a checkpoint first, nothing lost
            job.since_ckpt = 0.0
            job.stop({"restart": rec.restart_s, "checkpoint_load": rec.load_s}, H)
            continue
        if kind == _SDC_FOUND:                 # roll back past the corruption
            job.rollback(sdc_target if sdc_target is not None else job.progress - job.since_ckpt)
            sdc_target = None
            away.clear()
            job.rate = 1.0
            job.stop({"swap": pool.take(when, rec.swap_s), "restart": rec.restart_s,
                      "checkpoint_load": rec.load_s}, H)
            continue
        if causes[kind].silent:                # the job runs on, corrupted, until it is found
            if sdc_target is None:
                sdc_target = job.progress - job.since_ckpt
            heapq.heappush(events, (when + sdc_detect_s, _SDC_FOUND, 0))
            continue
        swap = pool.take(when, rec.swap_s) if hardware else 0.0
        if rec.strategy == "replica" and len(away) + 1 < rec.replicas:
            lost_replicas += 1
            tag = lost_replicas
            away.add(tag)
            job.rate = (rec.replicas - len(away)) / rec.replicas
            job.stop({"detect": rec.detect_s, "reconfigure": rec.reconfigure_s}, H)
            heapq.heappush(events, (job.t + swap + rec.restart_s + rec.load_s, _REJOIN, tag))
        else:
            job.rollback(job.progress - job.since_ckpt)
            away.clear()
            job.rate = 1.0
            job.stop({"detect": rec.detect_s, "swap": swap, "restart": rec.restart_s,
                      "checkpoint_load": rec.load_s}, H)
        if repeat > 0 and rng.uniform() < repeat:        # the bad unit was not caught
            heapq.heappush(events, (job.t + rng.exponential(HOUR_S), kind, 0))
    job.advance(H)
    return FailureRun(job.progress / H, dict(counts), planned, job.lost, dict(job.down),
                      job.ckpt_s, factor)
