"""Validation: the simulator's predictions against real measurements, with error budgets.

``clustersim validate [--suite S] [--data DIR] [--json] [--plot FILE]`` (DESIGN.md). Four suites,
each a pure function of its data folder and a predictor: ``collectives`` (nccl-tests runs),
``training`` (published training runs: mapped to scenarios, then scored), ``compute`` (measured
kernel tables) and ``failures`` (published fleet failure records). Budgets for all of them live in
``DIR/budgets.toml``. The package sits at the end of the data flow: it imports the simulator, and
nothing in the simulator imports it.

Modules: ``data`` (files and cells), ``stats`` (median, p90), one per suite
(``collectives_systems`` + ``collectives_runs`` + ``collectives``, ``training_rows`` +
``training_rules`` + ``training_measured`` + ``training_parallel`` + ``training_map`` +
``training``, ``compute``, ``failures``), ``budgets``, ``report`` (text and JSON), ``fit``
(calibration fits), ``overlay`` (measured points that ``sim.plots`` figures overlay), ``cli``.
The predictors that run the simulator itself (``CasePredictor``, ``TrainingPredictor``) are in
``sim.validate.predictors``, which this package does not import: it loads the network and engine
stack, which only the collectives and training suites need.
"""

from __future__ import annotations

from .budgets import (
    BUDGET_KEYS,
    check_budgets,
    check_compute_budgets,
    check_failure_budgets,
    check_training_budgets,
    load_budgets,
)
from .cli import SUITES, add_parser, run_cli
from .collectives import (
    BW_MIN_BYTES,
    LAT_MAX_BYTES,
    OPS,
    TOPOLOGIES,
    CaseSpec,
    CollectivesReport,
    PointResult,
    Predictor,
    RegimeStats,
    RunResult,
    Summary,
    UnsupportedRun,
    family_of,
    family_of_spec,
    gpus_per_thread,
    harness_of,
    is_anomalous,
    nccl_version,
    validate_collectives,
)
from .compute import GEMM_MIN_S, ComputeRow, ComputeSummary, predict_case, validate_compute
from .data import default_data_dir
from .failures import FailureCase, validate_failures
from .fit import (
    fit_link_efficiency,
    fit_nccl_tests_launch_s,
    fit_net_latency,
    fit_net_peer_us,
    fit_nvlink_efficiency,
    fit_proxy_step_us,
    fit_stack_efficiency,
    fit_torch_call_overhead_s,
)
from .overlay import measured_points, sweep_overlay
from .report import (
    compute_report_to_json,
    failures_report_to_json,
    format_compute_report,
    format_failures,
    format_report,
    format_training_report,
    report_to_json,
    training_report_to_json,
)
from .training import (
    FAMILIES,
    StepPredictor,
    TrainingPrediction,
    TrainingReport,
    TrainingRunResult,
    TrainingSummary,
    UnsupportedTrainingRun,
    validate_training,
)
from .training_map import MappedRun, map_runs
from .training_measured import (
    FLOPS_CONVENTIONS,
    TIME_SOURCES,
    FlopsConvention,
    Measured,
    flops_per_token,
)
from .training_rows import OVERRIDABLE_FIELDS
from .training_rules import HARDWARE_RULES, TOPOLOGY_CHIPS, HardwareRule

__all__ = [
    "BUDGET_KEYS", "BW_MIN_BYTES", "FAMILIES", "FLOPS_CONVENTIONS", "GEMM_MIN_S", "HARDWARE_RULES",
    "LAT_MAX_BYTES", "OPS", "OVERRIDABLE_FIELDS", "SUITES", "TIME_SOURCES", "TOPOLOGIES",
    "TOPOLOGY_CHIPS",
    "CaseSpec", "CollectivesReport", "ComputeRow", "ComputeSummary", "FailureCase",
    "FlopsConvention", "HardwareRule", "MappedRun", "Measured", "PointResult", "Predictor",
    "RegimeStats", "RunResult", "StepPredictor", "Summary", "TrainingPrediction", "TrainingReport",
    "TrainingRunResult", "TrainingSummary", "UnsupportedRun", "UnsupportedTrainingRun",
    "add_parser", "check_budgets", "check_compute_budgets", "check_failure_budgets",
    "check_training_budgets", "compute_report_to_json", "default_data_dir",
    "failures_report_to_json", "family_of", "family_of_spec", "fit_link_efficiency", "fit_net_peer_us",
    "fit_nccl_tests_launch_s",
    "fit_net_latency", "fit_nvlink_efficiency", "fit_proxy_step_us", "fit_stack_efficiency",
    "fit_torch_call_overhead_s",
    "flops_per_token", "gpus_per_thread", "harness_of",
    "format_compute_report", "format_failures", "format_report", "format_training_report",
    "is_anomalous", "load_budgets", "map_runs", "measured_points", "nccl_version", "predict_case",
    "report_to_json",
    "run_cli", "sweep_overlay", "training_report_to_json", "validate_collectives", "validate_compute",
    "validate_failures", "validate_training",
]
