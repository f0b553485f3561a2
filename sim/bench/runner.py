"""``clustersim bench``: check the request, estimate it, then time every case on a backend and
write each row as soon as it is timed (a killed run keeps what it measured).

The GPU work is a ``TimingBackend`` (``sim.bench.torch_backend`` on a CUDA GPU; tests pass a fake
one), so everything here runs and is tested without a GPU.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Protocol

from ..collectives.nccl import busbw_factor
from ..config import check_output_path
from ..config.paths import check_name
from ..errors import EXIT_INFEASIBLE, ConfigError, InfeasibleError
from .cases import (
    COLLECTIVE_COLUMNS,
    GROUPS,
    MAX_DEFAULT_S,
    TABLES,
    Case,
    case_set,
    collective_sizes,
    collective_table,
    estimate_s,
    nearest_chip,
)
from .specs import WARMUP, Kernel, cells, need_bytes, reps

__all__ = ["CaseSkipped", "TimingBackend", "TableWriter", "check_out_dir", "parse_only", "bench",
           "COLLECTIVE_OPS"]

COLLECTIVE_OPS = ("allreduce", "allgather")
# Share of the free GPU memory a case may plan to fill (the allocator and libraries need the rest).
_FREE_SHARE = 0.9
Progress = Callable[[Iterable[Case], int, str], Iterator[Case]]


class CaseSkipped(Exception):
    """A case this GPU or PyTorch build cannot run (out of memory, no such kernel): the run warns
    and goes on with the next case."""


class TimingBackend(Protocol):
    """What the runner needs from the GPU side."""

    def describe(self) -> dict[str, object]:
        """The machine, for env.json: ``gpu`` (the name CUDA reports), ``mem_GiB``, versions."""
        ...

    def gpu_count(self) -> int:
        """GPUs visible to the process (the NCCL sweep runs over all of them when more than one)."""
        ...

    def unsupported(self, kernel: Kernel) -> str | None:
        """Why this GPU / build cannot run *kernel* at all (no FP8, no grouped GEMM, no such SDPA
        backend), or None."""
        ...

    def free_bytes(self) -> float:
        """GPU memory a new case may allocate now."""
        ...

    def time_s(self, kernel: Kernel, warmup: int, reps: int) -> float:
        """Median seconds of one call over *reps* timed calls after *warmup* calls; raises
        ``CaseSkipped``."""
        ...

    def collective_s(self, op: str, sizes: Sequence[int], gpus: int) -> Iterator[tuple[int, int, float]]:
        """(size_bytes, count, seconds per call) of *op* at each size, over *gpus* GPUs, as each is
        timed; raises ``CaseSkipped``."""
        ...


class TableWriter:
    """The output tables of one run: each file written fresh at its first row, every row flushed
    as it is written. A context manager (closes the files)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._files: dict[str, tuple[IO[str], tuple[str, ...]]] = {}
        self.rows: dict[str, int] = {}

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        for f, _ in self._files.values():
            f.close()

    def row(self, table: str, columns: Sequence[str], values: dict[str, str | int | float]) -> None:
        assert set(values) == set(columns), (table, sorted(set(values) ^ set(columns)))
        if table not in self._files:
            new: IO[str] = (self.out_dir / table).open("w", newline="", encoding="utf-8")
            new.write(",".join(columns) + "\n")
            self._files[table] = (new, tuple(columns))
            self.rows[table] = 0
        f, cols = self._files[table]
        csv.writer(f, lineterminator="\n").writerow([values[c] for c in cols])
        f.flush()
        self.rows[table] += 1


def parse_only(text: str | None) -> tuple[str, ...]:
    """The groups ``--only`` names (comma-separated ``GROUPS``); all of them for None."""
    if text is None:
        return GROUPS
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not names or any(n not in GROUPS for n in names):
        raise ConfigError(f"--only: expected a comma-separated list of {', '.join(GROUPS)}; got {text!r}")
    return names


def check_out_dir(path: str) -> Path:
    """--out: a folder that exists or can be created, and in which the run can write (checked
    before any work; created only once the GPU is known to be usable)."""
    if not path:
        raise ConfigError("--out: empty folder name; give the folder to write the tables to")
    p = Path(check_name(path, "--out"))
    if p.exists() and not p.is_dir():
        raise ConfigError(f"--out: {path!r} is a file, not a folder; give a folder to write the tables to")
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"--out: {str(probe)!r} is not a folder; cannot create {path!r} in it")
    if probe == p:
        check_output_path(str(p / "env.json"), "--out")
    elif not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--out: cannot create {path!r}: {str(probe)!r} is not writable (permission denied)")
    return p


def _make_dir(p: Path) -> None:
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out: cannot create {str(p)!r} ({e.strerror or e})") from None


