"""The collectives suite's inputs: the measured runs, their systems and their nccl-tests tables.

Data: nccl-tests measurements in ``DIR/collectives/``. ``runs.csv`` describes each measured run
(hardware, rank count, notes, calibration/test ``split``); ``systems.csv`` says, for every run,
whether the simulator can model its system (``supported``, with the bundled topology, whether
InfiniBand SHARP was used and, in an optional last column ``nvl_domain``, the GPUs it used in each
NVLink domain) or not (``unsupported``, with a reason); each run's own CSV holds the nccl-tests
table ``size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps``. Each measured point reaches the
predictor as a ``CaseSpec``.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..units import us_to_s
from .collectives_systems import FABRIC_FAMILY, TOPOLOGIES, gpu_name, host_gpus
from .data import RUNS_FILE, SPLITS, number, read_csv, required_integer
from .nccl_log import NcclLog, looks_like_nccl_log, read_nccl_tests_log

__all__ = ["HARNESSES", "OPS", "CaseSpec", "Predictor", "gpus_per_thread", "harness_of", "measured_of",
           "is_anomalous", "nccl_version"]

# The ops of nccl-tests runs: sim.collectives.OPS, listed in the order the data's errors name them.
OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast")

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

# nccl-tests prints float unless told otherwise, and the torch.distributed benchmark in the data
# (all_reduce_bench.py) all-reduces fp32 tensors; both leave the dtype column blank only there.
_DEFAULT_DTYPE = "float"


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
        fabric = FABRIC_FAMILY.get(self.topology)
        scale = '1 node' if self.nodes == 1 else 'multi-node'
        return f"{gpu_name(self.topology)} {fabric + ' ' if fabric else ''}{scale}"


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
            per_host = host_gpus(topology)
            if gpus != nodes * per_node or per_node > per_host:
                raise ConfigError(f"{sys_where}: supported runs on {topology} need nodes of at most "
                                  f"{per_host} GPUs; "
                                  f"{where} has gpus={gpus}, nodes={nodes}, gpus_per_node={per_node}")
            if per_node < per_host and nvl_domain is None:
                nvl_domain = per_node          # part of each node: its GPUs with their NICs
            if gpu_name(topology) not in row["hardware"]:
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


def measured_of(log: NcclLog) -> list[_Measured]:
    """The non-zero sizes of a printed nccl-tests log as the suite scores them."""
    return [_Measured(size_bytes=r.size_bytes, dtype=r.dtype, time_s=us_to_s(r.time_us),
                      busbw_GBps=r.busbw_GBps) for r in log.rows if r.size_bytes > 0]


def _load_measured(path: Path, ranks: int | None = None) -> list[_Measured]:
    """The non-zero-size rows of one run's nccl-tests table: this project's CSV columns, or the
    output as nccl-tests prints it (``sim.validate.nccl_log``), whose listed ranks must be
    *ranks* (runs.csv's gpus)."""
    if looks_like_nccl_log(path):
        log = read_nccl_tests_log(path)
        if ranks is not None and log.ranks is not None and log.ranks != ranks:
            raise ConfigError(f"{path}: the log lists {log.ranks} ranks but runs.csv says gpus = "
                              f"{ranks}")
        return measured_of(log)
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

