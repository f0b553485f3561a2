"""Figures (matplotlib, Agg backend, imported here only and lazily): scaling curves and step-time
breakdowns of sweeps, GPU-vs-TPU plans, predicted-vs-measured scatter of validation suites.

Every function takes result records (rows, reports) and a file name (.png, .svg or .pdf) and
returns the matplotlib Figure it saved, so tests can read the axes back. It draws only what it is
given: measured points to overlay come from the caller (``sim.validate.sweep_overlay``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_sweep", "plot_scaling", "plot_breakdown", "plot_plan", "plot_validation", "plot_straggler_heatmap"]

_BREAKDOWN = ("compute", "exposed_comm", "pipeline_bubble", "straggler_wait", "optimizer", "other")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ok(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def plot_sweep(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], path: Path,
               weak: bool = False, measured: Sequence[tuple[float, float]] = (),
               measured_label: str = "measured") -> Any:
    """A scaling curve for a sweep over ``cluster.chips`` (with *measured* overlaid), else a
    step-time breakdown."""
    if "cluster.chips" in keys:
        return plot_scaling(rows, keys, path, weak, measured, measured_label)
    return plot_breakdown(rows, keys, path)


def plot_scaling(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], path: Path,
                 weak: bool = False, measured: Sequence[tuple[float, float]] = (),
                 measured_label: str = "measured") -> Any:
    """Tokens/s per chip and scaling efficiency against chips (log2 axis), one line per value of
    the other swept keys; *measured* (chips, tokens/s per chip) points, e.g. published runs of the
    same model and topology, overlaid as crosses labelled *measured_label*."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    others = [k for k in keys if k != "cluster.chips"]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in _ok(rows):
        label = ", ".join(f"{k.split('.')[-1]}={r.get(k)}" for k in others) or "predicted"
        groups.setdefault(label, []).append(r)
    for label, rs in groups.items():
        rs = sorted(rs, key=lambda r: float(r["chips"]))
        x = [float(r["chips"]) for r in rs]
        a1.plot(x, [float(r["tokens_per_s_per_chip"]) for r in rs], marker="o", label=label)
        a2.plot(x, [float(r["scaling_efficiency"]) for r in rs], marker="o", label=label)
    ok = _ok(rows)
    if measured:
        a1.scatter([p[0] for p in measured], [p[1] for p in measured], marker="x", color="black",
                   zorder=5, label=measured_label)
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("chips")
        ax.grid(True, alpha=0.3)
    a1.set_ylabel("tokens/s per chip")
    a2.set_ylabel(f"{'weak' if weak else 'strong'} scaling efficiency (1 = linear)")
    a2.set_ylim(0, 1.1)
    a1.legend(fontsize=8)
    title = f"{ok[0]['scenario']}: {ok[0]['chip']}" if ok else "no feasible point"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return fig


def plot_breakdown(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], path: Path) -> Any:
    """Step time as stacked bars (compute, exposed communication, bubble, ...) across the sweep."""
    plt = _plt()
    ok = _ok(rows)
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(ok) + 2), 4.2))
    labels = ["\n".join(f"{k.split('.')[-1]}={r.get(k)}" for k in keys) for r in ok]
    bottom = [0.0] * len(ok)
    for part in _BREAKDOWN:
        vals = [float(r.get(f"breakdown_s.{part}", 0) or 0) for r in ok]
        if any(vals):
            ax.bar(range(len(ok)), vals, bottom=bottom, label=part.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(ok)), labels, fontsize=7)
    ax.set_ylabel("step time (s)")
    ax.set_xlabel(", ".join(keys))
    ax.legend(fontsize=8)
    ax.set_title("step-time breakdown")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return fig


def plot_plan(options: Sequence[Mapping[str, Any]], path: Path) -> Any:
    """Time to train and total cost of each topology's chosen cluster, side by side."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    names = [f"{o['topology']}\n{o['chips']} chips" for o in options]
    a1.bar(names, [o["days"] for o in options], color="tab:blue")
    a1.set_ylabel("time to train (days)")
    # A topology without a price has no cost bar (NaN draws nothing)
    a2.bar(names, [o["cost_usd"] / 1e6 if "cost_usd" in o else math.nan for o in options],
           color="tab:orange")
    a2.set_ylabel("cost (million USD)")
    for ax in (a1, a2):
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("capacity plan: GPU vs TPU")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return fig


def plot_validation(points: Sequence[tuple[float, float, str]], quantity: str, unit: str,
                    path: Path, title: str) -> Any:
    """Predicted against measured (log-log) with the y = x line and a +-10% band; *points* are
    (measured, predicted, group) and each group gets its own marker colour."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 5.5))
    groups = sorted({g for _, _, g in points})
    for g in groups:
        xs = [m for m, _, gg in points if gg == g]
        ys = [p for _, p, gg in points if gg == g]
        ax.scatter(xs, ys, s=12, label=g, alpha=0.8)
    vals = [v for m, p, _ in points for v in (m, p) if v > 0]
    lo, hi = (min(vals) * 0.8, max(vals) * 1.25) if vals else (1e-3, 1.0)
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [0.9 * lo, 0.9 * hi], [1.1 * lo, 1.1 * hi], color="gray", alpha=0.2,
                    label="+-10%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured {quantity} ({unit})")
    ax.set_ylabel(f"predicted {quantity} ({unit})")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return fig


def plot_straggler_heatmap(workers: Sequence[str], steps: Sequence[int], slowdown: Sequence[Sequence[float]],
                           path: Path, title: str) -> Any:
    """Worker x step heatmap of the attributed slowdown (*slowdown*[worker][step]: the step's
    slowdown with only that worker's ops at their measured times)."""
    plt = _plt()
    import numpy as np

    data = np.asarray(slowdown, dtype=float)
    fig, ax = plt.subplots(figsize=(min(4 + 0.25 * len(steps), 16), min(2 + 0.3 * len(workers), 12)))
    im = ax.imshow(data, aspect="auto", cmap="Reds", interpolation="nearest")
    ax.set_yticks(range(len(workers)))
    ax.set_yticklabels(workers, fontsize=7)
    ax.set_xticks(range(len(steps)))
    ax.set_xticklabels([str(s) for s in steps], fontsize=6, rotation=90)
    ax.set_xlabel("step")
    ax.set_ylabel("worker (dp rank/stage)")
    fig.colorbar(im, ax=ax, label="attributed slowdown")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return fig
