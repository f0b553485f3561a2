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

import importlib
from typing import Any

# PERF: names load their module on first use (PEP 562): every command builds the CLI, and
# importing all suites up front cost each of them ~0.1 s; a name still comes from the module
# listed here.
_WHERE: dict[str, str] = {
    "BUDGET_KEYS": "budgets",
    "check_budgets": "budgets",
    "check_compute_budgets": "budgets",
    "check_failure_budgets": "budgets",
    "check_training_budgets": "budgets",
    "load_budgets": "budgets",
    "SUITES": "cli",
    "add_parser": "cli",
    "run_cli": "cli",
    "BW_MIN_BYTES": "collectives",
    "CaseSpec": "collectives",
    "CollectivesReport": "collectives",
    "LAT_MAX_BYTES": "collectives",
    "OPS": "collectives",
    "PointResult": "collectives",
    "Predictor": "collectives",
    "RegimeStats": "collectives",
    "RunResult": "collectives",
    "Summary": "collectives",
    "TOPOLOGIES": "collectives",
    "UnsupportedRun": "collectives",
    "family_of": "collectives",
    "family_of_spec": "collectives",
    "gpus_per_thread": "collectives",
    "harness_of": "collectives",
    "is_anomalous": "collectives",
    "nccl_version": "collectives",
    "validate_collectives": "collectives",
    "ComputeRow": "compute",
    "ComputeSummary": "compute",
    "GEMM_MIN_S": "compute",
    "predict_case": "compute",
    "validate_compute": "compute",
    "default_data_dir": "data",
    "FailureCase": "failures",
    "validate_failures": "failures",
    "fit_dcn_layer_step_s": "fit",
    "fit_link_efficiency": "fit",
    "fit_nccl_tests_launch_s": "fit",
    "fit_net_latency": "fit",
    "fit_net_peer_us": "fit",
    "fit_nvlink_efficiency": "fit",
    "fit_proxy_step_us": "fit",
    "fit_stack_efficiency": "fit",
    "fit_torch_call_overhead_s": "fit",
    "measured_points": "overlay",
    "sweep_overlay": "overlay",
    "compute_report_to_json": "report",
    "failures_report_to_json": "report",
    "format_compute_report": "report",
    "format_failures": "report",
    "format_report": "report",
    "format_training_report": "report",
    "report_to_json": "report",
    "training_report_to_json": "report",
    "FAMILIES": "training",
    "StepPredictor": "training",
    "TrainingPrediction": "training",
    "TrainingReport": "training",
    "TrainingRunResult": "training",
    "TrainingSummary": "training",
    "UnsupportedTrainingRun": "training",
    "validate_training": "training",
    "MappedRun": "training_map",
    "map_runs": "training_map",
    "FLOPS_CONVENTIONS": "training_measured",
    "FlopsConvention": "training_measured",
    "Measured": "training_measured",
    "TIME_SOURCES": "training_measured",
    "flops_per_token": "training_measured",
    "OVERRIDABLE_FIELDS": "training_rows",
    "HARDWARE_RULES": "training_rules",
    "HardwareRule": "training_rules",
    "TOPOLOGY_CHIPS": "training_rules",
}

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
    "failures_report_to_json", "family_of", "family_of_spec", "fit_dcn_layer_step_s",
    "fit_link_efficiency", "fit_net_peer_us",
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
