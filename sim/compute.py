"""Compute model: the time of one kernel on one chip, a roofline with measured efficiency.

time = max(FLOPs / (peak x eff(FLOPs)), bytes / (HBM bandwidth x eff_hbm)) + launch overhead, with
eff(F) = e_max (1 - exp(-F / (peak x t_ramp))): large GEMMs reach the chip's measured best
efficiency e_max, small ones pay a fixed ramp (wave quantisation, prologue/epilogue) of about
t_ramp seconds. e_max, t_ramp and the HBM efficiency are fitted on microbenchmarks in
validation/compute/ (see sim.calibration); attention and the rest of a training step run at a
fraction of that, fitted per chip family on the calibration split of the training runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import calibration as cal
from .hardware import Chip
from .workload.transformer import Op

__all__ = ["ComputeModel", "gemm_efficiency", "fit_gemm_curve"]


def gemm_efficiency(flops: float, peak_flops: float, e_max: float, t_ramp_s: float) -> float:
    """Fraction of peak a GEMM of *flops* reaches (saturating in its size)."""
    if flops <= 0:
        return e_max
    return e_max * (1.0 - math.exp(-flops / (peak_flops * t_ramp_s)))


def fit_gemm_curve(points: Sequence[tuple[float, float]], peak_flops: float) -> tuple[float, float]:
    """Least-squares (e_max, t_ramp_s) from (FLOPs, achieved FLOP/s) measurements."""
    from scipy.optimize import least_squares

    F = np.array([p[0] for p in points], float)
    eff = np.array([p[1] for p in points], float) / peak_flops
    res = least_squares(lambda x: x[0] * (1 - np.exp(-F / (peak_flops * x[1]))) - eff,
                        [0.8, 1e-5], bounds=([0.0, 1e-9], [1.0, 1e-2]))
    return float(res.x[0]), float(res.x[1])


class ComputeModel:
    """Kernel times on one chip for one precision (``bf16`` or ``fp8``)."""

    def __init__(self, chip: Chip, precision: str = "bf16",
                 training_efficiency: dict[str, float] | None = None,
                 attention_efficiency: dict[str, float] | None = None) -> None:
        self.chip = chip
        self.peak = chip.peak_flops(precision)
        fam = chip.family if chip.vendor == "nvidia" else "TPU"
        self.e_max = cal.GEMM_E_MAX.get(chip.arch, cal.GEMM_E_MAX_DEFAULT)
        if precision == "fp8" and chip.fp8_flops and chip.fp8_flops > chip.bf16_flops:
            self.e_max *= cal.FP8_GEMM_RATIO
        self.t_ramp = cal.GEMM_T_RAMP_S
        self.hbm = chip.hbm_Bps * cal.HBM_EFFICIENCY
        att = cal.ATTENTION_EFFICIENCY if attention_efficiency is None else attention_efficiency
        self.attention_eff = att.get(chip.arch, cal.ATTENTION_EFFICIENCY_DEFAULT)
        table = cal.TRAINING_EFFICIENCY if training_efficiency is None else training_efficiency
        self.framework = table.get(fam, 1.0)
        self.launch_s = cal.KERNEL_LAUNCH_S if chip.vendor == "nvidia" else 0.0

    def op_time_s(self, op: Op) -> float:
        if op.kind == "memory":
            return op.bytes / self.hbm + self.launch_s
        eff = gemm_efficiency(op.flops, self.peak, self.e_max, self.t_ramp)
        if op.kind == "attention":
            eff *= self.attention_eff
        eff *= self.framework
        return max(op.flops / (self.peak * eff), op.bytes / self.hbm) + self.launch_s
