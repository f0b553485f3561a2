"""Measured per-operation traces: import, replay and what-if straggler analysis.

``load_trace(path, meta)`` reads a trace into a ``Program`` (``sim.traces.program``): a reader per
format (``READERS``, chosen by file suffix; today the parquet traces of the StragglerAnalysis
artifact, ``sim.traces.megatron``) turns files into the neutral ``OpTable``, which the dependency
model turns into the per-worker program. ``what_if(program)`` replays it and attributes the
straggler slowdown (``sim.traces.whatif``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from .megatron import default_meta_path, read_megatron_parquet, read_meta
from .program import Program, build_program
from .replay import Replay, replay
from .table import OpTable, TraceMeta, TraceReader
from .whatif import WhatIf, attribute, typical_s, what_if

__all__ = ["READERS", "OpTable", "Program", "Replay", "TraceMeta", "TraceReader", "WhatIf", "attribute",
           "build_program", "default_meta_path", "load_trace", "read_meta", "replay", "typical_s", "what_if"]

# suffix -> reader; a Kineto/PyTorch-profiler reader (one JSON per rank) would be added here.
READERS: Mapping[str, TraceReader] = {".parquet": read_megatron_parquet}


def load_trace(path: str | Path, meta: str | Path | None = None) -> Program:
    """The program of the trace at *path* with the job layout in *meta* (default: the
    ``meta-<name>.yaml`` beside a ``trace-<name>.parquet``)."""
    p = Path(path)
    reader = READERS.get(p.suffix.lower())
    if reader is None:
        raise ConfigError(f"{p}: unknown trace format {p.suffix!r}; readable: {sorted(READERS)}")
    m = read_meta(Path(meta) if meta is not None else default_meta_path(p))
    return build_program(reader(p, m), m)
