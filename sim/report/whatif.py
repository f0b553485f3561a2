"""``whatif``'s views of a measured trace's what-if: its JSON object and its short report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .text import top

if TYPE_CHECKING:                 # type names only
    from ..traces import WhatIf

__all__ = ["whatif_json", "whatif_text"]


def whatif_json(w: WhatIf) -> dict[str, Any]:
    """``whatif --json``: ``slowdown``, ``by_stage``, ``by_dp_rank``, ``by_optype`` (keyed as in the
    trace), ``steps`` (per step ``measured_s``, ``replayed_s``, ``ideal_s``) and more."""
    return {
        "trace": w.name,
        "slowdown": w.slowdown,
        "by_stage": w.by_stage,
        "by_dp_rank": w.by_dp_rank,
        "by_optype": w.by_optype,
        "by_worker": w.by_worker,
        "steps": {str(int(s)): {"measured_s": float(m), "replayed_s": float(r), "ideal_s": float(i),
                                "slowdown": float(r / i)}
                  for s, m, r, i in zip(w.steps, w.measured_s, w.replayed_s, w.ideal_s)},
        "replay_error_median_pct": w.replay_error_median_pct,
        "skipped_steps": list(w.skipped),
    }


def whatif_text(w: WhatIf, files: Sequence[str] = ()) -> str:
    """The what-if analysis as a short report: step times, S, its attribution, who is to blame."""
    def med(a: np.ndarray) -> float:
        return float(np.median(a))

    lines = [
        f"trace {w.name}: {len(w.steps)} complete steps"
        + (f" ({len(w.skipped)} partial skipped)" if w.skipped else ""),
        f"step time (median): measured {med(w.measured_s):.4f} s, replayed {med(w.replayed_s):.4f} s "
        f"(median |error| {w.replay_error_median_pct:.2f}%), straggler-free {med(w.ideal_s):.4f} s",
        f"slowdown S = mean replayed / mean straggler-free = {w.slowdown:.4f}",
        "attributed slowdown (only these ops at their measured times):",
        f"  by stage:   {top(dict(sorted(w.by_stage.items())), 99)}",
        f"  by dp rank: {top(dict(sorted(w.by_dp_rank.items())), 99)}",
        f"  by op type: {top(w.by_optype, 6)}",
    ]
    if w.by_worker:
        lines.append(f"workers to blame (dp/stage): {top(w.by_worker, 5)}")
    worst = np.argsort(-w.step_slowdown, kind="stable")[:5]
    lines.append("steps to blame: " + ", ".join(f"{int(w.steps[i])} {w.step_slowdown[i]:.3f}" for i in worst))
    lines += [f"wrote {f}" for f in files]
    return "\n".join(lines)
