"""Compute validation suite: every row of the measured kernel tables, predicted vs measured.

``clustersim validate --suite compute`` (issue 10). Data: ``DIR/compute/<gpu>/`` as measured for
this project (``validation/compute/README.md``). The kernel constants are fitted on the H100
tables only (``sim.compute.tables``), so the H100 rows are the fit and the H200 rows a test of a
chip the fit never saw. Each row is predicted as the table timed it: one isolated call (the GEMM
per-call latency included), attention forward or forward+backward, memory-bound ops at their
class's bandwidth, the AdamW step per implementation.

Budgets (``[compute]`` in ``budgets.toml``), on the H200 test tables: median |time error| of GEMMs
of at least ``GEMM_MIN_S`` and of attention rows.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import calibration as cal
from .compute.kernels import attention_time_s, gemm_time_s, memory_time_s
from .compute.tables import GPU_FOLDERS, KernelCase, load_cases
from .errors import ConfigError
from .hardware import CATALOGUE, Chip

__all__ = ["ComputeRow", "ComputeSummary", "validate_compute", "format_compute_report",
           "compute_report_to_json", "check_compute_budgets", "COMPUTE_BUDGET_KEYS",
           "predict_case", "GEMM_MIN_S"]

GEMM_MIN_S = 50e-6            # the target counts GEMMs of at least 50 us
FIT_FOLDER = "h100-sxm-80gb"  # the constants are fitted here; every other folder is a test
COMPUTE_BUDGET_KEYS = frozenset({"gemm_median_abs_pct", "attention_median_abs_pct"})


@dataclass(frozen=True, slots=True)
class ComputeRow:
    """One measured kernel and its prediction (seconds; error in %)."""

    gpu: str
    split: str                     # "fit" (H100) | "test" (any other GPU)
    table: str
    kind: str
    label: str
    measured_s: float
    predicted_s: float
    err_pct: float


@dataclass(frozen=True, slots=True)
class ComputeSummary:
    gpu: str
    split: str
    group: str                     # gemm>=50us | gemm-fp8>=50us | attention | memory | optimizer
    rows: int
    median_abs_pct: float | None
    p90_abs_pct: float | None


def predict_case(c: KernelCase, chip: Chip) -> float:
    """The model's time for one measured row on *chip*, as the table timed it."""
    assert chip.sms is not None, chip.name
    if c.kind == "gemm":
        fp8 = c.key == "fp8"
        peak = chip.fp8_flops if fp8 and chip.fp8_flops else chip.bf16_flops
        return gemm_time_s(c.m, c.n, c.k, 1.0 if fp8 else 2.0, peak, chip.sms, chip.hbm_Bps,
                           cal.GEMM_HOPPER[c.key], c.batch, isolated=True)
    if c.kind == "attention":
        assert c.attention is not None
        family, passname = c.key.split(" ")
        fwd = attention_time_s(c.attention, False, cal.ATTENTION_HOPPER[(family, "fwd")],
                               chip.bf16_flops, chip.sms, chip.hbm_Bps)
        if passname == "fwd":
            return fwd
        return fwd + attention_time_s(c.attention, True, cal.ATTENTION_HOPPER[(family, "bwd")],
                                      chip.bf16_flops, chip.sms, chip.hbm_Bps)
    if c.kind == "memory":
        if c.key == "rmsnorm_fwd+bwd":
            # 2 of the 5 tensors in the forward, 3 in the backward (validation/compute/README.md)
            return (memory_time_s(0.4 * c.nbytes, chip.hbm_Bps, cal.MEMORY_FRACTION["rmsnorm_fwd"])
                    + memory_time_s(0.6 * c.nbytes, chip.hbm_Bps, cal.MEMORY_FRACTION["rmsnorm_bwd"]))
        return memory_time_s(c.nbytes, chip.hbm_Bps, cal.MEMORY_FRACTION[c.key])
    assert c.kind == "optimizer", c.kind
    return memory_time_s(c.nbytes, chip.hbm_Bps, cal.OPTIMIZER_FRACTION[c.key])


def _group(c: KernelCase) -> str:
    if c.kind == "gemm":
        if c.time_s < GEMM_MIN_S:
            return "gemm<50us"
        return "gemm-fp8>=50us" if c.key == "fp8" else "gemm-bf16>=50us"
    return c.kind


