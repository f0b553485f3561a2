"""The collectives suite: nccl-tests runs, predicted vs measured bus bandwidth and latency.

``clustersim validate --suite collectives`` (the default). Data: nccl-tests measurements in
``DIR/collectives/`` (read by ``sim.validate.collectives_runs``: ``runs.csv``, ``systems.csv``
and each run's nccl-tests table); the systems it models and their families are
``sim.validate.collectives_systems``'s. This module scores and aggregates, and is where callers
import the suite's names from.

For each supported run and each non-zero size the predictor gives a time in seconds. It is turned
into nccl-tests' bus bandwidth (busbw = algbw x factor, algbw = size / time; factor as in
nccl-tests' doc/PERFORMANCE.md: all-reduce 2(n-1)/n; all-gather, reduce-scatter and all-to-all
(n-1)/n; send/recv and broadcast 1, ``sim.collectives.busbw_factor``) and scored in three regimes:

- bandwidth regime, size >= 64 MiB: absolute % error of busbw, ``|pred - meas| / meas * 100``;
- ramp regime, 64 KiB < size < 64 MiB (bandwidth still climbing: protocol and channel choice,
  pipeline fill): absolute % error of the time, the measured ``time_us`` or, where a run
  publishes busbw only, the time busbw implies (busbw is >= ~1 GB/s there, so its rounding to
  0.01 GB/s moves the time by < 1%);
- latency regime, size <= 64 KiB: absolute % error of the time (only where ``time_us`` was
  measured: the busbw of tiny sizes is rounded to nothing).

Aggregates (median, p90) pool the points of the supported, non-anomalous runs of each split, of
each split x system and of each split x system family (``family_of``: DGX/HGX on InfiniBand,
NVL72, EFA, GCP, RoCE, mesh nodes and dragonflies). Error budgets (``[collectives]`` in
``DIR/budgets.toml``) apply to the medians of the ``test`` split, all families pooled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, SimError
from ..units import GB, KiB, MiB
from .collectives_runs import (
    HARNESSES,
    OPS,
    CaseSpec,
    Predictor,
    _load_measured,
    _load_runs,
    _Measured,
    _RunMeta,
    gpus_per_thread,
    harness_of,
    is_anomalous,
    nccl_version,
)
from .collectives_systems import SYSTEM_FAMILIES, TOPOLOGIES, family_of, family_of_spec
from .data import SPLITS
from .stats import median, p90

__all__ = ["BW_MIN_BYTES", "HARNESSES", "LAT_MAX_BYTES", "OPS", "SYSTEM_FAMILIES", "TOPOLOGIES",
           "CaseSpec", "CollectivesReport", "PointResult", "Predictor", "RegimeStats", "RunResult",
           "Summary", "UnsupportedRun", "family_of", "family_of_spec", "gpus_per_thread", "harness_of",
           "is_anomalous", "nccl_version", "score_time", "validate_collectives"]

BW_MIN_BYTES = 64 * MiB                # bandwidth regime: size_bytes >= this
LAT_MAX_BYTES = 64 * KiB               # latency regime: size_bytes <= this


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True, slots=True)
class PointResult:
    """One size of one run: measured vs predicted.

    ``regime`` is "bandwidth" (size >= 64 MiB, error of busbw), "ramp" (64 KiB < size < 64 MiB,
    error of the time) or "latency" (size <= 64 KiB, error of the time). ``abs_err_pct`` is None
    where the point is not scored (latency points of runs that published no time).
    """

    size_bytes: int
    regime: str
    measured_time_s: float | None      # from time_us; else derived from busbw; None if neither
    time_from_busbw: bool              # measured_time_s was derived from busbw, not measured
    predicted_time_s: float
    measured_busbw_GBps: float
    predicted_busbw_GBps: float
    abs_err_pct: float | None


@dataclass(frozen=True, slots=True)
class RunResult:
    """One supported run. Medians are over the run's scored points in each regime, in percent."""

    file: str
    op: str
    split: str
    system: str
    family: str
    topology: str
    gpus: int
    nodes: int
    sharp: bool
    anomalous: bool
    points: tuple[PointResult, ...]
    bw_median_abs_pct: float | None
    lat_median_abs_pct: float | None
    ramp_median_abs_pct: float | None
    error: str | None = None           # the predictor refused a case (a SimError): its message

    def errors_pct(self, regime: str) -> list[float]:
        """The scored absolute % errors of *regime* ("bandwidth", "ramp" or "latency")."""
        return [p.abs_err_pct for p in self.points if p.regime == regime and p.abs_err_pct is not None]


