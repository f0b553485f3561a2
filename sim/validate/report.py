"""What ``clustersim validate`` prints: each suite's report as fixed-width text and as JSON.

Views of the suites' records only (STYLE.md P9): nothing here computes an error or a budget.
JSON uses plain types: times in s, bandwidths in GB/s, MFU as fractions, errors in % (MFU errors
in percentage points).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..units import KiB, MiB
from .collectives import BW_MIN_BYTES, LAT_MAX_BYTES, CollectivesReport, Summary
from .compute import ComputeRow, ComputeSummary
from .failures import FailureCase
from .training import TrainingReport, TrainingSummary
from .training_measured import FLOPS_CONVENTIONS

__all__ = ["compute_report_to_json", "failures_report_to_json", "format_compute_report",
           "format_failures", "format_report", "format_training_report", "report_to_json",
           "training_report_to_json"]


def _f(v: float | None, fmt: str) -> str:
    """*v* formatted with *fmt*, "-" for None."""
    return "-" if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    """A percentage with one decimal, "-" for None."""
    return _f(v, ".1f")


# ----------------------------------------------------------------------------- collectives


def _summary_lines(title: str, summaries: Sequence[Summary], with_system: str = "") -> list[str]:
    head = f"{'split':<12}" + (f"{with_system:<18}" if with_system else "")
    lines = [title, head + f"{'runs':>5}{'bw n':>7}{'bw med%':>9}{'bw p90%':>9}"
                           f"{'ramp n':>8}{'ramp med%':>11}{'ramp p90%':>11}"
                           f"{'lat n':>7}{'lat med%':>10}{'lat p90%':>10}"]
    for s in summaries:
        lines.append(f"{s.split:<12}" + (f"{s.system:<18}" if with_system else "")
                     + f"{s.runs:>5}{s.bandwidth.n:>7}{_pct(s.bandwidth.median_abs_pct):>9}"
                     f"{_pct(s.bandwidth.p90_abs_pct):>9}{s.ramp.n:>8}"
                     f"{_pct(s.ramp.median_abs_pct):>11}{_pct(s.ramp.p90_abs_pct):>11}{s.latency.n:>7}"
                     f"{_pct(s.latency.median_abs_pct):>10}{_pct(s.latency.p90_abs_pct):>10}")
    return lines


def format_report(report: CollectivesReport) -> str:
    """A fixed-width text table: per-run rows, per-split, per-family and per-system summaries,
    unsupported runs."""
    width = max([len(r.file) for r in report.runs] + [len(u.file) for u in report.unsupported] + [3])
    lines = [
        "collectives: predicted vs measured nccl-tests runs",
        (f"  bandwidth regime: size >= {BW_MIN_BYTES // MiB} MiB, abs % error of busbw; "
         f"ramp: {LAT_MAX_BYTES // KiB} KiB < size < {BW_MIN_BYTES // MiB} MiB, abs % error of time; "
         f"latency: size <= {LAT_MAX_BYTES // KiB} KiB, abs % error of time"),
        "",
        (f"{'run':<{width}}  {'split':<12}{'system':<18}{'op':<14}{'gpus':>5}{'sharp':>6}"
         f"{'bw n':>6}{'bw med%':>9}{'ramp n':>7}{'ramp med%':>10}{'lat n':>6}{'lat med%':>10}  note"),
    ]
    for r in report.runs:
        note = "ANOMALOUS (not in aggregates)" if r.anomalous else ""
        if r.error is not None:
            note = (note + "; " if note else "") + f"predictor refused: {r.error}"
        lines.append(f"{r.file:<{width}}  {r.split:<12}{r.system:<18}{r.op:<14}{r.gpus:>5}"
                     f"{'yes' if r.sharp else 'no':>6}{len(r.errors_pct('bandwidth')):>6}"
                     f"{_pct(r.bw_median_abs_pct):>9}{len(r.errors_pct('ramp')):>7}"
                     f"{_pct(r.ramp_median_abs_pct):>10}{len(r.errors_pct('latency')):>6}"
                     f"{_pct(r.lat_median_abs_pct):>10}  {note}".rstrip())
    lines.append("")
    lines += _summary_lines("by split (supported, non-anomalous runs; points pooled):", report.splits)
    lines.append("")
    lines += _summary_lines("by split and system family:", report.families, with_system="family")
    lines.append("")
    lines += _summary_lines("by split and system:", report.systems, with_system="system")
    lines.append("")
    lines.append(f"unsupported ({len(report.unsupported)} runs, not scored):")
    for u in report.unsupported:
        lines.append(f"{u.file:<{width}}  {u.split:<12}{u.op:<14}{u.gpus:>5}  {u.reason}")
    return "\n".join(lines)


def report_to_json(report: CollectivesReport) -> dict[str, Any]:
    """The report as plain JSON types (times in s, bandwidths in GB/s, errors in %)."""
    return {
        "suite": "collectives",
        "regimes": {"bandwidth_min_bytes": BW_MIN_BYTES, "latency_max_bytes": LAT_MAX_BYTES,
                    "ramp": "latency_max_bytes < size_bytes < bandwidth_min_bytes, abs % error of time"},
        "runs": [dataclasses.asdict(r) for r in report.runs],
        "splits": [dataclasses.asdict(s) for s in report.splits],
        "families": [dataclasses.asdict(s) for s in report.families],
        "systems": [dataclasses.asdict(s) for s in report.systems],
        "unsupported": [dataclasses.asdict(u) for u in report.unsupported],
    }


# ----------------------------------------------------------------------------- training

def format_training_report(report: TrainingReport) -> str:
    """Fixed-width text: per-run rows, per-split and per-family summaries, unsupported, errors."""
    width = max([len(r.id) for r in report.runs] + [len(u.id) for u in report.unsupported] + [3])
    lines = [
        "training: predicted vs measured step time of published training runs",
        ("  step error: |pred - meas| / meas in %; MFU: PaLM model FLOPs / (step x chips x dense "
         "BF16 peak), FP8 runs included; MFU error in percentage points"),
        ("  from: where the measured step comes from (step | tokens: batch x seq / tokens/s | "
         "tflops, mfu: the source's FLOP count, see flops_convention in --json)"),
        "",
        (f"{'run':<{width}}  {'split':<12}{'family':<7}{'framework':<14}{'chips':>6} {'from':<7}{'meas s':>10}"
         f"{'pred s':>10}{'err%':>8}{'meas MFU%':>10}{'pred MFU%':>10}  note"),
    ]
    for r in report.runs:
        note = f"predictor refused: {r.error}" if r.error is not None else ""
        if (r.predicted_model_flops_per_step is not None
                and abs(r.predicted_model_flops_per_step / r.model_flops_per_step - 1) > 0.01):
            note = (f"predictor's model FLOPs differ by "
                    f"{(r.predicted_model_flops_per_step / r.model_flops_per_step - 1) * 100:+.1f}%")
        lines.append(f"{r.id:<{width}}  {r.split:<12}{r.family:<7}{r.framework:<14}{r.chips:>6} {r.time_from:<7}"
                     f"{r.measured_step_s:>10.4g}{_f(r.predicted_step_s, '.4g'):>10}"
                     f"{_f(r.step_abs_err_pct, '.1f'):>8}{r.measured_mfu * 100:>10.1f}"
                     f"{_f(None if r.predicted_mfu is None else r.predicted_mfu * 100, '.1f'):>10}"
                     f"  {note}".rstrip())
    head = (f"{'split':<12}{'family':<8}{'framework':<14}{'runs':>5}{'step med%':>11}"
            f"{'step p90%':>11}{'MFU med pp':>12}")
    lines += ["", "by split (predicted runs):", head]
    chip_head = (f"{'split':<12}{'chip':<16}{'precision':<10}{'runs':>5}{'step med%':>11}"
                 f"{'step p90%':>11}{'MFU med pp':>12}")
    for s in (*report.splits, None, *report.families, "stacks", *report.stacks):
        if s is None:
            lines += ["", "by split and family:", head]
            continue
        if s == "stacks":
            lines += ["", "by split, family and framework (software profile):", head]
            continue
        assert isinstance(s, TrainingSummary)
        lines.append(f"{s.split:<12}{s.family:<8}{s.framework:<14}{s.runs:>5}"
                     f"{_f(s.step_median_abs_pct, '.1f'):>11}"
                     f"{_f(s.step_p90_abs_pct, '.1f'):>11}{_f(s.mfu_median_abs_pp, '.1f'):>12}")
    lines += ["", "by split and architecture (chip families above: dense models only):", head]
    for s in report.architectures:
        lines.append(f"{s.split:<12}{s.family:<8}{s.framework:<14}{s.runs:>5}"
                     f"{_f(s.step_median_abs_pct, '.1f'):>11}"
                     f"{_f(s.step_p90_abs_pct, '.1f'):>11}{_f(s.mfu_median_abs_pp, '.1f'):>12}")
    lines += ["", "by split, chip and precision:", chip_head]
    for s in report.chip_precisions:
        lines.append(f"{s.split:<12}{s.family:<16}{s.framework:<10}{s.runs:>5}"
                     f"{_f(s.step_median_abs_pct, '.1f'):>11}"
                     f"{_f(s.step_p90_abs_pct, '.1f'):>11}{_f(s.mfu_median_abs_pp, '.1f'):>12}")
    mem = [s for s in report.splits if s.memory_runs]
    lines += ["", "peak memory per chip (runs whose source publishes it, column peak_memory_GiB):"]
    lines += ([f"{s.split:<12}{s.memory_runs:>5} runs, median |error| {s.memory_median_abs_pct:.1f}%"
               for s in mem] or ["  no run publishes its peak memory"])
    lines += ["", f"unsupported ({len(report.unsupported)} runs, not predicted):"]
    for u in report.unsupported:
        lines.append(f"{u.id:<{width}}  {u.split:<12}{_f(u.chips, 'd'):>6}  {u.reason}")
    lines += ["", f"errors ({len(report.errors)} runs the predictor refused):"]
    for r in report.errors:
        lines.append(f"{r.id:<{width}}  {r.split:<12}{r.chips:>6}  {r.error}")
    return "\n".join(lines)


def training_report_to_json(report: TrainingReport) -> dict[str, Any]:
    """The report as plain JSON types (times in s, MFU as fractions, errors in % and pp)."""
    return {
        "suite": "training",
        "flops_conventions": {c.name: dataclasses.asdict(c) for c in FLOPS_CONVENTIONS.values()},
        "runs": [dataclasses.asdict(r) for r in report.runs],
        "splits": [dataclasses.asdict(s) for s in report.splits],
        "families": [dataclasses.asdict(s) for s in report.families],
        "stacks": [dataclasses.asdict(s) for s in report.stacks],
        "chip_precisions": [{"split": s.split, "chip": s.family, "precision": s.framework,
                             "runs": s.runs, "step_median_abs_pct": s.step_median_abs_pct,
                             "step_p90_abs_pct": s.step_p90_abs_pct,
                             "mfu_median_abs_pp": s.mfu_median_abs_pp}
                            for s in report.chip_precisions],
        "architectures": [{"split": s.split, "architecture": s.family, "runs": s.runs,
                           "step_median_abs_pct": s.step_median_abs_pct,
                           "step_p90_abs_pct": s.step_p90_abs_pct,
                           "mfu_median_abs_pp": s.mfu_median_abs_pp}
                          for s in report.architectures],
        "unsupported": [dataclasses.asdict(u) for u in report.unsupported],
        "errors": [{"id": r.id, "split": r.split, "error": r.error} for r in report.errors],
    }


# ----------------------------------------------------------------------------- compute and failures

def format_compute_report(rows: list[ComputeRow], summaries: list[ComputeSummary],
                          title: str = "") -> str:
    """Fixed-width text: one row per measured kernel, then the per-GPU, per-group summaries."""
    width = max(len(r.label) for r in rows)
    sw = max([6] + [len(r.split) + 1 for r in rows])
    lines = [title or ("compute: predicted vs measured kernel times (Hopper constants fitted on the H100 "
                       "tables, Blackwell on the B200 fit sources; other rows are a test)"), "",
             f"{'gpu':<16}{'split':<{sw}}{'kind':<10}{'kernel':<{width}}  {'meas us':>10}{'pred us':>10}{'err%':>7}"]
    for r in rows:
        lines.append(f"{r.gpu:<16}{r.split:<{sw}}{r.kind:<10}{r.label:<{width}}  "
                     f"{r.measured_s * 1e6:>10.1f}{r.predicted_s * 1e6:>10.1f}{r.err_pct:>7.1f}")
    lines += ["", f"{'gpu':<16}{'split':<{sw}}{'group':<18}{'rows':>5}{'median%':>9}{'p90%':>8}"]
    for s in summaries:
        lines.append(f"{s.gpu:<16}{s.split:<{sw}}{s.group:<18}{s.rows:>5}"
                     f"{s.median_abs_pct or 0:>9.1f}{s.p90_abs_pct or 0:>8.1f}")
    return "\n".join(lines)


def compute_report_to_json(rows: list[ComputeRow], summaries: list[ComputeSummary]) -> dict[str, Any]:
    """The compute suite as plain JSON types."""
    return {"suite": "compute", "rows": [dataclasses.asdict(r) for r in rows],
            "summaries": [dataclasses.asdict(s) for s in summaries]}


def failures_report_to_json(cases: list[FailureCase]) -> dict[str, Any]:
    """The failures suite as plain JSON types."""
    return {"suite": "failures", "cases": [dataclasses.asdict(c) for c in cases]}


def format_failures(cases: list[FailureCase], relative_max_pct: float) -> str:
    """Fixed-width text: one row per case, predicted vs published, and whether it passes; per
    split, how many budgeted cases are within their tolerance (*relative_max_pct*: the budget's
    ``relative_err_max_pct``)."""
    lines = ["failures: predicted (Monte Carlo mean; 5-95% over the histories and fleets) vs published",
             (f"{'case':<24}{'split':<13}{'metric':<26}{'measured':>10}{'predicted':>11}  interval"
              "          result")]
    for c in cases:
        if c.comparison == "relative":
            res = f"{c.error_pct:.1f}% off"
        elif c.comparison == "within_band":
            res = "in band" if c.low <= c.measured <= c.high else "OUTSIDE band"
        elif c.comparison == "at_least":
            res = "meets bound" if c.predicted >= c.measured else "BELOW bound"
        else:
            res = "meets bound" if c.predicted <= c.measured else "ABOVE bound"
        res += "" if c.budgeted else " (reported, not budgeted)"
        lines.append(f"{c.case:<24}{c.split:<13}{c.metric:<26}{c.measured:>10.4g}{c.predicted:>11.4g}"
                     f"  [{c.low:.4g}, {c.high:.4g}]  {res}")
    for split in ("calibration", "test"):
        held = [c for c in cases if c.split == split and c.budgeted]
        if held:
            ok = sum(c.ok(relative_max_pct) for c in held)
            lines.append(f"{split}: {ok} of {len(held)} budgeted cases within their tolerance "
                         f"(relative cases within {relative_max_pct:g}%)")
    return "\n".join(lines)
