"""``clustersim validate [--suite S] [--data DIR] [--json] [--plot FILE]`` (DESIGN.md).

Runs one suite against the data in ``DIR/<suite>/``, prints its report (text or one JSON object)
and the budget check; exit status 1 when the suite exceeds a budget of ``DIR/budgets.toml``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import PLOT_SUFFIXES, check_output_path
from ..errors import ConfigError
from .data import default_data_dir

__all__ = ["BUDGETS_FILE", "SUITES", "add_parser", "run_cli"]

BUDGETS_FILE = "budgets.toml"

Budgets = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One suite's result, ready to print: its budget violations, its report as JSON or text, what
    the budgets apply to, and the (measured, predicted, label) points of ``--plot``."""

    violations: list[str]
    to_json: Callable[[], dict[str, Any]]
    to_text: Callable[[], str]
    scope: str
    points: list[tuple[float, float, str]]
    quantity: str = ""                 # the plot's axis quantity, unit and title
    unit: str = ""
    title: str = ""


# PERF: each suite imports what it needs when it runs (every command builds this parser).


def validate_training(data_dir: Path, predict: Any, mapped: Any = None, workers: int = 1) -> Any:
    """``sim.validate.training.validate_training``, imported when the training suite runs (a name
    of this module, which tests/conftest.py answers from the session's report)."""
    from .training import validate_training as play

    return play(data_dir, predict, mapped, workers)


def _collectives(data_dir: Path, budgets: Budgets) -> _Outcome:
    from .budgets import check_budgets
    from .collectives import validate_collectives
    from .predictors import CasePredictor  # lazily: the network model only for this suite
    from .report import format_report, report_to_json

    report = validate_collectives(data_dir, CasePredictor())
    points = [(p.measured_busbw_GBps, p.predicted_busbw_GBps, f"{r.split}")
              for r in report.runs if not r.anomalous for p in r.points
              if p.regime == "bandwidth" and p.measured_busbw_GBps > 0]
    return _Outcome(check_budgets(report, budgets), lambda: report_to_json(report),
                    lambda: format_report(report), "test split", points,
                    "bus bandwidth (>= 64 MiB)", "GB/s", "collectives: nccl-tests runs")


def _training(data_dir: Path, budgets: Budgets) -> _Outcome:
    from ..progress import available_cores
    from .budgets import check_budgets
    from .predictors import TrainingPredictor  # lazily: the step model only for this suite
    from .report import format_training_report, training_report_to_json

    report = validate_training(data_dir, TrainingPredictor(), workers=available_cores())
    points = [(r.measured_step_s, r.predicted_step_s, f"{r.family} {r.split}")
              for r in report.runs if r.predicted_step_s is not None]
    return _Outcome(check_budgets(report, budgets), lambda: training_report_to_json(report),
                    lambda: format_training_report(report), "test split, per family", points,
                    "step time", "s", "training: published runs")


def _failures(data_dir: Path, budgets: Budgets) -> _Outcome:
    from .budgets import check_failure_budgets
    from .failures import validate_failures
    from .report import failures_report_to_json, format_failures

    cases = validate_failures(data_dir)
    return _Outcome(check_failure_budgets(cases, budgets["failures"]),
                    lambda: failures_report_to_json(cases),
                    lambda: format_failures(cases, budgets["failures"]["relative_err_max_pct"]),
                    "budgeted cases", [])


def _compute(data_dir: Path, budgets: Budgets) -> _Outcome:
    from .budgets import check_compute_budgets
    from .compute import validate_compute
    from .report import compute_report_to_json, format_compute_report

    rows, summaries = validate_compute(data_dir)
    points = [(r.measured_s * 1e6, r.predicted_s * 1e6, f"{r.gpu} {r.kind}") for r in rows]
    return _Outcome(check_compute_budgets(summaries, budgets["compute"]),
                    lambda: compute_report_to_json(rows, summaries),
                    lambda: format_compute_report(rows, summaries), "test GPUs (H200)", points,
                    "kernel time", "us", "compute: kernel tables (H100 fit, H200 test)")


_FOLDER_TITLE = ("compute: your kernel tables, predicted by the model fitted on them (fit) and by the "
                 "bundled constants on the same chip (bundled)")


def _holds_tables(folder: Path) -> bool:
    from ..compute.folder_fit import GEMM_FILES

    return any((folder / f).is_file() for f in GEMM_FILES)