@dataclass(frozen=True, slots=True)
class UnsupportedRun:
    """A run whose system the simulator cannot model yet; listed, never scored."""

    file: str
    op: str
    hardware: str
    gpus: int
    split: str
    reason: str


@dataclass(frozen=True, slots=True)
class RegimeStats:
    """Pooled absolute % errors of one regime: point count, median and p90 (None when n == 0)."""

    n: int
    median_abs_pct: float | None
    p90_abs_pct: float | None


@dataclass(frozen=True, slots=True)
class Summary:
    """Aggregate over the supported, non-anomalous runs of one split (system "all"), split x system
    or split x family (``system`` then names the family)."""

    split: str
    system: str
    runs: int
    bandwidth: RegimeStats
    latency: RegimeStats
    ramp: RegimeStats


@dataclass(frozen=True, slots=True)
class CollectivesReport:
    """Everything ``clustersim validate --suite collectives`` shows."""

    runs: tuple[RunResult, ...]
    splits: tuple[Summary, ...]            # one per split, system "all"
    systems: tuple[Summary, ...]           # one per (split, system) present, sorted
    unsupported: tuple[UnsupportedRun, ...]
    families: tuple[Summary, ...] = ()     # one per (split, family) present, SYSTEM_FAMILIES order

    def summary(self, split: str, system: str = "all") -> Summary:
        """The summary of *split* (and *system*, or a family of SYSTEM_FAMILIES); KeyError if that group
        has no runs."""
        groups = self.splits if system == "all" else (
            self.families if system in SYSTEM_FAMILIES else self.systems)
        for s in groups:
            if s.split == split and s.system == system:
                return s
        raise KeyError(f"no summary for split={split!r} system={system!r}")


def _stats(values: Sequence[float]) -> RegimeStats:
    return RegimeStats(n=len(values), median_abs_pct=median(values), p90_abs_pct=p90(values))


def _score_point(meta: _RunMeta, m: _Measured, predict: Predictor, factor: float) -> PointResult:
    """One size of *meta*'s run; *factor* is nccl-tests' busbw / algbw of the run's op and ranks."""
    case = CaseSpec(topology=meta.topology, gpus=meta.gpus, sharp=meta.sharp, op=meta.op,
                    size_bytes=m.size_bytes, dtype=m.dtype, algo=meta.algo,
                    nccl_version=meta.nccl_version, gpus_per_thread=meta.gpus_per_thread,
                    harness=meta.harness, nvl_domain=meta.nvl_domain)
    raw = predict(case)
    pred_s = float(raw)
    if not (math.isfinite(pred_s) and pred_s > 0):
        raise ValueError(f"predictor returned {raw!r} for {case}; expected a finite time > 0 s")
    return score_time(m, pred_s, factor, meta.file)


def score_time(m: _Measured, pred_s: float, factor: float, where: str) -> PointResult:
    """A predicted time *pred_s* against one measured size: its regime (``BW_MIN_BYTES``,
    ``LAT_MAX_BYTES``) and its error there (busbw in the bandwidth regime, time below it; a
    time derived from busbw where the table gives none); *factor* is nccl-tests' busbw / algbw,
    *where* names the data in an error."""
    pred_busbw_GBps = m.size_bytes / pred_s * factor / GB
    meas_s = m.time_s
    if meas_s is None and m.busbw_GBps > 0:
        meas_s = m.size_bytes * factor / (m.busbw_GBps * GB)
    err: float | None = None
    regime: str
    if m.size_bytes >= BW_MIN_BYTES:
        regime = "bandwidth"
        if m.busbw_GBps <= 0:
            raise ConfigError(f"{where}: size {m.size_bytes}: busbw_GBps is 0 in the bandwidth regime")
        err = abs(pred_busbw_GBps - m.busbw_GBps) / m.busbw_GBps * 100
    elif m.size_bytes <= LAT_MAX_BYTES:
        regime = "latency"
        if m.time_s is not None:
            err = abs(pred_s - m.time_s) / m.time_s * 100
    else:
        regime = "ramp"
        if meas_s is not None:
            err = abs(pred_s - meas_s) / meas_s * 100
    return PointResult(size_bytes=m.size_bytes, regime=regime, measured_time_s=meas_s,
                       time_from_busbw=m.time_s is None and meas_s is not None,
                       predicted_time_s=pred_s, measured_busbw_GBps=m.busbw_GBps,
                       predicted_busbw_GBps=pred_busbw_GBps, abs_err_pct=err)


