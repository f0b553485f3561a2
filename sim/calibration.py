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
# Attention kernels relative to a GEMM of the same FLOPs, by architecture: fitted jointly with
# TRAINING_EFFICIENCY on the calibration split of validation/training
# (sim.validate_training.fit_attention_efficiency, grid 0.35-0.55 for Ampere, 0.20-0.40 for
# Hopper): A100 0.45, H100 0.30. The published runs mostly predate FlashAttention-2/3 tuned
# kernels (MPT's Triton attention, Megatron's fused softmax): best cases reach more (FA2 ~0.8 of
# GEMM efficiency on A100, Dao 2023; FA3 ~0.9 on H100, Shah et al. 2024), which is why this is a
# fit and not a datasheet number. The fit lowers the calibration split's median step error from
# 12.8% to 7.8% (A100) and 13.9% to 6.2% (H100). TPU: no fit (one calibration run): 0.75 assumed.
ATTENTION_EFFICIENCY: dict[str, float] = {"ampere": 0.45, "hopper": 0.30, "blackwell": 0.30}
ATTENTION_EFFICIENCY_DEFAULT = 0.75
# What a training framework achieves of the microbenchmark rates in a full step (kernel gaps,
# unfused elementwise work, host overheads, imperfect overlap), per chip family, as a factor on
# GEMM and attention efficiency: fitted on the calibration split of validation/training by
# sim.validate_training.fit_training_efficiency (median predicted/measured step time -> 1 over
# the family's calibration runs; 103 A100 runs, 22 H100), with ATTENTION_EFFICIENCY as fitted
# below (re-fitted after the vTrain runs moved to hgx-a100-4nic: unchanged). TPU: 13 calibration
# runs since Multislice and hybrid sharding (MaxText v5p 32B-1024B on 1 and 2 slices, v5e 16B-64B
# on 2 and 8 slices; 5 before); the same fit gives 1.012 as it did on the 5, i.e. XLA reaches the
# GEMM-sweep rate of the TPU7x stand-in (GEMM_E_MAX) about 1% over.
TRAINING_EFFICIENCY: dict[str, float] = {"A100": 0.709, "H100": 0.715, "TPU": 1.012}
