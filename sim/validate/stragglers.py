"""The ``stragglers`` suite: measured straggler traces replayed and analysed against the paper.

For every ``trace-NAME.parquet`` in the folder (with its ``meta-NAME.yaml`` and the paper's what-if
result ``result-NAME.json``; Lin et al., OSDI 2025, artifact ByteDance-Seed/StragglerAnalysis):
the replayed step time against the measured one (median over steps of |replayed / measured - 1|),
and the slowdown S and its attribution to each stage and each dp rank against the paper's
``blocking_slowdown`` and ``blocking_decompose_by_stage`` / ``_by_dp_rank`` (relative error).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..traces import load_trace, what_if

__all__ = ["StragglerCase", "check_straggler_budgets", "format_stragglers", "stragglers_to_json",
           "validate_stragglers"]


@dataclass(frozen=True, slots=True)
class StragglerCase:
    """One trace: replay error and each what-if quantity (S, stage k, dp rank k) ours vs the paper's."""

    trace: str
    steps: int
    replay_median_abs_pct: float
    quantities: tuple[tuple[str, float, float], ...]      # (name, ours, paper's)

    @property
    def worst_rel_pct(self) -> float:
        return max(abs(o / p - 1) * 100 for _, o, p in self.quantities)


def validate_stragglers(data_dir: Path) -> list[StragglerCase]:
    """Every trace of *data_dir* with a paper result beside it, in name order."""
    traces = sorted(data_dir.glob("trace-*.parquet"))
    if not traces:
        raise ConfigError(f"{data_dir}: no trace-*.parquet files (the stragglers suite's traces)")
    out = []
    for path in traces:
        name = path.stem[len("trace-"):]
        res_path = path.with_name(f"result-{name}.json")
        try:
            paper: Mapping[str, Any] = json.loads(res_path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{res_path}: cannot read the paper's result for {path.name}: {e}") from None
        w = what_if(load_trace(path), workers=False)
        q: list[tuple[str, float, float]] = [("S", w.slowdown, float(paper["blocking_slowdown"]))]
        for kind, mine in (("stage", w.by_stage), ("dp_rank", w.by_dp_rank)):
            theirs = paper.get(f"blocking_decompose_by_{kind}") or {}
            for k in sorted(theirs, key=int):
                if k not in mine:
                    raise ConfigError(f"{res_path}: blocking_decompose_by_{kind} has {kind} {k}, "
                                      f"the trace has {sorted(mine)}")
                q.append((f"{kind} {k}", mine[k], float(theirs[k])))
        out.append(StragglerCase(name, len(w.steps), w.replay_error_median_pct, tuple(q)))
    return out


def check_straggler_budgets(cases: list[StragglerCase], budgets: Mapping[str, float]) -> list[str]:
    out = []
    for c in cases:
        if c.replay_median_abs_pct > budgets["replay_median_abs_pct"]:
            out.append(f"{c.trace}: replayed vs measured step median |error| {c.replay_median_abs_pct:.2f}% > "
                       f"{budgets['replay_median_abs_pct']:g}%")
        for name, ours, theirs in c.quantities:
            err = abs(ours / theirs - 1) * 100
            if err > budgets["whatif_rel_pct"]:
                out.append(f"{c.trace}: {name}: {ours:.4f} vs the paper's {theirs:.4f} ({err:.2f}% > "
                           f"{budgets['whatif_rel_pct']:g}%)")
    return out


def stragglers_to_json(cases: list[StragglerCase]) -> dict[str, Any]:
    return {"traces": [{"trace": c.trace, "steps": c.steps, "replay_median_abs_pct": c.replay_median_abs_pct,
                        "whatif": {n: {"ours": o, "paper": p, "rel_err_pct": abs(o / p - 1) * 100}
                                   for n, o, p in c.quantities}} for c in cases]}


def format_stragglers(cases: list[StragglerCase]) -> str:
    lines = []
    for c in cases:
        lines.append(f"{c.trace}: {c.steps} steps, replayed vs measured step median |error| "
                     f"{c.replay_median_abs_pct:.2f}%; worst what-if error {c.worst_rel_pct:.3f}%")
        lines += [f"  {n:<10} ours {o:.4f}  paper {p:.4f}  ({abs(o / p - 1) * 100:.3f}%)" for n, o, p in c.quantities]
    return "\n".join(lines)
