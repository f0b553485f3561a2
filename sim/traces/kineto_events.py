"""One rank's PyTorch-profiler (Kineto) trace file, read and indexed: its GPU kernels, each with
the CPU context that launched it, and its ``ProfilerStep#N`` windows.

The format is the Chrome-trace JSON that ``torch.profiler`` exports (``prof.export_chrome_trace``
or ``tensorboard_trace_handler``; ``.json`` or ``.json.gz``): a top-level object with
``traceEvents`` and, from PyTorch 1.13, a ``distributedInfo`` header (``rank``, ``world_size``).
Times are microseconds; ``baseTimeNanoseconds`` (newer exports) is added when present so that
ranks share one clock. A GPU event (``cat`` ``kernel``, ``gpu_memcpy``, ``gpu_memset``; older
exports ``Kernel``, ``Memcpy``, ``Memset``) is linked to the CUDA runtime call that launched it
by ``args.correlation`` (or, lacking it, by its ``ac2g`` flow arrow).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["MAX_TRACE_BYTES", "Kernel", "RankEvents", "read_rank", "read_trace_json"]

# A trace larger than this (on disk, or decompressed) is refused rather than parsed: the JSON
# parser needs about ten times the text in memory. Profile fewer steps to get under it.
MAX_TRACE_BYTES = 512 * 2**20
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "runtime", "cuda_driver"})
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


def read_rank(path: Path) -> RankEvents:
    """Reads and indexes one rank's trace file."""
    doc = read_trace_json(path)
    info = doc.get("distributedInfo")
    base = doc.get("baseTimeNanoseconds")
    off_us = float(base) / 1000.0 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    threads_bwd: set[tuple[Any, Any]] = set()
    steps: dict[int, tuple[float, float]] = {}
    marks: dict[tuple[Any, Any, str], list[tuple[float, float]]] = {}
    launches: dict[Any, tuple[float, tuple[Any, Any]]] = {}
    flows_s: dict[Any, tuple[float, tuple[Any, Any]]] = {}
    flows_f: dict[tuple[Any, Any, float], Any] = {}
    gpu: list[tuple[float, float, str, Any, tuple[Any, Any]]] = []
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
            if ph == "s":
                flows_s[e.get("id")] = (ts, where)
            else:
                flows_f[(e.get("pid"), e.get("tid"), ts)] = e.get("id")
            continue
        if ph != "X" or not isinstance(name, str):
            continue
        ts, dur = _num(path, i, e, "ts"), _num(path, i, e, "dur")
        a = e.get("args")
        args: dict[str, Any] = a if isinstance(a, dict) else {}
        if cat in GPU_CATS:
            gpu.append((ts, dur, name, args.get("correlation"), where))
        elif cat in LAUNCH_CATS:
            if "correlation" in args:
                launches[args["correlation"]] = (ts, where)
        elif cat in ("user_annotation", "cpu_op", "operator"):
            m = _STEP.match(name)
            if m:
                n = int(m.group(1))
                if n in steps:
                    raise ConfigError(f"{path}: traceEvents[{i}]: ProfilerStep#{n} is recorded twice")
                steps[n] = (ts + off_us, ts + dur + off_us)
            elif name.startswith(BACKWARD_PREFIXES):
                marks.setdefault((*where, "backward"), []).append((ts, ts + dur))
            elif name.startswith(OPTIMIZER_PREFIX):
                marks.setdefault((*where, "optimizer"), []).append((ts, ts + dur))
            elif name.startswith(ZERO_GRAD_PREFIX):
                marks.setdefault((*where, "zero_grad"), []).append((ts, ts + dur))
    index = {k: _Intervals(v) for k, v in marks.items()}
    kernels = []
    for ts, dur, name, corr, where in gpu:
        if corr is None:
            corr = flows_f.get((where[0], where[1], ts))
        launch = launches.get(corr) or flows_s.get(corr) if corr is not None else None
        if launch is None:
            kernels.append(Kernel(ts + off_us, dur, name, math.nan, "?"))
            continue
        lts, th = launch
        ctx = ""
        for label in ("optimizer", "zero_grad", "backward"):
            iv = index.get((*th, label))
            if iv is not None and lts in iv:
                ctx = label
                break
        if not ctx and th in threads_bwd:
            ctx = "backward"
        kernels.append(Kernel(ts + off_us, dur, name, lts + off_us, ctx))
    kernels.sort(key=lambda k: (k.ts_us, k.launch_us))
    return RankEvents(path, _header_int(path, info, "rank"), _header_int(path, info, "world_size"), steps,
                      tuple(kernels))
