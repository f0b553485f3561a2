"""Failures over days: interruptions, lost work, checkpoints and restarts, as events on top of the
simulated step time (never step by step).

Inter-failure times are exponential with the summed rate of every cause in the hardware catalogue
times the chip count (plus planned interruptions per day). The job checkpoints every interval
(``auto`` = Young/Daly: sqrt(2 x MTBF x checkpoint write time), Young 1974); a failure loses the
work since the last completed checkpoint and costs detection + hardware swap + restart +
checkpoint load. Hardware swap: a spare GPU node (minutes) or, on TPU v4/v5p, a spare cube patched
in by OCS reconfiguration (~10 s, Gemini report). Goodput = training progress / wall time.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import FailuresConfig
from .errors import ConfigError
from .hardware import Chip, failure_causes
from .units import DAY_S, HOUR_S

__all__ = ["FailureRun", "FailureSummary", "FailureRecord", "simulate_failures", "failure_report",
           "young_daly_interval_s"]


def young_daly_interval_s(mtbf_s: float, checkpoint_s: float) -> float:
    """Young (1974) first-order optimum: sqrt(2 x MTBF x checkpoint cost)."""
    return math.sqrt(2 * mtbf_s * checkpoint_s)


@dataclass(frozen=True)
class FailureRun:
    """One Monte Carlo history."""

    goodput: float
    interruptions: dict[str, int]          # unexpected, by cause
    planned: int
    lost_work_s: float
    downtime_s: float
    checkpoint_s: float


@dataclass(frozen=True)
class FailureSummary:
    horizon_s: float
    checkpoint_interval_s: float
    mtbf_s: float
    swap_s: float
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


# Interruptions the failure Monte Carlo may draw in all (~10 s of its Python loop).
MAX_FAILURE_EVENTS = 3_000_000


def simulate_failures(cfg: FailuresConfig, chip: Chip, chips: int, seed: int,
                      runs: int = 100, ocs_spares: bool = False) -> FailureSummary:
    """Monte Carlo of *runs* histories (seeds seed .. seed+runs-1) over the horizon."""
    causes = failure_causes(chip)
    rates = np.array([c.per_chip_hour for c in causes]) * chips * cfg.rate_scale / HOUR_S
    total = float(rates.sum())
    if total <= 0:
        raise ConfigError("failures: the failure rate is zero; nothing to simulate")
    mtbf = 1.0 / total
    C = cfg.checkpoint_write_s
    tau = (cfg.checkpoint_interval_min * 60 if cfg.checkpoint_interval_min is not None
           else young_daly_interval_s(mtbf, C))
    if tau <= C:
        raise ConfigError(f"failures.checkpoint_interval_min: {tau / 60:.2f} min is not longer than "
                          f"checkpoint_write_s = {C} s")
    swap = cfg.swap_s if cfg.swap_s is not None else (10.0 if ocs_spares else 600.0)
    down = cfg.detect_s + swap + cfg.restart_s + cfg.checkpoint_load_s
    H = cfg.horizon_days * DAY_S
    planned_rate = cfg.planned_per_day / DAY_S
    p = rates / total
    # Work limit: the loop below handles each interruption in Python (a few us each).
    expected = runs * (total + planned_rate) * H
    if expected > MAX_FAILURE_EVENTS:
        raise ConfigError(f"failures: {runs} Monte Carlo runs of {cfg.horizon_days:g} days would draw "
                          f"~{expected:,.0f} interruptions (over {MAX_FAILURE_EVENTS:,}, ~10 s); lower "
                          "failures.monte_carlo_runs, horizon_days, rate_scale or planned_per_day")
    from .progress import progress as track

    out = []
    for k in track(range(runs), runs if expected > 200_000 else 0, "failure histories"):
        rng = np.random.default_rng(seed + k)
        # Hardware fails on the wall clock whether or not the job is running: one Poisson stream
        # of unexpected failures (by cause) and one of planned interruptions over the horizon.
        n_fail = rng.poisson(total * H)
        n_plan = rng.poisson(planned_rate * H)
        times = np.concatenate([rng.uniform(0, H, n_fail), rng.uniform(0, H, n_plan)])
        kinds = np.concatenate([rng.choice(len(causes), size=n_fail, p=p), np.full(n_plan, -1)])
        order = np.argsort(times, kind="stable")
        counts: Counter[str] = Counter()
        planned = 0
        t = progress = lost = downtime = ckpt = 0.0       # t: when the job (re)started running
        for when, kind in zip(times[order], kinds[order]):
            if kind >= 0:
                counts[causes[int(kind)].name] += 1
            else:
                planned += 1
            if when < t:                 # failed while the job was down: one more swap, no work lost
                extra = min(swap if kind >= 0 else 0.0, H - t)
                downtime += extra
                t += extra
                continue
            span = when - t
            cycles = math.floor(span / (tau + C))
            rem = span - cycles * (tau + C)
            progress += cycles * tau
            ckpt += cycles * C + max(0.0, rem - tau)
            if kind >= 0:
                lost += min(rem, tau)    # work since the last completed checkpoint
            else:
                progress += min(rem, tau)  # planned: checkpoint first, nothing lost
            d = min(down, H - when)
            downtime += d
            t = when + d
        if t < H:                        # the last stretch runs to the horizon
            span = H - t
            cycles = math.floor(span / (tau + C))
            rem = span - cycles * (tau + C)
            progress += cycles * tau + min(rem, tau)
            ckpt += cycles * C + max(0.0, rem - tau)
        out.append(FailureRun(progress / H, dict(counts), planned, lost, downtime, ckpt))
    return FailureSummary(H, tau, mtbf, swap, tuple(out))


@dataclass(frozen=True)
class FailureRecord:
    """A scenario's ``failures:`` section answered: goodput (mean and its 5-95% band over the
    Monte Carlo histories), unexpected interruptions (mean count, and per cause), the MTBF and
    checkpoint interval used, and the tokens/s that goodput leaves."""

    goodput: float
    goodput_interval: tuple[float, float]
    interruptions: float
    interruptions_by_cause: dict[str, float]
    horizon_days: float
    mtbf_h: float
    checkpoint_interval_min: float
    hardware_swap_s: float
    effective_tokens_per_s: float


def failure_report(scn: Any, tokens_per_s: float, seed: int) -> FailureRecord:
    """The failure Monte Carlo of *scn*'s ``failures:`` section for a job stepping at
    *tokens_per_s* (its time to train, if it names a budget, is ``sim.cost.time_to_train``)."""
    cfg = scn.failures
    summary = simulate_failures(cfg, scn.cluster.chip, scn.cluster.chips, seed,
                                runs=cfg.monte_carlo_runs,
                                ocs_spares=scn.cluster.topology.ocs_spares)
    g, g_lo, g_hi = summary.goodput()
    n, _, _ = summary.interruptions()
    return FailureRecord(
        goodput=g, goodput_interval=(g_lo, g_hi), interruptions=n,
        interruptions_by_cause=summary.by_cause(), horizon_days=cfg.horizon_days,
        mtbf_h=summary.mtbf_s / HOUR_S, checkpoint_interval_min=summary.checkpoint_interval_s / 60,
        hardware_swap_s=summary.swap_s, effective_tokens_per_s=tokens_per_s * g)
