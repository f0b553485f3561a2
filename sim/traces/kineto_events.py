"""One rank's PyTorch-profiler (Kineto) trace file, read and indexed: its GPU kernels, each with
the CPU context that launched it, and its ``ProfilerStep#N`` windows.

The format is the Chrome-trace JSON that ``torch.profiler`` exports (``prof.export_chrome_trace``
or ``tensorboard_trace_handler``; ``.json`` or ``.json.gz``): a top-level object with
``traceEvents`` and, from PyTorch 1.13, a ``distributedInfo`` header (``rank``, ``world_size``).
Times are microseconds; ``baseTimeNanoseconds`` (newer exports) is added when present so that
ranks share one clock. A GPU event (``cat`` ``kernel``, ``gpu_memcpy``, ``gpu_memset``; older
exports ``Kernel``, ``Memcpy``, ``Memset``) is linked to the CUDA runtime call that launched it
by ``args.correlation`` (or, lacking it, by its ``ac2g`` flow arrow). ``index_events`` is the one
pass over a file's events; ``read_rank`` and ``sim.traces.kineto_tables`` both read through it.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["MAX_TRACE_BYTES", "CpuEvent", "GpuEvent", "Kernel", "RankEvents", "Thread", "TraceIndex", "index_events",
           "innermost", "read_rank", "read_trace_json"]

# A trace larger than this (on disk, or decompressed) is refused rather than parsed: the JSON
# parser needs about ten times the text in memory. Profile fewer steps to get under it.
MAX_TRACE_BYTES = 512 * 2**20
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "runtime", "cuda_driver"})
CPU_CATS = frozenset({"user_annotation", "cpu_op", "operator"})
_STEP = re.compile(r"ProfilerStep#(\d+)$")
# CPU annotations that give a launch its phase (on the launching thread).
BACKWARD_PREFIXES = ("autograd::engine::evaluate_function", "## backward ##")
OPTIMIZER_PREFIX = "Optimizer.step#"
ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"


@dataclass(frozen=True, slots=True)
class Kernel:
    """One GPU event: start and duration (us, on the trace's clock), name, the CPU launch time
    (us; NaN when no launch was found) and the launch's context: ``backward``, ``optimizer``,
    ``zero_grad`` or ``""`` (plain, e.g. the forward on the main thread); ``"?"`` when unknown."""

    ts_us: float
    dur_us: float
    name: str
    launch_us: float
    context: str


@dataclass(frozen=True)
class RankEvents:
    """One file: its header's rank and world size (-1 where absent), its steps (number ->
    CPU window, us) and its GPU events in start order."""

    path: Path
    rank: int
    world_size: int
    steps: dict[int, tuple[float, float]]
    kernels: tuple[Kernel, ...]


Thread = tuple[Any, Any]                  # (pid, tid) of a CPU thread


@dataclass(frozen=True, slots=True)
class CpuEvent:
    """A CPU event that ``index_events`` kept: its position in ``traceEvents``, start and duration
    (us, the file's own clock), name, thread and ``args`` ({} where absent)."""

    index: int
    ts_us: float
    dur_us: float
    name: str
    thread: Thread
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """A GPU event: start and duration (us, the file's own clock), name, category (lower case)
    and the CPU call that launched it, (time in us, thread), or None where none is found."""

    ts_us: float
    dur_us: float
    name: str
    cat: str
    launch: tuple[float, Thread] | None


@dataclass(frozen=True)
class TraceIndex:
    """One file, indexed (``index_events``): its header's rank and world size (-1 where absent),
    the offset of its clock (us, ``baseTimeNanoseconds``; 0 where absent), the threads of the
    autograd engine, the CPU events kept and every GPU event, both in file order."""

    path: Path
    rank: int
    world_size: int
    off_us: float
    autograd_threads: frozenset[Thread]
    cpu: tuple[CpuEvent, ...]
    gpu: tuple[GpuEvent, ...]


def read_trace_json(path: Path) -> dict[str, Any]:
    """The JSON object of a ``.json`` / ``.json.gz`` trace; ConfigError for a missing, too large,
    truncated or invalid file (with the line and column of a JSON error)."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such trace file")
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise ConfigError(f"{path}: {size / 2**20:.0f} MiB is over the {MAX_TRACE_BYTES // 2**20} MiB a trace "
                          "file may have; profile fewer steps (torch.profiler schedule active=...)")
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read(MAX_TRACE_BYTES + 1)
            if len(raw) > MAX_TRACE_BYTES:
                raise ConfigError(f"{path}: decompresses to over {MAX_TRACE_BYTES // 2**20} MiB, the most a trace "
                                  "may have; profile fewer steps (torch.profiler schedule active=...)")
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise ConfigError(f"{path}: cannot read the trace ({type(e).__name__}: {e}); a truncated download?") from None
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: line {e.lineno} column {e.colno}: not valid JSON ({e.msg}); "
                          "a truncated trace?") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: not a JSON text ({type(e).__name__})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        keys = sorted(doc)[:6] if isinstance(doc, dict) else type(doc).__name__
        raise ConfigError(f"{path}: not a PyTorch profiler (Kineto) trace: no 'traceEvents' list (found {keys})")
    return doc


def _num(path: Path, i: int, e: dict[str, Any], key: str) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{path}: traceEvents[{i}] ({str(e.get('name'))[:60]!r}): field {key!r}: expected a "
                          f"finite number of microseconds, got {v!r}")
    return float(v)


def _header_int(path: Path, info: Any, key: str) -> int:
    if not isinstance(info, dict) or key not in info:
        return -1
    v = info[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{path}: distributedInfo.{key}: expected a whole number >= 0, got {v!r}")
    return v


class _Intervals:
    """Is a time inside any of a set of intervals? (sorted starts, running maximum of ends)."""

    def __init__(self, spans: list[tuple[float, float]]) -> None:
        spans.sort()
        self._starts = [a for a, _ in spans]
        self._reach: list[float] = []
        hi = -math.inf
        for _, b in spans:
            hi = max(hi, b)
            self._reach.append(hi)

    def __contains__(self, t: float) -> bool:
        i = bisect_right(self._starts, t) - 1
        return i >= 0 and self._reach[i] >= t


def _ident(v: Any) -> int | str | None:
    """A correlation or flow id, or None for a value that cannot be one (absent, a list, ...)."""
    return v if isinstance(v, (int, str)) and not isinstance(v, bool) else None


def index_events(path: Path, keep_cpu: Callable[[str, str], bool]) -> TraceIndex:
    """Reads one trace file and indexes it: its header, the autograd threads, the CPU events
    (``ph`` X of ``cat`` user_annotation / cpu_op / operator) for which ``keep_cpu(cat, name)``
    holds (``cat`` lower-cased), and every GPU event with the CPU call that launched it (by
    ``args.correlation``, else by its ``ac2g`` flow arrow). ConfigError names the file and event of
    a time that is not a finite number; a correlation or flow id that is not an int or str is
    treated as absent."""
    doc = read_trace_json(path)
    info = doc.get("distributedInfo")
    base = doc.get("baseTimeNanoseconds")
    off_us = float(base) / 1000.0 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    threads_bwd: set[Thread] = set()
    cpu: list[CpuEvent] = []
    launches: dict[int | str, tuple[float, Thread]] = {}
    flows_s: dict[int | str, tuple[float, Thread]] = {}
    flows_f: dict[tuple[Any, Any, float], int | str] = {}
    gpu: list[tuple[float, float, str, str, int | str | None, Thread]] = []
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            raise ConfigError(f"{path}: traceEvents[{i}]: expected an event object, got {type(e).__name__}")
        ph, name = e.get("ph"), e.get("name")
        where = (e.get("pid"), e.get("tid"))
        if ph == "M":
            if name == "thread_name" and "autograd" in str((e.get("args") or {}).get("name", "")):
                threads_bwd.add(where)
            continue
        cat = str(e.get("cat", "")).lower()
        if ph in ("s", "f") and cat == "ac2g":
            ts = _num(path, i, e, "ts")
            if (fid := _ident(e.get("id"))) is not None:
                if ph == "s":
                    flows_s[fid] = (ts, where)
                else:
                    flows_f[(e.get("pid"), e.get("tid"), ts)] = fid
            continue
        if ph != "X" or not isinstance(name, str):
            continue
        ts, dur = _num(path, i, e, "ts"), _num(path, i, e, "dur")
        a = e.get("args")
        args: dict[str, Any] = a if isinstance(a, dict) else {}
        if cat in GPU_CATS:
            gpu.append((ts, dur, name, cat, _ident(args.get("correlation")), where))
        elif cat in LAUNCH_CATS:
            if (corr := _ident(args.get("correlation"))) is not None:
                launches[corr] = (ts, where)
        elif cat in CPU_CATS and keep_cpu(cat, name):
            cpu.append(CpuEvent(i, ts, dur, name, where, args))
    events = []
    for ts, dur, name, cat, corr, where in gpu:
        if corr is None:
            corr = flows_f.get((where[0], where[1], ts))
        launch = launches.get(corr) or flows_s.get(corr) if corr is not None else None
        events.append(GpuEvent(ts, dur, name, cat, launch))
    return TraceIndex(path, _header_int(path, info, "rank"), _header_int(path, info, "world_size"), off_us,
                      frozenset(threads_bwd), tuple(cpu), tuple(events))


def innermost(spans: Sequence[tuple[float, float]], times: Sequence[float]) -> list[int]:
    """For each of *times*, the index in *spans* (start, end) of the innermost span that holds it
    (start <= t <= end): the one that starts last; of those starting together the shortest; of
    equal spans the last in *spans*. -1 where none does. One sweep over both, sorted:
    O((n + q) log(n + q)) where walking back from the last start is O(n q)."""
    order = sorted(range(len(spans)), key=lambda k: (spans[k][0], -spans[k][1]))
    out = [-1] * len(times)
    open_: list[int] = []                  # spans started so far, in order; those ended are popped lazily
    j = 0
    for q in sorted(range(len(times)), key=times.__getitem__):
        t = times[q]
        while j < len(order) and spans[order[j]][0] <= t:
            open_.append(order[j])
            j += 1
        # times only grow, so a span that ended before t holds no later time either
        while open_ and spans[open_[-1]][1] < t:
            open_.pop()
        if open_:
            out[q] = open_[-1]
    return out


def _is_mark(cat: str, name: str) -> bool:
    return bool(_STEP.match(name)) or name.startswith((*BACKWARD_PREFIXES, OPTIMIZER_PREFIX, ZERO_GRAD_PREFIX))


def read_rank(path: Path) -> RankEvents:
    """Reads and indexes one rank's trace file (``index_events``): its steps, and its GPU events
    with their launch's context."""
    ix = index_events(path, _is_mark)
    off_us = ix.off_us
    steps: dict[int, tuple[float, float]] = {}
    marks: dict[tuple[Any, Any, str], list[tuple[float, float]]] = {}
    for c in ix.cpu:
        ts, dur = c.ts_us, c.dur_us
        m = _STEP.match(c.name)
        if m:
            n = int(m.group(1))
            if n in steps:
                raise ConfigError(f"{path}: traceEvents[{c.index}]: ProfilerStep#{n} is recorded twice")
            steps[n] = (ts + off_us, ts + dur + off_us)
        elif c.name.startswith(BACKWARD_PREFIXES):
            marks.setdefault((*c.thread, "backward"), []).append((ts, ts + dur))
        elif c.name.startswith(OPTIMIZER_PREFIX):
            marks.setdefault((*c.thread, "optimizer"), []).append((ts, ts + dur))
        elif c.name.startswith(ZERO_GRAD_PREFIX):
            marks.setdefault((*c.thread, "zero_grad"), []).append((ts, ts + dur))
    index = {k: _Intervals(v) for k, v in marks.items()}
    kernels = []
    for g in ix.gpu:
        if g.launch is None:
            kernels.append(Kernel(g.ts_us + off_us, g.dur_us, g.name, math.nan, "?"))
            continue
        lts, th = g.launch
        ctx = ""
        for label in ("optimizer", "zero_grad", "backward"):
            iv = index.get((*th, label))
            if iv is not None and lts in iv:
                ctx = label
                break
        if not ctx and th in ix.autograd_threads:
            ctx = "backward"
        kernels.append(Kernel(g.ts_us + off_us, g.dur_us, g.name, lts + off_us, ctx))
    kernels.sort(key=lambda k: (k.ts_us, k.launch_us))
    return RankEvents(path, ix.rank, ix.world_size, steps, tuple(kernels))
