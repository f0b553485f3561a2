"""Compute model: kernel times from measured tables, run by a named software stack.

``kernels`` holds the formulas (no dependencies), ``tables`` reads the measured kernel tables and
fits the constants of ``sim.calibration`` on them (``moe_tables``: the MoE routing and grouped
GEMM tables), ``model`` (``ComputeModel``) is what the step
plan calls. The package exports the kernel records only, so that ``sim.workload`` can use them
without importing the model that consumes its ops.
"""

from .kernels import AttentionParams, AttentionShape, GemmParams

__all__ = ["AttentionParams", "AttentionShape", "GemmParams"]
