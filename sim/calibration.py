"""Calibration constants: the one place for numbers fitted to measurements.

Each constant names the data it was fitted on (the ``calibration`` split of ../shared/validation
only) and how; ``tests/test_calibration.py`` re-runs each fit and checks the value here.
"""

from __future__ import annotations

# Achievable fraction of a link's line rate for bulk collective traffic, by link kind.
#
# nvlink: fitted on the calibration split's single-node NVSwitch runs in the bandwidth regime
#   (8xH100 all-gather, all-to-all, send/recv; 8xA100 all-reduce, send/recv; sizes >= 64 MiB):
#   the median of measured busbw / busbw predicted with the full NVLink rate (fit: see
#   ``sim.collectives.fit.fit_link_efficiency``). NCCL's own topology model assumes 20.6 of 25 GB/s
#   per NVLink4 link (0.82, topo.h), in line with this fit.
# ib: NIC / InfiniBand links. No calibration-split run is bound by the NICs alone (the multi-node
#   calibration runs are capped by NCCL's NVLSTree ceiling), so no fit: the InfiniBand data rate
#   after 64b/66b encoding, 64/66 = 0.97 (IBTA: NDR and HDR use 64b/66b).
LINK_EFFICIENCY: dict[str, float] = {
    "nvlink": 0.77,
    "ib": 64 / 66,
}

# ----------------------------------------------------------------------------- compute
#
# GEMM efficiency curve eff(F) = e_max (1 - exp(-F / (peak t_ramp))) (sim.compute), fitted by
# least squares on validation/compute/gemm.csv: H100 bf16 square sweep + MAMF best shape gives
# e_max 0.78, t_ramp 8.4 us; the TPU7x per-core sweep independently gives 0.79, 7.7 us. We use the
# H100 fit's t_ramp for every chip (a ramp of fixed duration scales with the chip's peak).
# A100's e_max is the mean of its two large-GEMM measurements (MAMF 0.869, FlagPerf 0.935): 0.90.
# TPU v4/v5e/v5p/v6e have no public GEMM sweep: the TPU7x fit (0.79) stands in for them.
GEMM_E_MAX: dict[str, float] = {
    "ampere": 0.90,
    "hopper": 0.78,
    "blackwell": 0.776,        # MAMF B200 (validation/compute_and_tpu.md B3), no sweep
    "tpu-v4": 0.79, "tpu-v5e": 0.79, "tpu-v5p": 0.79, "tpu-v6e": 0.79,
}
GEMM_E_MAX_DEFAULT = 0.78
GEMM_T_RAMP_S = 8.4e-6
# FP8 GEMMs reach a lower fraction of their (doubled) peak: MAMF H100 fp8 70.9% vs bf16 80.3%.
FP8_GEMM_RATIO = 0.709 / 0.803
# HBM: A100-40GB device-to-device copy reaches 85.5% of spec (FlagPerf, compute_and_tpu.md B4);
# TPU7x copies reach 6.42 of ~7.37 TB/s = 87% (A2). We take 0.86.
HBM_EFFICIENCY = 0.86
KERNEL_LAUNCH_S = 4e-6         # per kernel on GPUs (CUDA launch + tail); assumed, not fitted
# Flash attention relative to a GEMM of the same FLOPs: FlashAttention-2 forward reaches ~73% of
# A100 peak vs ~90% for GEMMs (Dao 2023, fig. 5-6); backward is slower (~63%). Mean ratio ~0.75.
ATTENTION_EFFICIENCY = 0.75
# What a training framework achieves of the microbenchmark rates in a full step (kernel gaps,
# unfused elementwise work, host overheads), per chip family: fitted on the calibration split of
# validation/training (sim.validate_training, see tests/test_calibration.py). 1.0 until fitted.
TRAINING_EFFICIENCY: dict[str, float] = {"A100": 1.0, "H100": 1.0, "TPU": 1.0}
