"""Measured per-operation traces: import, replay and what-if straggler analysis.

``load_trace(path, meta)`` reads a trace into a ``Program`` (``sim.traces.program``): a reader,
chosen by what the path is (PyTorch-profiler / Kineto JSON, one file per rank, a folder or one
file: ``is_kineto``, read by ``sim.traces.kineto``; else by file suffix, ``READERS``: the parquet
traces of the StragglerAnalysis artifact, ``sim.traces.megatron``), turns files into the neutral
``OpTable``, which a dependency model turns into the per-worker program (Megatron's 1F1B, ``sim.traces.dependencies``; a
data-parallel step with overlapped gradient sync, ``sim.traces.dataparallel``). ``what_if(program)``
replays it and attributes the straggler slowdown (``sim.traces.whatif``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from .dataparallel import build_dp_program
from .kineto import KINETO_SUFFIXES, is_kineto, kineto_files, read_kineto
from .megatron import default_meta_path, read_megatron_parquet, read_meta
from .program import Program, build_program
from .replay import Replay, replay
from .table import OpTable, TraceMeta, TraceReader
from .whatif import WhatIf, attribute, typical_s, what_if

__all__ = ["READERS", "OpTable", "Program", "Replay", "TraceMeta", "TraceReader", "WhatIf", "attribute",
           "build_program", "default_meta_path", "is_kineto", "kineto_files", "load_trace", "read_meta", "replay",
           "typical_s", "what_if"]

# file suffix -> reader of the traces that the 1F1B model replays (Kineto traces, ``is_kineto``,
# are read first and go to the data-parallel model).
READERS: Mapping[str, TraceReader] = {".parquet": read_megatron_parquet}


def load_trace(path: str | Path, meta: str | Path | None = None) -> Program:
    """The program of the trace at *path* with the job layout in *meta* (default: the
    ``meta-<name>.yaml`` beside a ``trace-<name>.parquet``; for Kineto traces, pure data parallel
    over the ranks read)."""
    p = Path(path)
    if is_kineto(p):
        table, layout = read_kineto(p, read_meta(Path(meta)) if meta is not None else None)
        return build_dp_program(table, layout)
    reader = READERS.get(p.suffix.lower())
    if reader is None:
        raise ConfigError(f"{p}: unknown trace format {p.suffix!r}; readable: {sorted(READERS)}, or Kineto "
                          f"traces ({', '.join(KINETO_SUFFIXES)} files, or a folder of them)")
    m = read_meta(Path(meta) if meta is not None else default_meta_path(p))
    return build_program(reader(p, m), m)
