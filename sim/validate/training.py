"""The training suite: published training runs, predicted vs measured step time and MFU.

``clustersim validate --suite training`` (DESIGN.md). Data: ``DIR/training/runs.csv`` and
``overrides.csv``; budgets: ``[training]`` in ``DIR/budgets.toml``. Three stages, each a pure
function of the one before:

1. **Mapping** (``sim.validate.training_map.map_runs``): every row becomes a scenario mapping in
   the DESIGN.md schema or an "unsupported" entry with its reason.
2. **Measured step** (``sim.validate.training_measured``): the published step time if there is one
   (``time_from = "step"``); else global batch x sequence length / tokens per second
   (``"tokens"``); else the source's FLOP count per step / (TFLOP/s per chip x chips)
   (``"tflops"``); else the source's FLOP count / (MFU x chips x the source's peak) (``"mfu"``).
   The FLOP count is the source's own convention (``FLOPS_CONVENTIONS``): Narayanan et al. SC21
   count the recomputed forward pass (hardware FLOPs), Megatron-LM, MaxText and MegaScale add the
   output-head matmul to PaLM's count. The measured MFU is then re-normalised to one definition:
   PaLM model FLOPs (6N + 12·L·H·Q·T per token, DESIGN.md) / (step time x chips x the chip's dense
   BF16 peak), FP8 runs included.
3. **Scoring** (``validate_training``, below): the predictor's step time and MFU per supported
   run; absolute % error of the step time and absolute MFU error in percentage points; median and
   p90 per split and per split x family (A100, H100 (H200 included: the catalogue's family), TPU).
   A run the predictor refuses (``ConfigError``, ``InfeasibleError``) is listed as an error, kept
   out of the aggregates, and is a budget violation when it is in the test split.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import SimError
from .data import SPLITS
from .stats import median, p90
from .training_map import MappedRun, map_runs
from .training_rules import TOPOLOGY_CHIPS

__all__ = ["FAMILIES", "StepPredictor", "TrainingPrediction", "TrainingReport", "TrainingRunResult",
           "TrainingSummary", "UnsupportedTrainingRun", "validate_training"]

FAMILIES = ("A100", "H100", "B200", "B300", "TPU")
# Architecture families (issue 28): dense transformers, MoE transformers, hybrids with Mamba-2
# layers. The chip families above are scored on the dense runs; each architecture on its own.
ARCHITECTURES = ("dense", "moe", "hybrid")


def architecture_of(scenario: Mapping[str, Any]) -> str:
    """``hybrid`` where the model has Mamba-2 layers, else ``moe`` where it has MoE layers, else
    ``dense``."""
    from ..config.model_section import read_model

    kinds = read_model(scenario["model"]).layer_kinds()
    if any(k.mixer == "mamba" for k in kinds):
        return "hybrid"
    return "moe" if any(k.mlp == "moe" for k in kinds) else "dense"


class TrainingPrediction(Protocol):
    """What a ``StepPredictor`` returns (``sim.validate.predictors.TrainingPredictor``: a
    ``sim.results.StepResult``)."""

    @property
    def step_time_s(self) -> float: ...
    @property
    def mfu(self) -> float: ...
    @property
    def model_flops_per_step(self) -> float: ...
    @property
    def memory_per_chip_GiB(self) -> float: ...


StepPredictor = Callable[[Mapping[str, Any]], TrainingPrediction]
"""Given a scenario mapping (DESIGN.md schema), the predicted step; may raise ConfigError or
InfeasibleError for a scenario it cannot run."""


@dataclass(frozen=True, slots=True)
class TrainingRunResult:
    """One supported run: measured vs predicted. Errors: step in %, MFU in percentage points."""

    id: str
    split: str
    family: str
    topology: str
    chips: int
    framework: str
    time_from: str
    flops_convention: str
    measured_step_s: float
    measured_mfu: float
    published_mfu: float | None
    model_flops_per_step: float                    # PaLM, from the mapping
    assumptions: tuple[str, ...]
    scenario: Mapping[str, Any]
    predicted_step_s: float | None = None
    predicted_mfu: float | None = None
    step_abs_err_pct: float | None = None
    mfu_abs_err_pp: float | None = None
    predicted_model_flops_per_step: float | None = None
    error: str | None = None                       # the predictor refused the run: its message
    measured_memory_GiB: float | None = None       # the source's peak per chip, where published
    predicted_memory_GiB: float | None = None
    memory_abs_err_pct: float | None = None        # only where both exist
    architecture: str = "dense"                    # ARCHITECTURES: the model's layer kinds


@dataclass(frozen=True, slots=True)
class UnsupportedTrainingRun:
    """A row with no scenario; listed with its reason, never predicted."""

    id: str
    split: str
    hardware: str
    chips: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class TrainingSummary:
    """Aggregate over the predicted runs of one split (family "all"), split x family, or split x
    family x framework (``framework`` "all" for the first two)."""

    split: str
    family: str
    runs: int
    step_median_abs_pct: float | None
    step_p90_abs_pct: float | None
    mfu_median_abs_pp: float | None
    framework: str = "all"
    memory_runs: int = 0                           # runs whose source published peak memory
    memory_median_abs_pct: float | None = None


@dataclass(frozen=True, slots=True)
class TrainingReport:
    """Everything ``clustersim validate --suite training`` shows."""

    runs: tuple[TrainingRunResult, ...]        # supported rows, runs.csv order
    splits: tuple[TrainingSummary, ...]        # one per split, family "all"
    families: tuple[TrainingSummary, ...]      # one per (split, family) with supported runs
    unsupported: tuple[UnsupportedTrainingRun, ...]
    stacks: tuple[TrainingSummary, ...] = ()   # one per (split, family, framework)
    # one per (split, chip, precision): ``family`` holds the catalogue chip, ``framework`` the
    # scenario's training.precision
    chip_precisions: tuple[TrainingSummary, ...] = ()
    # one per (split, architecture): ``family`` holds the architecture (ARCHITECTURES)
    architectures: tuple[TrainingSummary, ...] = ()

    @property
    def errors(self) -> tuple[TrainingRunResult, ...]:
        """Supported runs the predictor refused."""
        return tuple(r for r in self.runs if r.error is not None)

    def summary(self, split: str, family: str = "all") -> TrainingSummary:
        """The summary of *split* (and *family*); KeyError if that group has no supported runs."""
        for s in (self.splits if family == "all" else self.families):
            if s.split == split and s.family == family:
                return s
        raise KeyError(f"no summary for split={split!r} family={family!r}")



def _score(run: MappedRun, predict: StepPredictor) -> TrainingRunResult:
    assert run.supported and run.measured is not None and run.scenario is not None
    assert run.family is not None and run.topology is not None and run.chips is not None
    m = run.measured
    unscored = TrainingRunResult(
        id=run.id, split=run.split, family=run.family, topology=run.topology, chips=run.chips,
        framework=run.framework, time_from=m.time_from, flops_convention=m.flops_convention,
        measured_step_s=m.step_time_s, measured_mfu=m.mfu, published_mfu=m.published_mfu,
        model_flops_per_step=m.model_flops_per_step,
        assumptions=run.assumptions, scenario=run.scenario, measured_memory_GiB=m.peak_memory_GiB,
        architecture=architecture_of(run.scenario))
    try:
        pred = predict(run.scenario)
    except SimError as e:              # ConfigError, InfeasibleError, TopologyError: listed, not scored
        return dataclasses.replace(unscored, error=f"{type(e).__name__}: {e}")
    step_s, mfu, flops = float(pred.step_time_s), float(pred.mfu), float(pred.model_flops_per_step)
    # MFU is not capped at 1: PaLM counts the full T x T attention, which causal kernels halve, so
    # a fast long-sequence step can exceed 100 % of the peak by that count.
    if not (math.isfinite(step_s) and step_s > 0 and math.isfinite(mfu) and mfu >= 0
            and math.isfinite(flops) and flops > 0):
        raise ValueError(f"predictor returned step_time_s={step_s!r}, mfu={mfu!r}, "
                         f"model_flops_per_step={flops!r} for {run.id}; expected a time > 0 s, "
                         "an MFU >= 0 and FLOPs > 0")
    mem = float(pred.memory_per_chip_GiB)
    mem_err = (abs(mem - m.peak_memory_GiB) / m.peak_memory_GiB * 100
               if m.peak_memory_GiB is not None else None)
    return dataclasses.replace(unscored, predicted_step_s=step_s, predicted_mfu=mfu,
                               step_abs_err_pct=abs(step_s - m.step_time_s) / m.step_time_s * 100,
                               mfu_abs_err_pp=abs(mfu - m.mfu) * 100,
                               predicted_model_flops_per_step=flops,
                               predicted_memory_GiB=mem, memory_abs_err_pct=mem_err)


# Runs of one cluster scored together in a worker share its topology (the predictor's cache).
_CHUNK = 6


def play_key(raw: Mapping[str, Any]) -> str:
    """The scenario of a run less its name: runs with the same key play the same step (one
    configuration measured by two stacks or sources: MegaScale's Megatron-LM and MegaScale rows)."""
    return json.dumps({k: v for k, v in raw.items() if k != "name"}, sort_keys=True, default=str)


_WORKER_PREDICT: list[StepPredictor] = []      # a worker process's predictor (its caches live on)


def _worker_init(predict: StepPredictor) -> None:
    _WORKER_PREDICT[:] = [predict]


def _score_chunk(runs: Sequence[MappedRun]) -> list[TrainingRunResult]:
    return [_score(m, _WORKER_PREDICT[0]) for m in runs]


def _chunks(runs: Sequence[MappedRun]) -> list[list[int]]:
    """The indices of *runs* in chunks of about ``_CHUNK`` runs, a cluster's runs side by side
    and the largest clusters first (their steps take longest: the small ones last even out the
    workers' ends);
    runs that play the same step (``play_key``) go to one chunk whole (PERF: a worker plays it
    once, as one process does: MegaScale's pairs of rows)."""
    same: dict[str, list[int]] = {}
    for i, m in enumerate(runs):
        same.setdefault(play_key(m.scenario or {}), []).append(i)
    groups = sorted(same.values(), key=lambda g: (-(runs[g[0]].chips or 0), str(runs[g[0]].topology), g[0]))
    chunks: list[list[int]] = [[]]
    for g in groups:
        if len(chunks[-1]) >= _CHUNK:
            chunks.append([])
        chunks[-1].extend(g)
    return chunks


def _score_all(runs: Sequence[MappedRun], predict: StepPredictor,
               workers: int) -> tuple[TrainingRunResult, ...]:
    """Every run's result, in *runs*' order: in this process, or in chunks of runs (``_chunks``)
    spread over *workers* processes (PERF: ``validate --suite training`` on every core)."""
    from ..progress import progress

    if workers <= 1 or len(runs) < 2 * _CHUNK:
        return tuple(_score(m, predict) for m in progress(runs, len(runs), "training runs"))
    from concurrent.futures import ProcessPoolExecutor, as_completed

    chunks = _chunks(runs)
    out: dict[int, TrainingRunResult] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), initializer=_worker_init,
                             initargs=(predict,)) as pool:
        futs = {pool.submit(_score_chunk, [runs[i] for i in c]): c for c in chunks}
        bar = progress(as_completed(futs), len(futs), "training runs (chunks)")
        for f in bar:
            out.update(zip(futs[f], f.result()))
    return tuple(out[i] for i in range(len(runs)))


