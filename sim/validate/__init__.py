"""Validation suites: predicted vs measured on real hardware, with error budgets.

``clustersim validate [--suite S] [--data DIR] [--json]`` (DESIGN.md). Two suites:
``collectives`` (below, the default) and ``training`` (published training runs, predicted step
time and MFU; see ``sim.validate_training``). Budgets for both live in ``DIR/budgets.toml``.

**collectives**: nccl-tests measurements in ``DIR/collectives/``. ``runs.csv`` describes each
measured run (hardware, rank count, notes, calibration/test ``split``); ``systems.csv`` says, for
every run, whether the simulator can model its system (``supported``, with the bundled topology
and whether InfiniBand SHARP was used) or not (``unsupported``, with a reason); each run's own CSV
holds the nccl-tests table ``size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps``.

For each supported run and each non-zero size the predictor gives a time in seconds. It is turned
into nccl-tests' bus bandwidth (busbw = algbw x factor, algbw = size / time; factor as in
nccl-tests' doc/PERFORMANCE.md: all-reduce 2(n-1)/n; all-gather, reduce-scatter and all-to-all
(n-1)/n; send/recv and broadcast 1) and scored in two regimes:

- bandwidth regime, size >= 64 MiB: absolute % error of busbw, ``|pred - meas| / meas * 100``;
- latency regime, size <= 64 KiB: absolute % error of the time (only where ``time_us`` was
  measured; some runs publish busbw only).

Sizes in between are reported but not scored. Aggregates (median, p90) pool the points of the
supported, non-anomalous runs of each split, and of each split x system. Error budgets
(``DIR/budgets.toml``) apply to the medians of the ``test`` split.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tomllib
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError, SimError
from .units import GB, KiB, MiB, us_to_s
from .validate_training import (
    _percentile,
    _read_csv,
    TRAINING_BUDGET_KEYS,
    TrainingReport,
    check_training_budgets,
    format_training_report,
    training_report_to_json,
    validate_training,
)

__all__ = [
    "BUDGET_KEYS",
    "BW_MIN_BYTES",
    "LAT_MAX_BYTES",
    "OPS",
    "SUITES",
    "TOPOLOGIES",
    "CaseSpec",
    "CollectivesReport",
    "PointResult",
    "Predictor",
    "RegimeStats",
    "RunResult",
    "Summary",
    "TrainingReport",
    "UnsupportedRun",
    "add_parser",
    "busbw_factor",
    "check_budgets",
    "default_data_dir",
    "format_report",
    "is_anomalous",
    "load_budgets",
    "report_to_json",
    "run_cli",
    "validate_collectives",
    "validate_training",
]

SUITES = ("collectives", "training", "failures", "compute")
OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast")
TOPOLOGIES = frozenset({"dgx-a100", "dgx-h100", "dgx-h200"})
SPLITS = ("calibration", "test")
GPUS_PER_NODE = 8                      # every supported topology is a DGX/HGX node of 8 GPUs

BW_MIN_BYTES = 64 * MiB                # bandwidth regime: size_bytes >= this
LAT_MAX_BYTES = 64 * KiB               # latency regime: size_bytes <= this
BUDGET_KEYS = types.MappingProxyType({
    "collectives": frozenset({"bw_median_abs_pct", "lat_median_abs_pct"}),
    "training": TRAINING_BUDGET_KEYS,       # per family (A100, H100, TPU) on the test split
    "failures": frozenset({"relative_err_max_pct"}),
    "compute": frozenset({"gemm_median_abs_pct", "attention_median_abs_pct"}),
})

BUDGETS_FILE = "budgets.toml"
RUNS_FILE = "runs.csv"
SYSTEMS_FILE = "systems.csv"
RUN_COLUMNS = ("size_bytes", "count", "dtype", "time_us", "algbw_GBps", "busbw_GBps")
SYSTEMS_COLUMNS = ("file", "status", "topology", "sharp", "algo", "reason")
RUNS_REQUIRED = ("file", "collective", "hardware", "gpus", "nodes", "gpus_per_node", "notes", "split")

# runs.csv `collective` -> op name; nccl-tests' binary names are accepted too.
_OP_ALIASES = types.MappingProxyType({
    **{op: op for op in OPS},
    "all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
})
_FAMILY = types.MappingProxyType({"dgx-a100": "A100", "dgx-h100": "H100", "dgx-h200": "H200"})
# nccl-tests prints float unless told otherwise, and the torch.distributed benchmark in the data
# (all_reduce_bench.py) all-reduces fp32 tensors; both leave the dtype column blank only there.
_DEFAULT_DTYPE = "float"


def default_data_dir() -> Path:
    """The bundled validation data (``sim/data/validation``; the repository's ``validation/`` links to it)."""
    return Path(__file__).resolve().parent / "data" / "validation"


# ----------------------------------------------------------------------------- inputs

@dataclass(frozen=True, slots=True)
class CaseSpec:
    """One measured point, as the collective-time model sees it.

    ``size_bytes`` is the size nccl-tests prints (all-gather/all-to-all: the whole output buffer,
    i.e. n x the per-rank contribution); the model returns the time of one out-of-place call of
    that size, in seconds.
    """

    topology: str        # a bundled topology name: dgx-a100, dgx-h100, dgx-h200
    gpus: int            # ranks in the collective (whole nodes of 8 when more than one node)
    sharp: bool          # InfiniBand SHARP (in-network reduction) available and used by the run
    op: str              # one of OPS
    size_bytes: int      # > 0
    dtype: str           # nccl-tests dtype name (float, double, half, bfloat16, ...)
    algo: str | None = None  # an algorithm the run forced (NCCL_ALGO=...), else the model chooses

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ConfigError(f"case: op must be one of {list(OPS)}, got {self.op!r}")
        if self.gpus < 1 or self.size_bytes <= 0:
            raise ConfigError(f"case: need gpus >= 1 and size_bytes > 0, got {self}")


Predictor = Callable[[CaseSpec], float]
"""Given one measured point, the predicted time of the collective in seconds (finite, > 0)."""


def busbw_factor(op: str, gpus: int) -> float:
    """nccl-tests' busbw / algbw ratio for *op* on *gpus* ranks (doc/PERFORMANCE.md)."""
    if op not in OPS:
        raise ConfigError(f"busbw_factor: op must be one of {list(OPS)}, got {op!r}")
    if gpus < 1:
        raise ConfigError(f"busbw_factor: need gpus >= 1, got {gpus}")
    if op == "allreduce":
        return 2 * (gpus - 1) / gpus
    if op in ("allgather", "reducescatter", "alltoall"):
        return (gpus - 1) / gpus
    return 1.0


def is_anomalous(file: str, notes: str) -> bool:
    """A run its source flags as misbehaving: "anomalous" in its file name or notes (any case)."""
    return "anomalous" in file.lower() or "anomalous" in notes.lower()


@dataclass(frozen=True, slots=True)
class _RunMeta:
    """One row of runs.csv joined with its row of systems.csv."""

    file: str
    op: str
    hardware: str
    gpus: int
    nodes: int
    split: str
    anomalous: bool
    supported: bool
    topology: str
    sharp: bool
    algo: str | None
    reason: str

    @property
    def system(self) -> str:
        """Hardware family and scale, e.g. "H100 1 node" or "A100 multi-node"."""
        return f"{_FAMILY[self.topology]} {'1 node' if self.nodes == 1 else 'multi-node'}"


@dataclass(frozen=True, slots=True)
class _Measured:
    """One non-zero-size row of a run's nccl-tests table, in SI units."""

    size_bytes: int
    dtype: str
    time_s: float | None          # None where time_us is blank
    busbw_GBps: float


def _int(text: str, where: str, field: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{where}: {field}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise ConfigError(f"{where}: {field}: expected an integer >= {minimum}, got {value}")
    return value


def _float(text: str, where: str, field: str) -> float | None:
    """A non-negative finite float, or None for a blank cell."""
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {field}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: {field}: expected a finite number >= 0, got {text!r}")
    return value


def _load_systems(path: Path) -> dict[str, tuple[int, dict[str, str]]]:
    header, rows = _read_csv(path)
    if header != SYSTEMS_COLUMNS:
        raise ConfigError(f"{path}: columns must be exactly {list(SYSTEMS_COLUMNS)}, got {list(header)}")
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for line, row in rows:
        if row["file"] in out:
            raise ConfigError(f"{path}:{line}: duplicate file {row['file']!r} "
                              f"(first on line {out[row['file']][0]})")
        out[row["file"]] = (line, row)
    return out


def _load_runs(data_dir: Path) -> list[_RunMeta]:
    """runs.csv joined with systems.csv, checked for consistency, in runs.csv order."""
    runs_path, systems_path = data_dir / RUNS_FILE, data_dir / SYSTEMS_FILE
    header, rows = _read_csv(runs_path)
    if missing := [c for c in RUNS_REQUIRED if c not in header]:
        raise ConfigError(f"{runs_path}: missing column(s) {missing}")
    systems = _load_systems(systems_path)
    if extra := sorted(set(systems) - {row["file"] for _, row in rows}):
        raise ConfigError(f"{systems_path}: file(s) not in {RUNS_FILE}: {extra}")
    metas: list[_RunMeta] = []
    for line, row in rows:
        where = f"{runs_path}:{line}"
        file = row["file"]
        if file not in systems:
            raise ConfigError(f"{systems_path}: no row for {file!r} ({where}); every run needs "
                              f"status supported or unsupported")
        sys_line, sys_row = systems[file]
        sys_where = f"{systems_path}:{sys_line}"
        op = _OP_ALIASES.get(row["collective"].strip().lower())
        if op is None:
            raise ConfigError(f"{where}: collective: expected one of {list(OPS)}, got {row['collective']!r}")
        if row["split"] not in SPLITS:
            raise ConfigError(f"{where}: split: expected one of {list(SPLITS)}, got {row['split']!r}")
        gpus = _int(row["gpus"], where, "gpus", 1)
        nodes = _int(row["nodes"], where, "nodes", 1)
        per_node = _int(row["gpus_per_node"], where, "gpus_per_node", 1)
        status, topology, sharp, reason = (sys_row[k].strip() for k in ("status", "topology", "sharp", "reason"))
        if sharp not in ("true", "false"):
            raise ConfigError(f"{sys_where}: sharp: expected true or false, got {sharp!r}")
        if not reason:
            raise ConfigError(f"{sys_where}: reason: must not be empty")
        if status == "supported":
            if topology not in TOPOLOGIES:
                raise ConfigError(f"{sys_where}: topology: expected one of {sorted(TOPOLOGIES)} "
                                  f"for a supported run, got {topology!r}")
            if per_node != GPUS_PER_NODE or gpus != nodes * per_node:
                raise ConfigError(f"{sys_where}: supported runs need whole nodes of {GPUS_PER_NODE} GPUs; "
                                  f"{where} has gpus={gpus}, nodes={nodes}, gpus_per_node={per_node}")
            if _FAMILY[topology] not in row["hardware"]:
                raise ConfigError(f"{sys_where}: topology {topology} does not match hardware "
                                  f"{row['hardware']!r} ({where})")
        elif status == "unsupported":
            if topology:
                raise ConfigError(f"{sys_where}: topology: must be empty for an unsupported run, "
                                  f"got {topology!r}")
        else:
            raise ConfigError(f"{sys_where}: status: expected supported or unsupported, got {status!r}")
        metas.append(_RunMeta(file=file, op=op, hardware=row["hardware"], gpus=gpus, nodes=nodes,
                              split=row["split"], anomalous=is_anomalous(file, row["notes"]),
                              supported=status == "supported", topology=topology,
                              sharp=sharp == "true", algo=sys_row["algo"].strip() or None,
                              reason=reason))
    return metas


def _load_measured(path: Path) -> list[_Measured]:
    """The non-zero-size rows of one run's nccl-tests table."""
    header, rows = _read_csv(path)
    if header != RUN_COLUMNS:
        raise ConfigError(f"{path}: columns must be exactly {list(RUN_COLUMNS)}, got {list(header)}")
    out: list[_Measured] = []
    for line, row in rows:
        where = f"{path}:{line}"
        size_bytes = _int(row["size_bytes"], where, "size_bytes", 0)
        if size_bytes == 0:
            continue
        time_us = _float(row["time_us"], where, "time_us")
        busbw_GBps = _float(row["busbw_GBps"], where, "busbw_GBps")
        if busbw_GBps is None:
            raise ConfigError(f"{where}: busbw_GBps: must not be blank")
        if time_us == 0:
            raise ConfigError(f"{where}: time_us: must be > 0 (or blank), got {row['time_us']!r}")
        out.append(_Measured(size_bytes=size_bytes, dtype=row["dtype"].strip() or _DEFAULT_DTYPE,
                             time_s=None if time_us is None else us_to_s(time_us),
                             busbw_GBps=busbw_GBps))
    return out


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True, slots=True)
class PointResult:
    """One size of one run: measured vs predicted.

    ``regime`` is "bandwidth" (size >= 64 MiB, error of busbw), "latency" (size <= 64 KiB, error of
    the time) or "mid" (not scored). ``abs_err_pct`` is None where the point is not scored (mid
    sizes, and latency points of runs that published no time).
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
    topology: str
    gpus: int
    nodes: int
    sharp: bool
    anomalous: bool
    points: tuple[PointResult, ...]
    bw_median_abs_pct: float | None
    lat_median_abs_pct: float | None
    error: str | None = None           # the predictor refused a case (a SimError): its message

    def errors_pct(self, regime: str) -> list[float]:
        """The scored absolute % errors of *regime* ("bandwidth" or "latency")."""
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
    """Aggregate over the supported, non-anomalous runs of one split (system "all") or split x system."""

    split: str
    system: str
    runs: int
    bandwidth: RegimeStats
    latency: RegimeStats


@dataclass(frozen=True, slots=True)
class CollectivesReport:
    """Everything ``clustersim validate --suite collectives`` shows."""

    runs: tuple[RunResult, ...]
    splits: tuple[Summary, ...]            # one per split, system "all"
    systems: tuple[Summary, ...]           # one per (split, system) present, sorted
    unsupported: tuple[UnsupportedRun, ...]

    def summary(self, split: str, system: str = "all") -> Summary:
        """The summary of *split* (and *system*); KeyError if that group has no runs."""
        for s in (self.splits if system == "all" else self.systems):
            if s.split == split and s.system == system:
                return s
        raise KeyError(f"no summary for split={split!r} system={system!r}")


def _stats(values: Sequence[float]) -> RegimeStats:
    return RegimeStats(n=len(values), median_abs_pct=_percentile(values, 0.5),
                       p90_abs_pct=_percentile(values, 0.9))


def _score_point(meta: _RunMeta, m: _Measured, predict: Predictor) -> PointResult:
    factor = busbw_factor(meta.op, meta.gpus)
    case = CaseSpec(topology=meta.topology, gpus=meta.gpus, sharp=meta.sharp, op=meta.op,
                    size_bytes=m.size_bytes, dtype=m.dtype, algo=meta.algo)
    raw = predict(case)
    pred_s = float(raw)
    if not (math.isfinite(pred_s) and pred_s > 0):
        raise ValueError(f"predictor returned {raw!r} for {case}; expected a finite time > 0 s")
    pred_busbw_GBps = m.size_bytes / pred_s * factor / GB
    meas_s = m.time_s
    if meas_s is None and m.busbw_GBps > 0:
        meas_s = m.size_bytes * factor / (m.busbw_GBps * GB)
    err: float | None = None
    if m.size_bytes >= BW_MIN_BYTES:
        regime = "bandwidth"
        if m.busbw_GBps <= 0:
            raise ConfigError(f"{meta.file}: size {m.size_bytes}: busbw_GBps is 0 in the bandwidth regime")
        err = abs(pred_busbw_GBps - m.busbw_GBps) / m.busbw_GBps * 100
    elif m.size_bytes <= LAT_MAX_BYTES:
        regime = "latency"
        if m.time_s is not None:
            err = abs(pred_s - m.time_s) / m.time_s * 100
    else:
        regime = "mid"
    return PointResult(size_bytes=m.size_bytes, regime=regime, measured_time_s=meas_s,
                       time_from_busbw=m.time_s is None and meas_s is not None,
                       predicted_time_s=pred_s, measured_busbw_GBps=m.busbw_GBps,
                       predicted_busbw_GBps=pred_busbw_GBps, abs_err_pct=err)


def _score_run(data_dir: Path, meta: _RunMeta, predict: Predictor) -> RunResult:
    measured = _load_measured(data_dir / meta.file)
    error: str | None = None
    try:
        points = tuple(_score_point(meta, m, predict) for m in measured)
    except ConfigError:
        raise                                   # bad data or input: to be fixed, not scored around
    except SimError as e:
        points, error = (), f"{type(e).__name__}: {e}"
    bw = [p.abs_err_pct for p in points if p.regime == "bandwidth" and p.abs_err_pct is not None]
    lat = [p.abs_err_pct for p in points if p.regime == "latency" and p.abs_err_pct is not None]
    return RunResult(file=meta.file, op=meta.op, split=meta.split, system=meta.system,
                     topology=meta.topology, gpus=meta.gpus, nodes=meta.nodes, sharp=meta.sharp,
                     anomalous=meta.anomalous, points=points, bw_median_abs_pct=_percentile(bw, 0.5),
                     lat_median_abs_pct=_percentile(lat, 0.5), error=error)


def _summarize(split: str, system: str, runs: Iterable[RunResult]) -> Summary:
    runs = list(runs)
    return Summary(split=split, system=system, runs=len(runs),
                   bandwidth=_stats([e for r in runs for e in r.errors_pct("bandwidth")]),
                   latency=_stats([e for r in runs for e in r.errors_pct("latency")]))


def validate_collectives(data_dir: Path, predict: Predictor) -> CollectivesReport:
    """Score *predict* against every supported run in *data_dir* (a ``collectives/`` folder).

    Reads ``runs.csv``, ``systems.csv`` and each supported run's table. Anomalous runs and runs the
    predictor refused (it raised a ``SimError``) are shown but kept out of the aggregates.
    Raises ``ConfigError`` for missing or malformed data files.
    """
    data_dir = Path(data_dir)
    metas = _load_runs(data_dir)
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
    return CollectivesReport(runs=results, splits=splits, systems=systems, unsupported=unsupported)


# ----------------------------------------------------------------------------- output

def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _summary_lines(title: str, summaries: Sequence[Summary], with_system: bool) -> list[str]:
    head = f"{'split':<12}" + (f"{'system':<18}" if with_system else "")
    lines = [title, head + f"{'runs':>5}{'bw n':>7}{'bw med%':>9}{'bw p90%':>9}"
                           f"{'lat n':>7}{'lat med%':>10}{'lat p90%':>10}"]
    for s in summaries:
        lines.append(f"{s.split:<12}" + (f"{s.system:<18}" if with_system else "")
                     + f"{s.runs:>5}{s.bandwidth.n:>7}{_pct(s.bandwidth.median_abs_pct):>9}"
                     f"{_pct(s.bandwidth.p90_abs_pct):>9}{s.latency.n:>7}"
                     f"{_pct(s.latency.median_abs_pct):>10}{_pct(s.latency.p90_abs_pct):>10}")
    return lines


def format_report(report: CollectivesReport) -> str:
    """A fixed-width text table: per-run rows, per-split and per-system summaries, unsupported runs."""
    width = max([len(r.file) for r in report.runs] + [len(u.file) for u in report.unsupported] + [3])
    lines = [
        "collectives: predicted vs measured nccl-tests runs",
        (f"  bandwidth regime: size >= {BW_MIN_BYTES // MiB} MiB, abs % error of busbw; "
         f"latency regime: size <= {LAT_MAX_BYTES // KiB} KiB, abs % error of time"),
        "",
        (f"{'run':<{width}}  {'split':<12}{'system':<18}{'op':<14}{'gpus':>5}{'sharp':>6}"
         f"{'bw n':>6}{'bw med%':>9}{'lat n':>6}{'lat med%':>10}  note"),
    ]
    for r in report.runs:
        note = "ANOMALOUS (not in aggregates)" if r.anomalous else ""
        if r.error is not None:
            note = (note + "; " if note else "") + f"predictor refused: {r.error}"
        lines.append(f"{r.file:<{width}}  {r.split:<12}{r.system:<18}{r.op:<14}{r.gpus:>5}"
                     f"{'yes' if r.sharp else 'no':>6}{len(r.errors_pct('bandwidth')):>6}"
                     f"{_pct(r.bw_median_abs_pct):>9}{len(r.errors_pct('latency')):>6}"
                     f"{_pct(r.lat_median_abs_pct):>10}  {note}".rstrip())
    lines.append("")
    lines += _summary_lines("by split (supported, non-anomalous runs; points pooled):",
                            report.splits, with_system=False)
    lines.append("")
    lines += _summary_lines("by split and system:", report.systems, with_system=True)
    lines.append("")
    lines.append(f"unsupported ({len(report.unsupported)} runs, not scored):")
    for u in report.unsupported:
        lines.append(f"{u.file:<{width}}  {u.split:<12}{u.op:<14}{u.gpus:>5}  {u.reason}")
    return "\n".join(lines)


def report_to_json(report: CollectivesReport) -> dict[str, Any]:
    """The report as plain JSON types (times in s, bandwidths in GB/s, errors in %)."""
    return {
        "suite": "collectives",
        "regimes": {"bandwidth_min_bytes": BW_MIN_BYTES, "latency_max_bytes": LAT_MAX_BYTES},
        "runs": [dataclasses.asdict(r) for r in report.runs],
        "splits": [dataclasses.asdict(s) for s in report.splits],
        "systems": [dataclasses.asdict(s) for s in report.systems],
        "unsupported": [dataclasses.asdict(u) for u in report.unsupported],
    }


# ----------------------------------------------------------------------------- budgets

def load_budgets(path: Path, suites: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
    """Read the error budgets (TOML): ``{suite: {key: percent}}``.

    The tables of *suites* are required (default: every suite of ``BUDGET_KEYS``); any other suite
    table present is checked too. Raises ``ConfigError`` naming the file and key for a missing file
    or required table, an unknown suite or key, or a value that is not a positive number.
    """
    required = set(BUDGET_KEYS if suites is None else suites)
    if unknown_suites := sorted(required - set(BUDGET_KEYS)):
        raise ConfigError(f"budgets: unknown suite(s) {unknown_suites}; allowed {sorted(BUDGET_KEYS)}")
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: budgets file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the budgets file: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML (UTF-8): {e}") from None
    if unknown := sorted(set(raw) - set(BUDGET_KEYS)):
        raise ConfigError(f"{path}: unknown suite table(s) {unknown}; allowed {sorted(BUDGET_KEYS)}")
    out: dict[str, dict[str, float]] = {}
    for suite, keys in BUDGET_KEYS.items():
        table = raw.get(suite)
        if table is None and suite not in required:
            continue
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{suite}]: table missing")
        if unknown := sorted(set(table) - keys):
            raise ConfigError(f"{path}: [{suite}]: unknown key(s) {unknown}; allowed {sorted(keys)}")
        if missing := sorted(keys - set(table)):
            raise ConfigError(f"{path}: [{suite}]: missing key(s) {missing}")
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{path}: [{suite}].{key}: expected a number > 0 (percent), got {value!r}")
        out[suite] = {k: float(v) for k, v in table.items()}
    return out


def check_budgets(report: CollectivesReport | TrainingReport,
                  budgets: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Budget violations of the ``test`` split, one human-readable line each; [] when within budget.

    Collectives: a regime with no test points, or a non-anomalous test run the predictor refused,
    is a violation too: the budget could not be checked. Training: see
    ``sim.validate_training.check_training_budgets`` (each family held to the budgets separately).
    """
    if isinstance(report, TrainingReport):
        training = budgets.get("training")
        if training is None:
            raise ConfigError("budgets: no [training] table")
        return check_training_budgets(report, training)
    table = budgets.get("collectives")
    if table is None:
        raise ConfigError("budgets: no [collectives] table")
    test = report.summary("test")
    out: list[str] = []
    for key, label, stats in (("bw_median_abs_pct", "bandwidth", test.bandwidth),
                              ("lat_median_abs_pct", "latency", test.latency)):
        if key not in table:
            raise ConfigError(f"budgets: [collectives]: missing key {key!r}")
        budget = table[key]
        if stats.median_abs_pct is None:
            out.append(f"collectives: no {label}-regime points in the test split; cannot check {key}")
        elif stats.median_abs_pct > budget:
            out.append(f"collectives: test split {label} median abs error {stats.median_abs_pct:.2f}% "
                       f"> budget {key} = {budget:g}% ({stats.n} points)")
    for r in report.runs:
        if r.split == "test" and not r.anomalous and r.error is not None:
            out.append(f"collectives: test run {r.file} not predicted ({r.error})")
    return out


# ----------------------------------------------------------------------------- command line

def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``validate [--suite S] [--data DIR] [--json]``; its handler is ``run_cli``."""
    p = subparsers.add_parser("validate", help="predicted vs measured, against the error budgets")
    p.add_argument("--suite", choices=SUITES, default="collectives",
                   help="which suite: collectives (default), training, failures or compute")
    p.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                   help=f"validation folder with {BUDGETS_FILE} and one folder per suite "
                        "(default: the repository's validation/)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--plot", metavar="FILE",
                   help="predicted vs measured scatter with a +-10%% band (.png, .svg or .pdf)")
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    """Run the suite, print the report; 1 if an error budget is exceeded, else 0."""
    assert args.suite in SUITES, args.suite  # argparse choices already checked it
    plot = None
    if getattr(args, "plot", None) is not None:
        from .config import PLOT_SUFFIXES, check_output_path

        plot = check_output_path(args.plot, "--plot", PLOT_SUFFIXES)
        if args.suite == "failures":
            raise ConfigError("--plot: the failures suite has a handful of cases and no scatter; "
                              "plot collectives, training or compute")
    data_dir = Path(args.data)
    if not data_dir.is_dir():
        raise ConfigError(f"--data: {str(data_dir)!r} is not a folder; give the validation folder "
                          f"that holds {BUDGETS_FILE} and one folder per suite")
    budgets = load_budgets(data_dir / BUDGETS_FILE, suites=(args.suite,))
    if args.suite == "failures":
        from .validate_failures import check_failure_budgets, format_failures, validate_failures

        cases = validate_failures(data_dir / args.suite)
        violations = check_failure_budgets(cases, budgets[args.suite])
        as_json = {"suite": "failures", "cases": [dataclasses.asdict(c) for c in cases]}
        as_text = format_failures(cases)
        scope = "budgeted cases"
    elif args.suite == "compute":
        from .validate_compute import (check_compute_budgets, compute_report_to_json,
                                       format_compute_report, validate_compute)

        rows, summaries = validate_compute(data_dir / args.suite)
        violations = check_compute_budgets(summaries, budgets[args.suite])
        as_json = compute_report_to_json(rows, summaries) if args.json else {}
        as_text = "" if args.json else format_compute_report(rows, summaries)
        scope = "test GPUs (H200)"
        points = [(r.measured_s * 1e6, r.predicted_s * 1e6, f"{r.gpu} {r.kind}") for r in rows]
        labels = ("kernel time", "us", "compute: kernel tables (H100 fit, H200 test)")
    elif args.suite == "training":
        from .training import TrainingPredictor  # lazily: the step model is only needed here

        training = validate_training(data_dir / args.suite, TrainingPredictor())
        violations = check_budgets(training, budgets)
        as_json = training_report_to_json(training) if args.json else {}
        as_text = "" if args.json else format_training_report(training)
        scope = "test split, per family"
        points = [(r.measured_step_s, r.predicted_step_s, f"{r.family} {r.split}")
                  for r in training.runs if r.predicted_step_s is not None]
        labels = ("step time", "s", "training: published runs")
    else:
        from .collectives import CasePredictor  # lazily: the model is only needed here

        report = validate_collectives(data_dir / args.suite, CasePredictor())
        violations = check_budgets(report, budgets)
        as_json = report_to_json(report) if args.json else {}
        as_text = "" if args.json else format_report(report)
        scope = "test split"
        points = [(p.measured_busbw_GBps, p.predicted_busbw_GBps, f"{r.split}")
                  for r in report.runs if not r.anomalous for p in r.points
                  if p.regime == "bandwidth" and p.measured_busbw_GBps > 0]
        labels = ("bus bandwidth (>= 64 MiB)", "GB/s", "collectives: nccl-tests runs")
    if plot is not None:
        from .plots import plot_validation

        plot_validation(points, labels[0], labels[1], plot, labels[2])
    if args.json:
        print(json.dumps({**as_json, "budgets": budgets[args.suite],
                          "budget_violations": violations}, allow_nan=False))
    else:
        print(as_text)
        print()
        print(f"budgets ({scope}): " + ", ".join(f"{k} = {v:g}" for k, v in budgets[args.suite].items()))
        print("\n".join(f"BUDGET EXCEEDED: {v}" for v in violations) if violations else "within budget")
    return 1 if violations else 0


# ----------------------------------------------------------------------------- calibration fits

def fit_nvlink_efficiency(data_dir: Path, predict_full_rate: Predictor) -> float:
    """Fit of ``sim.calibration.LINK_EFFICIENCY["nvlink"]`` on the calibration split.

    Over the bandwidth-regime points (>= 64 MiB) of supported, non-anomalous, single-node
    calibration runs: the median of measured busbw / busbw predicted with links at their full
    line rate (*predict_full_rate*). Single-node runs are bound by NVLink alone, so the ratio is
    the achievable fraction of the NVLink rate.
    """
    ratios: list[float] = []
    for meta in _load_runs(data_dir):
        if meta.split != "calibration" or not meta.supported or meta.anomalous or meta.nodes != 1:
            continue
        for m in _load_measured(data_dir / meta.file):
            if m.size_bytes < BW_MIN_BYTES:
                continue
            case = CaseSpec(topology=meta.topology, gpus=meta.gpus, sharp=meta.sharp, op=meta.op,
                            size_bytes=m.size_bytes, dtype=m.dtype, algo=meta.algo)
            pred_busbw = m.size_bytes / predict_full_rate(case) / 1e9 * busbw_factor(meta.op, meta.gpus)
            ratios.append(m.busbw_GBps / pred_busbw)
    if not ratios:
        raise ConfigError(f"{data_dir}: no calibration points to fit the NVLink efficiency on")
    return float(np.median(ratios))