def _compute_folder(folder: Path, chip_arg: str | None) -> _Outcome:
    """The fit on a folder of the user's own tables: no budgets, the bundled constants beside it."""
    from .compute import validate_folder
    from .compute_chip import chip_of_folder
    from .report import compute_report_to_json, format_compute_report

    chip = chip_of_folder(folder, chip_arg)
    rows, summaries = validate_folder(folder, chip)
    points = [(r.measured_s * 1e6, r.predicted_s * 1e6, f"{r.split} {r.kind}") for r in rows]
    return _Outcome([], lambda: compute_report_to_json(rows, summaries),
                    lambda: format_compute_report(rows, summaries, _FOLDER_TITLE), "your own tables",
                    points, "kernel time", "us", f"compute: {folder.name} on {chip.name} (fit vs bundled)")


def _stragglers(data_dir: Path, budgets: Budgets) -> _Outcome:
    from .stragglers import (
        check_straggler_budgets,
        format_stragglers,
        stragglers_to_json,
        validate_stragglers,
    )

    cases = validate_stragglers(data_dir)
    return _Outcome(check_straggler_budgets(cases, budgets["stragglers"]), lambda: stragglers_to_json(cases),
                    lambda: format_stragglers(cases), "every trace", [])


_RUN: Mapping[str, Callable[[Path, Budgets], _Outcome]] = {
    "collectives": _collectives, "training": _training, "failures": _failures, "compute": _compute,
    "stragglers": _stragglers}
SUITES = tuple(_RUN)                   # --suite choices; the first is the default


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``validate [--suite S] [--data DIR] [--json] [--plot FILE]``; its handler is ``run_cli``."""
    p = subparsers.add_parser("validate", help="predicted vs measured, against the error budgets")
    p.add_argument("--suite", choices=SUITES, default="collectives",
                   help="which suite: collectives (default), training, failures, compute or stragglers")
    p.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                   help=f"validation folder with {BUDGETS_FILE} and one folder per suite "
                        "(default: the repository's validation/)")
    p.add_argument("--chip", metavar="NAME|FILE.yaml",
                   help="compute suite on a folder of your own tables (clustersim bench --out DIR): "
                        "the chip they were measured on (default: the GPU its env.json names)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--plot", metavar="FILE",
                   help="predicted vs measured scatter with a +-10%% band (.png, .svg or .pdf)")
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    """Run the suite, print the report; 1 if an error budget is exceeded, else 0."""
    assert args.suite in SUITES, args.suite  # argparse choices already checked it
    plot = None
    if getattr(args, "plot", None) is not None:
        plot = check_output_path(args.plot, "--plot", PLOT_SUFFIXES)
        if args.suite in ("failures", "stragglers"):
            raise ConfigError(f"--plot: the {args.suite} suite has a handful of cases and no scatter; "
                              "plot collectives, training or compute")
    data_dir = Path(args.data)
    if not data_dir.is_dir():
        raise ConfigError(f"--data: {str(data_dir)!r} is not a folder; give the validation folder "
                          f"that holds {BUDGETS_FILE} and one folder per suite")
    from .budgets import load_budgets

    if args.suite == "compute" and _holds_tables(data_dir):
        budgets: Budgets = {"compute": {}}
        out = _compute_folder(data_dir, getattr(args, "chip", None))
    else:
        if getattr(args, "chip", None) is not None:
            raise ConfigError("--chip: only for --suite compute on a folder of your own kernel tables")
        budgets = load_budgets(data_dir / BUDGETS_FILE, suites=(args.suite,))
        out = _RUN[args.suite](data_dir / args.suite, budgets)
    if plot is not None:
        from ..plots import plot_validation

        plot_validation(out.points, out.quantity, out.unit, plot, out.title)
    if args.json:
        print(json.dumps({**out.to_json(), "budgets": budgets[args.suite],
                          "budget_violations": out.violations}, allow_nan=False))
    else:
        print(out.to_text())
        print()
        print(f"budgets ({out.scope}): " + (", ".join(f"{k} = {v:g}" for k, v in budgets[args.suite].items())
                                            or "none"))
        print("\n".join(f"BUDGET EXCEEDED: {v}" for v in out.violations) if out.violations else "within budget")
    return 1 if out.violations else 0