def validate_compute(data_dir: Path) -> tuple[list[ComputeRow], list[ComputeSummary]]:
    """Predict every row of every GPU folder in *data_dir* (``DIR/compute``)."""
    data_dir = Path(data_dir)
    folders = sorted(p for p in data_dir.iterdir() if p.is_dir()) if data_dir.is_dir() else []
    if not folders:
        raise ConfigError(f"{data_dir}: no kernel-table folders (one per GPU, e.g. {FIT_FOLDER}/)")
    rows: list[ComputeRow] = []
    groups: dict[tuple[str, str, str], list[float]] = {}
    for folder in folders:
        if folder.name not in GPU_FOLDERS:
            raise ConfigError(f"{folder}: unknown GPU folder; known: {', '.join(sorted(GPU_FOLDERS))}")
        chip = CATALOGUE[GPU_FOLDERS[folder.name]]
        split = "fit" if folder.name == FIT_FOLDER else "test"
        cases = load_cases(folder)
        if not cases:
            raise ConfigError(f"{folder}: no kernel table in it (attention.csv, gemm_*.csv, ...)")
        for c in cases:
            pred = predict_case(c, chip)
            err = abs(pred / c.time_s - 1) * 100
            rows.append(ComputeRow(folder.name, split, c.table, c.kind, c.label, c.time_s, pred, err))
            groups.setdefault((folder.name, split, _group(c)), []).append(err)
            if c.kind == "gemm" and c.time_s >= GEMM_MIN_S:
                groups.setdefault((folder.name, split, "gemm>=50us"), []).append(err)
    summaries = [ComputeSummary(g, s, grp, len(v), statistics.median(v), _p90(v))
                 for (g, s, grp), v in sorted(groups.items())]
    return rows, summaries


def _p90(values: list[float]) -> float:
    xs = sorted(values)
    pos = (len(xs) - 1) * 0.9
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def check_compute_budgets(summaries: list[ComputeSummary], table: Mapping[str, float]) -> list[str]:
    """Violations on the test GPUs: the GEMM (>= 50 us) and attention medians."""
    out: list[str] = []
    tests = [s for s in summaries if s.split == "test"]
    if not tests:
        return ["compute: no test-GPU tables; cannot check budgets"]
    for key, group in (("gemm_median_abs_pct", "gemm>=50us"), ("attention_median_abs_pct", "attention")):
        for gpu in sorted({s.gpu for s in tests}):
            if not any(s.gpu == gpu and s.group == group for s in tests):
                out.append(f"compute: {gpu} has no {group} rows; cannot check {key}")
        for s in tests:
            if s.group == group and s.median_abs_pct is not None and s.median_abs_pct > table[key]:
                out.append(f"compute: {s.gpu} {group} median abs error {s.median_abs_pct:.2f}% > "
                           f"budget {key} = {table[key]:g}% ({s.rows} rows)")
    return out


def format_compute_report(rows: list[ComputeRow], summaries: list[ComputeSummary]) -> str:
    width = max(len(r.label) for r in rows)
    lines = ["compute: predicted vs measured kernel times (constants fitted on the H100 tables; "
             "other GPUs are a test)", "",
             f"{'gpu':<16}{'split':<6}{'kind':<10}{'kernel':<{width}}  {'meas us':>10}{'pred us':>10}{'err%':>7}"]
    for r in rows:
        lines.append(f"{r.gpu:<16}{r.split:<6}{r.kind:<10}{r.label:<{width}}  "
                     f"{r.measured_s * 1e6:>10.1f}{r.predicted_s * 1e6:>10.1f}{r.err_pct:>7.1f}")
    lines += ["", f"{'gpu':<16}{'split':<6}{'group':<18}{'rows':>5}{'median%':>9}{'p90%':>8}"]
    for s in summaries:
        lines.append(f"{s.gpu:<16}{s.split:<6}{s.group:<18}{s.rows:>5}"
                     f"{s.median_abs_pct or 0:>9.1f}{s.p90_abs_pct or 0:>8.1f}")
    return "\n".join(lines)


def compute_report_to_json(rows: list[ComputeRow], summaries: list[ComputeSummary]) -> dict[str, Any]:
    return {"suite": "compute", "rows": [dataclasses.asdict(r) for r in rows],
            "summaries": [dataclasses.asdict(s) for s in summaries]}
