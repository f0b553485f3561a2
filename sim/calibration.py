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
# Flash attention relative to a GEMM of the same FLOPs, by architecture. A100: FlashAttention-2
# reaches ~73% of peak forward and ~63% backward (Dao 2023, figs. 5-6) against ~90% for GEMMs:
# ratio ~0.75. H100: FlashAttention-2 "achieves only 35% utilization" (Shah et al. 2024,
# FlashAttention-3, introduction) against ~78% for GEMMs: ratio 0.45 (the runs validated here
# predate FlashAttention-3). TPU: no source; the A100 ratio is assumed.
ATTENTION_EFFICIENCY: dict[str, float] = {"ampere": 0.75, "hopper": 0.45, "blackwell": 0.45}
ATTENTION_EFFICIENCY_DEFAULT = 0.75
# What a training framework achieves of the microbenchmark rates in a full step (kernel gaps,
# unfused elementwise work, host overheads, imperfect overlap), per chip family, as a factor on
# GEMM and attention efficiency: fitted on the calibration split of validation/training by
# sim.validate_training.fit_training_efficiency (median predicted/measured step time -> 1 over
# the family's calibration runs; 104 A100 runs, 22 H100). TPU has a single calibration run, too
# few to fit: it stays 1.0 (XLA on TPU reaching the microbenchmark rate is an assumption).
TRAINING_EFFICIENCY: dict[str, float] = {"A100": 0.637, "H100": 0.638, "TPU": 1.0}
