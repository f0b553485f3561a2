"""Measured points that figures overlay on predictions: the published training runs of one model on
one topology, as (chips, tokens/s per chip).

``clustersim sweep --plot`` over ``cluster.chips`` draws them on its scaling curve. The gathering
lives here, at the end of the data flow, so that ``sim.plots`` only draws what it is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .data import default_data_dir
from .training_map import map_runs

__all__ = ["measured_points", "sweep_overlay"]


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def measured_points(model: str, topology: str, data_dir: Path | None = None) -> list[tuple[int, float]]:
    """(chips, tokens/s per chip) of published runs of *model* on *topology* (validation/training),
    sorted; *model* matches a run's model name ignoring case and punctuation."""
    out = []
    for m in map_runs((data_dir or default_data_dir()) / "training"):
        if not m.supported or m.scenario is None or m.measured is None or m.topology != topology:
            continue
        if _norm(str(m.scenario["model"].get("name", ""))) != _norm(model):
            continue
        t = m.scenario["training"]
        chips = m.scenario["cluster"]["chips"]
        out.append((chips, t["global_batch"] * t["seq_len"] / m.measured.step_time_s / chips))
    return sorted(out)


def sweep_overlay(rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
                  data_dir: Path | None = None) -> list[tuple[int, float]]:
    """The measured points for the plot of a sweep's *rows*: for a sweep over ``cluster.chips``, those
    of the model and topology of its first feasible row; none for other sweeps (their plot is a
    step-time breakdown) or when no row is feasible."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if "cluster.chips" not in keys or not ok:
        return []
    return measured_points(str(ok[0].get("model", ok[0].get("scenario", ""))), str(ok[0]["topology"]),
                           data_dir)