def _score_run(data_dir: Path, meta: _RunMeta, predict: Predictor) -> RunResult:
    # lazily: sim.collectives brings the network stack (~0.4 s), which `clustersim --help` and
    # the other suites need not load
    from ..collectives import busbw_factor

    error: str | None = None
    points: tuple[PointResult, ...] = ()
    try:
        measured = _load_measured(data_dir / meta.file, meta.gpus)
    except ConfigError as e:                   # one bad run file: listed as unreadable
        measured, error = [], f"unreadable: {e}"
    factor = busbw_factor(meta.op, meta.gpus)
    if error is None:
        try:
            points = tuple(_score_point(meta, m, predict, factor) for m in measured)
        except SimError as e:                  # the model refuses the run (or a size of it)
            points, error = (), f"{type(e).__name__}: {e}"
    def errs(regime: str) -> list[float]:
        return [p.abs_err_pct for p in points if p.regime == regime and p.abs_err_pct is not None]

    return RunResult(file=meta.file, op=meta.op, split=meta.split, system=meta.system,
                     family=meta.family, topology=meta.topology, gpus=meta.gpus, nodes=meta.nodes,
                     sharp=meta.sharp, anomalous=meta.anomalous, points=points,
                     bw_median_abs_pct=median(errs("bandwidth")),
                     lat_median_abs_pct=median(errs("latency")),
                     ramp_median_abs_pct=median(errs("ramp")), error=error)


def _summarize(split: str, system: str, runs: Iterable[RunResult]) -> Summary:
    runs = list(runs)
    return Summary(split=split, system=system, runs=len(runs),
                   bandwidth=_stats([e for r in runs for e in r.errors_pct("bandwidth")]),
                   latency=_stats([e for r in runs for e in r.errors_pct("latency")]),
                   ramp=_stats([e for r in runs for e in r.errors_pct("ramp")]))


def validate_collectives(data_dir: Path, predict: Predictor) -> CollectivesReport:
    """Score *predict* against every supported run in *data_dir* (a ``collectives/`` folder).

    Reads ``runs.csv``, ``systems.csv`` and each supported run's table. Anomalous runs, runs the
    predictor refused (it raised a ``SimError``: a limit of the model, a size it cannot run) and
    run tables that cannot be read (their one-line error) are shown but kept out of the
    aggregates; the rest is scored. Raises ``ConfigError`` for a missing or malformed
    ``runs.csv`` / ``systems.csv``.
    """
    data_dir = Path(data_dir)
    metas = _load_runs(data_dir)
    fams: dict[str, str] = {}
    metas = [dataclasses.replace(m, family=fams.setdefault(m.topology, family_of(m.topology)))
             if m.supported else m for m in metas]
    results = tuple(_score_run(data_dir, m, predict) for m in metas if m.supported)
    unsupported = tuple(UnsupportedRun(file=m.file, op=m.op, hardware=m.hardware, gpus=m.gpus,
                                       split=m.split, reason=m.reason)
                        for m in metas if not m.supported)
    scored = [r for r in results if not r.anomalous and r.error is None]
    splits = tuple(_summarize(s, "all", (r for r in scored if r.split == s)) for s in SPLITS)
    groups = sorted({(SPLITS.index(r.split), r.system) for r in scored})
    systems = tuple(_summarize(SPLITS[i], sys_, (r for r in scored if r.split == SPLITS[i]
                                                  and r.system == sys_))
                    for i, sys_ in groups)
    order = {f: i for i, f in enumerate(SYSTEM_FAMILIES)}
    fam_groups = sorted({(SPLITS.index(r.split), r.family) for r in scored},
                        key=lambda g: (g[0], order.get(g[1], len(order)), g[1]))
    families = tuple(_summarize(SPLITS[i], fam, (r for r in scored if r.split == SPLITS[i]
                                                 and r.family == fam))
                     for i, fam in fam_groups)
    return CollectivesReport(runs=results, splits=splits, systems=systems, unsupported=unsupported,
                             families=families)
