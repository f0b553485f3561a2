"""Chrome / Perfetto trace of a simulated step (load the file in ui.perfetto.dev or chrome://tracing)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .engine import Interval

__all__ = ["write_trace"]


def write_trace(path: str | Path, intervals: Sequence[Interval], name: str) -> None:
    """One process per pipeline stage, one thread per activity kind; times in microseconds."""
    events = [{"name": "process_name", "ph": "M", "pid": s, "args": {"name": f"stage {s}"}}
              for s in sorted({i.stage for i in intervals})]
    for i in intervals:
        events.append({"name": i.label, "cat": i.kind, "ph": "X", "pid": i.stage,
                       "tid": f"rank {i.rank} {i.kind}", "ts": i.start_s * 1e6,
                       "dur": (i.end_s - i.start_s) * 1e6})
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms",
                                      "otherData": {"scenario": name}}))
