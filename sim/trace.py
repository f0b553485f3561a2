"""Chrome / Perfetto trace of a simulated step (load the file in ui.perfetto.dev or chrome://tracing)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .engine import Interval

if TYPE_CHECKING:
    from .traces import Program, Replay

__all__ = ["write_trace", "write_whatif_trace"]


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


def write_whatif_trace(path: str | Path, prog: Program, timelines: Mapping[str, Replay], step_index: int,
                       name: str) -> None:
    """One step of a measured trace as several timelines side by side (e.g. ``measured``, ``replayed``,
    ``straggler-free``): one process per (timeline, stage), one thread per (dp rank, op stream)."""
    events: list[dict[str, object]] = []
    K = prog.n_ops
    for t, (label, rep) in enumerate(timelines.items()):
        for s in range(prog.meta.pp):
            pid = t * prog.meta.pp + s
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{label} stage {s}"}})
        for k in range(K):
            optype = str(prog.optype[k])
            stream = "compute" if optype.endswith("compute") else optype
            pid = t * prog.meta.pp + int(prog.stage[k])
            for d in range(prog.n_dp):
                st, en = float(rep.start_s[k, step_index, d]), float(rep.end_s[k, step_index, d])
                events.append({"name": f"{optype} #{int(prog.seq[k])}", "cat": optype, "ph": "X", "pid": pid,
                               "tid": f"dp {d} rank {int(prog.rank[prog.stage[k], d])} {stream}",
                               "ts": st * 1e6, "dur": (en - st) * 1e6})
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms",
                                      "otherData": {"trace": name, "step": int(prog.steps[step_index])}}))