def _summarize(split: str, family: str, runs: Iterable[TrainingRunResult],
               framework: str = "all") -> TrainingSummary:
    runs = [r for r in runs if r.error is None]
    step = [r.step_abs_err_pct for r in runs if r.step_abs_err_pct is not None]
    mfu = [r.mfu_abs_err_pp for r in runs if r.mfu_abs_err_pp is not None]
    mem = [r.memory_abs_err_pct for r in runs if r.memory_abs_err_pct is not None]
    return TrainingSummary(split=split, family=family, runs=len(runs),
                           step_median_abs_pct=median(step),
                           step_p90_abs_pct=p90(step),
                           mfu_median_abs_pp=median(mfu), framework=framework,
                           memory_runs=len(mem), memory_median_abs_pct=median(mem))


def validate_training(data_dir: Path, predict: StepPredictor,
                      mapped: Sequence[MappedRun] | None = None, workers: int = 1) -> TrainingReport:
    """Score *predict* against every supported run in *data_dir* (a ``training/`` folder).

    *mapped*: the result of ``map_runs(data_dir)`` when the caller already has it. Runs the
    predictor refuses (a ``SimError``) are listed and kept out of the aggregates. Raises
    ``ConfigError`` for missing or malformed data files, ``ValueError`` for a nonsensical prediction.
    *workers* > 1 scores the runs in that many processes (*predict* must pickle); every run is
    a pure function of its scenario, so the report is the same.
    """
    mapped = map_runs(data_dir) if mapped is None else tuple(mapped)
    supported = [m for m in mapped if m.supported]
    results = _score_all(supported, predict, workers)
    unsupported = tuple(UnsupportedTrainingRun(id=m.id, split=m.split, hardware=m.hardware,
                                               chips=m.chips, reason=m.reason)
                        for m in mapped if not m.supported)
    splits = tuple(_summarize(s, "all", (r for r in results if r.split == s)) for s in SPLITS)
    groups = sorted({(SPLITS.index(r.split), FAMILIES.index(r.family) if r.family in FAMILIES
                      else len(FAMILIES), r.family) for r in results})
    families = tuple(_summarize(SPLITS[i], fam, (r for r in results if r.split == SPLITS[i]
                                                  and r.family == fam
                                                  and r.architecture == "dense"))
                     for i, _, fam in groups
                     if any(r.family == fam and r.architecture == "dense" for r in results))
    arch_keys = sorted({(SPLITS.index(r.split), ARCHITECTURES.index(r.architecture))
                        for r in results})
    architectures = tuple(
        _summarize(SPLITS[i], ARCHITECTURES[a], (r for r in results if r.split == SPLITS[i]
                                                 and r.architecture == ARCHITECTURES[a]))
        for i, a in arch_keys)
    stack_keys = sorted({(SPLITS.index(r.split), r.family, r.framework) for r in results})
    stacks = tuple(_summarize(SPLITS[i], fam, (r for r in results if r.split == SPLITS[i]
                                                and r.family == fam and r.framework == fw), fw)
                   for i, fam, fw in stack_keys)
    chip_keys = sorted({(SPLITS.index(r.split), _chip(r), _precision(r)) for r in results})
    chip_precisions = tuple(
        _summarize(SPLITS[i], chip, (r for r in results if r.split == SPLITS[i]
                                     and _chip(r) == chip and _precision(r) == prec), prec)
        for i, chip, prec in chip_keys)
    return TrainingReport(runs=results, splits=splits, families=families, unsupported=unsupported,
                          stacks=stacks, chip_precisions=chip_precisions,
                          architectures=architectures)


def _chip(r: TrainingRunResult) -> str:
    """The catalogue chip of a run's topology (training_rules.TOPOLOGY_CHIPS)."""
    return TOPOLOGY_CHIPS.get(r.topology, r.topology)


def _precision(r: TrainingRunResult) -> str:
    return str(r.scenario.get("training", {}).get("precision", "bf16"))
