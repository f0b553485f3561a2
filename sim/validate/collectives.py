"""The collectives suite: nccl-tests runs, predicted vs measured bus bandwidth and latency.

``clustersim validate --suite collectives`` (the default). Data: nccl-tests measurements in
``DIR/collectives/``. ``runs.csv`` describes each measured run (hardware, rank count, notes,
calibration/test ``split``); ``systems.csv`` says, for every run, whether the simulator can model
its system (``supported``, with the bundled topology, whether InfiniBand SHARP was used and, in an
optional last column ``nvl_domain``, the GPUs it used in each NVLink domain) or not
(``unsupported``, with a reason); each run's own CSV holds the nccl-tests table
``size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps``.

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
import functools
import math
import re
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, SimError
from ..topology_spec import GpuClusterSpec
from ..units import GB, KiB, MiB, us_to_s
from .data import RUNS_FILE, SPLITS, number, read_csv, required_integer
from .stats import median, p90

__all__ = ["BW_MIN_BYTES", "LAT_MAX_BYTES", "OPS", "SYSTEM_FAMILIES", "TOPOLOGIES", "CaseSpec",
           "CollectivesReport", "PointResult", "Predictor", "RegimeStats", "RunResult", "Summary",
           "HARNESSES", "UnsupportedRun", "family_of", "family_of_spec", "gpus_per_thread",
           "harness_of", "is_anomalous",
           "nccl_version",
           "validate_collectives"]

# The ops of nccl-tests runs: sim.collectives.OPS, listed in the order the data's errors name them.
OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast")
TOPOLOGIES = frozenset({"dgx-a100", "dgx-h100", "dgx-h200"}
                       | {"dgx-b200", "gb200-nvl72", "hgx-h100-4gpu"}   # scale-up domains (issue 16)
                       | {"aws-p5", "aws-p4de", "gcp-a3-mega", "gcp-a3-high", "gcp-a3-ultra",
                          "oci-h200-roce", "oci-a100-roce", "polaris", "gcp-a4", "gcp-a4-roce",
                          "aws-p6-b200"})                                 # scale-out fabrics (issue 16)

BW_MIN_BYTES = 64 * MiB                # bandwidth regime: size_bytes >= this
LAT_MAX_BYTES = 64 * KiB               # latency regime: size_bytes <= this

# System families the report summarises separately, in this order (``family_of``).
SYSTEM_FAMILIES = ("DGX/HGX IB", "NVL72", "EFA", "GCP", "RoCE", "mesh+dragonfly")

SYSTEMS_FILE = "systems.csv"
RUN_COLUMNS = ("size_bytes", "count", "dtype", "time_us", "algbw_GBps", "busbw_GBps")
SYSTEMS_COLUMNS = ("file", "status", "topology", "sharp", "algo", "reason")
# Optional last column: the run's GPUs in each NVLink domain where it used only part of each rack
# (cluster.nvl_domain), blank where it filled them.
SYSTEMS_OPTIONAL = ("nvl_domain",)
RUNS_REQUIRED = ("file", "collective", "hardware", "gpus", "nodes", "gpus_per_node", "notes", "split")

# runs.csv `collective` -> op name; nccl-tests' binary names are accepted too.
_OP_ALIASES = types.MappingProxyType({
    **{op: op for op in OPS},
    "all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
})


@functools.lru_cache(maxsize=None)
def _spec(topology: str) -> GpuClusterSpec:
    from ..config.topology_specs import load_topology_spec  # lazily: YAML only when scoring

    spec = load_topology_spec(topology, where="systems.csv topology")
    if not isinstance(spec, GpuClusterSpec):
        raise ConfigError(f"systems.csv topology: {topology!r} is not a GPU cluster")
    return spec


def _gpu_name(topology: str) -> str:
    """The GPU's name as runs' hardware column writes it and the report labels a system ("H200 1
    node"): the catalogue chip's name up to its variant ("A100-SXM-80GB": A100), not its family
    (an H200 is family H100 there: sim.hardware)."""
    return _spec(topology).chip.name.split("-")[0]


def _host_gpus(topology: str) -> int:
    """GPUs per host as runs.csv counts nodes: an NVL72 rack's compute trays hold 4 GPUs each
    (``gpus_per_host``), else the node is the host (a 4-GPU HGX board, an 8-GPU DGX)."""
    spec = _spec(topology)
    return spec.gpus_per_host or spec.gpus_per_node


# The scale-out fabric family of topologies that are not InfiniBand DGX/HGX clusters, as the report
# labels a system ("H100 EFA multi-node"): errors are reported per fabric family.
_FABRIC_FAMILY = types.MappingProxyType({"aws-p5": "EFA", "aws-p4de": "EFA", "gcp-a3-mega": "GCP",
                                         "gcp-a3-high": "GCP", "gcp-a3-ultra": "GCP",
                                         "oci-h200-roce": "RoCE", "oci-a100-roce": "RoCE",
                                         "polaris": "Slingshot", "gcp-a4": "GCP", "gcp-a4-roce": "GCP",
                                         "aws-p6-b200": "EFA"})
# nccl-tests prints float unless told otherwise, and the torch.distributed benchmark in the data
# (all_reduce_bench.py) all-reduces fp32 tensors; both leave the dtype column blank only there.
_DEFAULT_DTYPE = "float"


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
    nccl_version: tuple[int, int] | None = None  # (major, minor) runs.csv states, else None
    nvl_domain: int | None = None  # GPUs used per NVLink domain (systems.csv), None: all of it
    gpus_per_thread: int = 1  # GPUs one nccl-tests thread drives (its -g flag; runs.csv env)
    harness: str = "nccl-tests"  # what timed it (HARNESSES; runs.csv env)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ConfigError(f"case: op must be one of {list(OPS)}, got {self.op!r}")
        if self.harness not in HARNESSES:
            raise ConfigError(f"case: harness must be one of {list(HARNESSES)}, got {self.harness!r}")
        if self.gpus < 1 or self.size_bytes <= 0 or self.gpus_per_thread < 1:
            raise ConfigError(f"case: need gpus, gpus_per_thread >= 1 and size_bytes > 0, got {self}")


Predictor = Callable[[CaseSpec], float]
"""Given one measured point, the predicted time of the collective in seconds (finite, > 0)."""



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
    family: str = ""                   # family_of(topology) for supported runs
    nccl_version: tuple[int, int] | None = None
    gpus_per_thread: int = 1           # nccl-tests -g (runs.csv env), 1 where not stated
    harness: str = "nccl-tests"        # harness_of(runs.csv env)
    nvl_domain: int | None = None      # systems.csv nvl_domain (GPUs per NVLink domain)

    @property
    def system(self) -> str:
        """Hardware family and scale, e.g. "H100 1 node" or "A100 multi-node"."""
        fabric = _FABRIC_FAMILY.get(self.topology)
        scale = '1 node' if self.nodes == 1 else 'multi-node'
        return f"{_gpu_name(self.topology)} {fabric + ' ' if fabric else ''}{scale}"


@dataclass(frozen=True, slots=True)
class _Measured:
    """One non-zero-size row of a run's nccl-tests table, in SI units."""

    size_bytes: int
    dtype: str
    time_s: float | None          # None where time_us is blank
    busbw_GBps: float



def nccl_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of the NCCL release a runs.csv ``nccl_version`` cell names ("2.26.2+cuda12.8",
    "2.29.2 (nccl-headers=22902), ..."), None where it names none ("not stated", "not stated for
    this table (... default now NCCL v2.27.7)": a guess is not the run's release)."""
    if (text or "").strip().lower().startswith("not "):
        return None
    m = re.search(r"(?<![\d.])(\d+)\.(\d+)(?:\.\d+)?", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def gpus_per_thread(env: str) -> int:
    """GPUs one nccl-tests thread drives: the ``-g N`` flag a runs.csv ``env`` cell shows
    ("... all_reduce_perf -b 8 -e 8G -f 2 -g 1", "single process -g 4"), else 1 (nccl-tests'
    default, and one process per GPU under MPI or torchrun)."""
    m = re.search(r"(?<!\S)-g\s*(\d+)\b", env or "")
    return max(1, int(m.group(1))) if m else 1


# What timed a run: nccl-tests (a stream of back-to-back iterations, mean time per iteration) or
# ml-engineering's all_reduce_bench.py as the data's runs used it (GitHub stas00/ml-engineering,
# its network benchmarks; ``timed_allreduce`` before the queued-calls rewrite: barrier, start
# event, ONE dist.all_reduce, end event on an idle device, so the call's host overhead is inside
# the timed span).
HARNESSES = ("nccl-tests", "torch-single-call")


def harness_of(env: str) -> str:
    """The harness a runs.csv ``env`` cell names: all_reduce_bench.py is "torch-single-call", the
    rest nccl-tests."""
    return "torch-single-call" if "all_reduce_bench" in (env or "") else "nccl-tests"


def _load_systems(path: Path) -> dict[str, tuple[int, dict[str, str]]]:
    header, rows = read_csv(path)
    if header not in (SYSTEMS_COLUMNS, SYSTEMS_COLUMNS + SYSTEMS_OPTIONAL):
        raise ConfigError(f"{path}: columns must be exactly {list(SYSTEMS_COLUMNS)} (optionally "
                          f"followed by {list(SYSTEMS_OPTIONAL)}), got {list(header)}")
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
    header, rows = read_csv(runs_path)
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
        gpus = required_integer(row["gpus"], where, "gpus")
        nodes = required_integer(row["nodes"], where, "nodes")
        per_node = required_integer(row["gpus_per_node"], where, "gpus_per_node")
        status, topology, sharp, reason = (sys_row[k].strip() for k in ("status", "topology", "sharp", "reason"))
        if sharp not in ("true", "false"):
            raise ConfigError(f"{sys_where}: sharp: expected true or false, got {sharp!r}")
        domain_text = (sys_row.get("nvl_domain") or "").strip()
        nvl_domain = required_integer(domain_text, sys_where, "nvl_domain") if domain_text else None
        if nvl_domain is not None and (status != "supported" or gpus % nvl_domain):
            raise ConfigError(f"{sys_where}: nvl_domain: {nvl_domain} must divide the supported "
                              f"run's {gpus} GPUs (leave it blank for a run that fills its domains)")
        if not reason:
            raise ConfigError(f"{sys_where}: reason: must not be empty")
        if status == "supported":
            if topology not in TOPOLOGIES:
                raise ConfigError(f"{sys_where}: topology: expected one of {sorted(TOPOLOGIES)} "
                                  f"for a supported run, got {topology!r}")
            host_gpus = _host_gpus(topology)
            if per_node != host_gpus or gpus != nodes * per_node:
                raise ConfigError(f"{sys_where}: supported runs on {topology} need whole nodes of "
                                  f"{host_gpus} GPUs; "
                                  f"{where} has gpus={gpus}, nodes={nodes}, gpus_per_node={per_node}")
            if _gpu_name(topology) not in row["hardware"]:
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
                              reason=reason, nccl_version=nccl_version(row.get("nccl_version", "")),
                              gpus_per_thread=gpus_per_thread(row.get("env", "")),
                              harness=harness_of(row.get("env", "")), nvl_domain=nvl_domain))
    return metas


def _load_measured(path: Path) -> list[_Measured]:
    """The non-zero-size rows of one run's nccl-tests table."""
    header, rows = read_csv(path)
    if header != RUN_COLUMNS:
        raise ConfigError(f"{path}: columns must be exactly {list(RUN_COLUMNS)}, got {list(header)}")
    out: list[_Measured] = []
    for line, row in rows:
        where = f"{path}:{line}"
        size_bytes = required_integer(row["size_bytes"], where, "size_bytes", minimum=0)
        if size_bytes == 0:
            continue
        time_us = number(row["time_us"], where, "time_us", zero_ok=True)
        busbw_GBps = number(row["busbw_GBps"], where, "busbw_GBps", zero_ok=True)
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
    pred_busbw_GBps = m.size_bytes / pred_s * factor / GB
    meas_s = m.time_s
    if meas_s is None and m.busbw_GBps > 0:
        meas_s = m.size_bytes * factor / (m.busbw_GBps * GB)
    err: float | None = None
    regime: str
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

    measured = _load_measured(data_dir / meta.file)
    factor = busbw_factor(meta.op, meta.gpus)
    error: str | None = None
    try:
        points = tuple(_score_point(meta, m, predict, factor) for m in measured)
    except ConfigError:
        raise                                   # bad data or input: to be fixed, not scored around
    except SimError as e:
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


_FAMILY_KEYWORDS = (
    # (family, words any of which in the topology's transport / name marks it), first match wins
    ("EFA", ("efa",)),
    ("GCP", ("tcpx", "gib", "gcp")),
    ("RoCE", ("roce",)),
    ("mesh+dragonfly", ("slingshot", "dragonfly")),
)


def family_of(topology: str) -> str:
    """The system family of a bundled GPU topology, from its spec rather than a list of names, so
    a new topology lands in its family: a scale-up NVLink domain larger than one host (GB200
    NVL72, MNNVL) is "NVL72"; then the scale-out transport (``transport``: EFA; GCP's TCPX/TCPXO
    and gIB; RoCE; Slingshot) or, for a node whose GPUs are wired straight to each other without
    NVSwitch (``mesh_links``), "mesh+dragonfly"; everything else (NVSwitch nodes on InfiniBand,
    the DGX and HGX designs) is "DGX/HGX IB". Fields a spec does not have count as absent."""
    return family_of_spec(_spec(topology))


def family_of_spec(spec: object) -> str:
    """``family_of`` for a topology spec already loaded (any object with its fields)."""
    if getattr(spec, "kind", "") != "gpu_cluster":
        return "TPU"
    per_node = int(getattr(spec, "gpus_per_node", 8))
    per_host = int(getattr(spec, "gpus_per_host", 0) or per_node)
    if per_node > per_host or per_node > 8:
        return "NVL72"
    words = f"{getattr(spec, 'transport', 'ib')} {getattr(spec, 'name', '')}".lower()
    for family, keys in _FAMILY_KEYWORDS:
        if any(k in words for k in keys):
            return family
    if getattr(spec, "mesh_links", 0) or getattr(spec, "nvswitches_per_node", 1) == 0:
        return "mesh+dragonfly"
    return "DGX/HGX IB"


def validate_collectives(data_dir: Path, predict: Predictor) -> CollectivesReport:
    """Score *predict* against every supported run in *data_dir* (a ``collectives/`` folder).

    Reads ``runs.csv``, ``systems.csv`` and each supported run's table. Anomalous runs and runs the
    predictor refused (it raised a ``SimError``) are shown but kept out of the aggregates.
    Raises ``ConfigError`` for missing or malformed data files.
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
