"""Measured per-operation traces: import, replay and what-if straggler analysis.

``load_trace(path, meta)`` reads a trace into a ``Program`` (``sim.traces.program``): a reader per
format (``READERS``, chosen by what the path is: the parquet traces of the StragglerAnalysis
artifact, ``sim.traces.megatron``; PyTorch-profiler / Kineto JSON, one file per rank, a folder
or one file, ``sim.traces.kineto``) turns files into the neutral ``OpTable``, which a dependency
model turns into the per-worker program (Megatron's 1F1B, ``sim.traces.dependencies``; a
data-parallel step with overlapped gradient sync, ``sim.traces.dataparallel``). ``what_if(program)``
replays it and attributes the straggler slowdown (``sim.traces.whatif``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from .dataparallel import build_dp_program
from .kineto import is_kineto, kineto_files, kineto_meta, read_kineto
from .megatron import default_meta_path, read_megatron_parquet, read_meta
from .program import Program, build_program
from .replay import Replay, replay
from .table import OpTable, TraceMeta, TraceReader
from .whatif import WhatIf, attribute, typical_s, what_if

__all__ = ["READERS", "OpTable", "Program", "Replay", "TraceMeta", "TraceReader", "WhatIf", "attribute",
           "build_program", "default_meta_path", "load_trace", "read_meta", "replay", "typical_s", "what_if"]

# format (file suffix, or "folder") -> reader; Kineto traces go to the data-parallel model.
READERS: Mapping[str, TraceReader] = {".parquet": read_megatron_parquet, ".json": read_kineto,
                                      ".json.gz": read_kineto, "folder": read_kineto}


def load_trace(path: str | Path, meta: str | Path | None = None) -> Program:
    """The program of the trace at *path* with the job layout in *meta* (default: the
    ``meta-<name>.yaml`` beside a ``trace-<name>.parquet``; for Kineto traces, pure data parallel
    over the ranks read)."""
    p = Path(path)
    if is_kineto(p):
        km = read_meta(Path(meta)) if meta is not None else None
        table = read_kineto(p, km)
        return build_dp_program(table, kineto_meta(p, len(kineto_files(p)), km))
    reader = READERS.get(p.suffix.lower())
    if reader is None:
        raise ConfigError(f"{p}: unknown trace format {p.suffix!r}; readable: {sorted(READERS)}")
    m = read_meta(Path(meta) if meta is not None else default_meta_path(p))
    return build_program(reader(p, m), m)
