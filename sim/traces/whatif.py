"""What if nobody were slow? The straggler slowdown of a measured job and who caused it.

Definitions (Lin et al., "Understanding Stragglers in Large Model Training Using What-if
Analysis", OSDI 2025, Eq. 1-4; read from its artifact ByteDance-Seed/StragglerAnalysis,
``analyzer/wia.py`` and ``analysis_util.py``, and checked against its ``result-*.json``):
- replayed step: the dependency-graph replay with every op's measured time and no launch delay
  (``step_t_nodelay``);
- ideal step (``step_t_noblk``): the same replay with every op's time replaced by the *typical*
  time of its op type: the mean over all workers, stages, steps (and micro-batches, chunks) for
  compute-like types (forward/backward compute, optimizer, gc), the median for communication types
  (p2p, DP collectives, the grads all-reduces, the clip). The reduction runs over dp rank, stage
  and step together, so a stage that is always slower (ST's last stage, which holds the loss) is a
  straggler too; the ideal step is the same in every step;
- slowdown S = mean(replayed) / mean(ideal) (Eq. 1);
- attribution to a group G (a stage, a dp rank, an op type, a worker): S_G = mean(replay with
  only G's ops at their measured times, all others typical) / mean(ideal) (Eq. 2-4). The artifact
  groups the four p2p kinds as ``forward-pp-comm`` / ``backward-pp-comm``; so does this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from .program import COMM_OPTYPES, Program
from .replay import Replay, replay

__all__ = ["PP_COMM", "WhatIf", "attribute", "slowdowns", "typical_s", "what_if"]

M = TypeVar("M")

PP_COMM = {"forward-send": "forward-pp-comm", "forward-recv": "forward-pp-comm",
           "backward-send": "backward-pp-comm", "backward-recv": "backward-pp-comm"}


def typical_s(prog: Program, own_s: np.ndarray | None = None) -> np.ndarray:
    """Every op's time replaced by its op type's typical time (mean for compute, median for comm)."""
    own = prog.own_s if own_s is None else own_s
    out = np.empty_like(own)
    for t in sorted(set(prog.optype.tolist())):
        ks = np.flatnonzero(prog.optype == t)
        vals = own[ks]
        out[ks] = float(np.median(vals)) if t in COMM_OPTYPES else float(np.mean(vals))
    return out


def slowdowns(step_with: Callable[[M], np.ndarray | float], groups: Mapping[str, M],
              ideal_mean_s: float) -> dict[str, float]:
    """Eq. 2-4 for any job that can be played with a subset of its stragglers: per group label,
    the mean step with only that group's stragglers kept (*step_with(mask)*) over the mean
    straggler-free step. A measured trace keeps a group's ops at their measured times (``what_if``);
    a simulated job keeps a group's draws (``sim.straggler_step``, ``run`` with ``stragglers:``)."""
    return {label: float(np.mean(step_with(mask)) / ideal_mean_s) for label, mask in groups.items()}


def attribute(prog: Program, measured: np.ndarray, ideal: np.ndarray,
              masks: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per label, the replayed step times with only the masked ops at their *measured* times."""
    return {label: replay(prog, np.where(mask, measured, ideal)).step_s() for label, mask in masks.items()}


@dataclass(frozen=True)
class WhatIf:
    """The what-if analysis of one trace. Step arrays are per complete step (``steps``);
    ``by_*`` map a stage / dp rank / op type / worker (``"dp/stage"``) to its attributed slowdown
    and ``*_steps`` to its attributed per-step slowdown."""

    name: str
    steps: np.ndarray
    measured_s: np.ndarray
    replayed_s: np.ndarray
    ideal_s: np.ndarray
    slowdown: float
    by_stage: dict[str, float]
    by_dp_rank: dict[str, float]
    by_optype: dict[str, float]
    by_worker: dict[str, float]
    by_worker_steps: dict[str, np.ndarray]
    replay: Replay
    ideal: Replay
    skipped: tuple[str, ...]

    @property
    def step_slowdown(self) -> np.ndarray:
        return self.replayed_s / self.ideal_s

    @property
    def replay_error_median_pct(self) -> float:
        return float(np.median(np.abs(self.replayed_s / self.measured_s - 1.0)) * 100)


def _ratios(times: Mapping[str, np.ndarray], ideal_mean: float) -> dict[str, float]:
    return {k: float(np.mean(v) / ideal_mean) for k, v in times.items()}


def what_if(prog: Program, workers: bool = True) -> WhatIf:
    """Replay, ideal step, slowdown and its attribution to stages, dp ranks, op types and (when
    *workers*) each worker."""
    measured = prog.own_s
    ideal_own = typical_s(prog)
    rep = replay(prog, measured)
    ide = replay(prog, ideal_own)
    ideal_s = ide.step_s()
    im = float(np.mean(ideal_s))
    D = prog.n_dp
    st = prog.stage[:, None, None]
    dpi = np.arange(D)[None, None, :]
    groups = np.array([PP_COMM.get(t, t) for t in prog.optype.tolist()])
    def step_with(mask: np.ndarray) -> np.ndarray:
        return replay(prog, np.where(mask, measured, ideal_own)).step_s()

    by_stage = slowdowns(step_with, {str(s): st == s for s in range(prog.meta.pp)}, im)
    by_dp = slowdowns(step_with, {str(d): dpi == d for d in range(D)}, im)
    by_type = slowdowns(step_with, {t: (groups == t)[:, None, None]
                                    for t in sorted(set(groups.tolist()))}, im)
    by_worker: dict[str, np.ndarray] = {}
    if workers:
        by_worker = attribute(prog, measured, ideal_own,
                              {f"{d}/{s}": (st == s) & (dpi == d) for s in range(prog.meta.pp) for d in range(D)})
    return WhatIf(
        name=prog.meta.name, steps=prog.steps, measured_s=prog.measured_step_s(), replayed_s=rep.step_s(),
        ideal_s=ideal_s, slowdown=float(np.mean(rep.step_s()) / im),
        by_stage=by_stage, by_dp_rank=by_dp, by_optype=by_type,
        by_worker=_ratios(by_worker, im), by_worker_steps={k: v / ideal_s for k, v in by_worker.items()},
        replay=rep, ideal=ide, skipped=prog.skipped)