def bench(out: str, quick: bool, yes: bool, only: str | None, backend: Callable[[], TimingBackend],
          warn: Callable[[str], None], progress: Progress | None = None) -> int:
    """The whole command: check the flags, open the backend (``InfeasibleError`` where this machine
    cannot run it), estimate the set, refuse an estimate over ``MAX_DEFAULT_S`` without *yes*,
    then time it into *out*. Returns the exit status (0; ``EXIT_INFEASIBLE`` when no case could
    be timed)."""
    groups = parse_only(only)
    out_dir = check_out_dir(out)
    gpu = backend()
    env = gpu.describe()
    mem_GiB = env.get("mem_GiB", 0.0)
    chip, known = nearest_chip(str(env.get("gpu", "")),
                               float(mem_GiB) * 2**30 if isinstance(mem_GiB, int | float) else 0.0)
    runnable: list[Case] = []
    unsupported: dict[str, list[Case]] = {}
    for c in case_set(quick, groups):
        reason = gpu.unsupported(c.kernel)
        if reason is None:
            runnable.append(c)
        else:
            unsupported.setdefault(f"{c.group}: {reason}", []).append(c)
    for reason, skipped in unsupported.items():
        warn(f"bench: skipping {len(skipped)} case(s), {reason}")
    gpus = gpu.gpu_count()
    ops = COLLECTIVE_OPS if "nccl" in groups and gpus > 1 else ()
    sizes = collective_sizes(quick)
    free = gpu.free_bytes()
    fits = [c for c in runnable if need_bytes(c.kernel) <= _FREE_SHARE * free]
    if runnable and not fits and not ops:
        smallest = min(need_bytes(c.kernel) for c in runnable)
        raise InfeasibleError(f"bench: no case fits in this GPU's free memory ({free / 2**30:.1f} GiB "
                              f"free; the smallest case needs {smallest / 2**30:.1f} GiB)")
    if not runnable and not ops:
        raise InfeasibleError(f"bench: this GPU runs none of the cases of --only {','.join(groups)}")
    seconds = estimate_s(runnable, chip, gpus, sizes, ops)
    nccl = f" + NCCL {', '.join(ops)} over {gpus} GPUs" if ops else ""
    model = "" if known else f"; {env.get('gpu')!r} is not in the catalogue, estimated as an {chip.name}"
    warn(f"bench: {len(runnable):,} kernel cases{nccl} on {env.get('gpu')}: about "
         f"{seconds / 60:.1f} minutes{model}")
    if seconds > MAX_DEFAULT_S and not yes:
        raise ConfigError(f"bench: the estimate, {seconds / 60:.0f} minutes, is over "
                          f"{MAX_DEFAULT_S / 60:.0f}; pass --quick or --only, or --yes to run it anyway")
    _make_dir(out_dir)
    env.update(date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               set="quick" if quick else "default", groups=list(groups), estimate_s=round(seconds),
               estimated_as=chip.name)
    (out_dir / "env.json").write_text(json.dumps(env, indent=1) + "\n", encoding="utf-8")
    with TableWriter(out_dir) as tables:
        _run_cases(runnable, gpu, tables, warn, progress)
        for op in ops:
            _run_collective(op, sizes, gpus, chip.name, gpu, tables, warn)
    timed = sum(tables.rows.values())
    warn(f"bench: {timed:,} rows in {len(tables.rows)} tables written to {out_dir}")
    return 0 if timed else EXIT_INFEASIBLE


def _run_cases(cases: Sequence[Case], gpu: TimingBackend, tables: TableWriter,
               warn: Callable[[str], None], progress: Progress | None) -> None:
    reasons: dict[str, int] = {}
    items: Iterable[Case] = progress(cases, len(cases), "bench") if progress else cases
    for c in items:
        need, free = need_bytes(c.kernel), gpu.free_bytes()
        if need > _FREE_SHARE * free:
            reason = f"needs {need / 2**30:.1f} GiB of GPU memory, {free / 2**30:.1f} GiB free"
        else:
            try:
                t = gpu.time_s(c.kernel, WARMUP, reps(c.kernel))
            except CaseSkipped as e:
                reason = str(e)
            else:
                tables.row(c.table, TABLES[c.table], {**dict(c.labels), **cells(c.kernel, t)})
                continue
        if reason not in reasons:
            warn(f"bench: skipped {c.table} {dict(c.labels) or c.kernel}: {reason}")
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in reasons.items():
        if n > 1:
            warn(f"bench: {n} cases skipped in all: {reason}")


def _run_collective(op: str, sizes: Sequence[int], gpus: int, chip_name: str, gpu: TimingBackend,
                    tables: TableWriter, warn: Callable[[str], None]) -> None:
    """nccl-tests' bandwidths: algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce,
    (n-1)/n for all-gather (nccl-tests doc/PERFORMANCE.md)."""
    factor = busbw_factor(op, gpus)
    table = collective_table(op, gpus, chip_name)
    try:
        for size, count, t in gpu.collective_s(op, sizes, gpus):
            algbw = size / t / 1e9
            tables.row(table, COLLECTIVE_COLUMNS,
                       {"size_bytes": size, "count": count, "dtype": "float", "time_us": round(t * 1e6, 2),
                        "algbw_GBps": round(algbw, 2), "busbw_GBps": round(algbw * factor, 2)})
    except CaseSkipped as e:
        warn(f"bench: NCCL {op} over {gpus} GPUs stopped: {e}")
