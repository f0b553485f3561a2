"""Calibration constants of the MoE kernels and of expert-parallel overlap: part of
``sim.calibration`` (which re-exports every name here), kept apart for its size.

Each constant names the data it was fitted on or measured from, as ``sim.calibration``'s do.
"""

from __future__ import annotations

from .compute.kernels import GroupedGemmParams, MemoryParams
from .hardware import CATALOGUE, Chip

# MoE routing kernels as eager PyTorch runs them (sim.compute.kernels.fixed_memory_time_s: a fixed
# time per call plus bytes at a fraction of the HBM spec), fitted by
# sim.compute.moe_tables.fit_moe_memory on moe_routing.csv (H100; tokens 8,192/16,384, hidden
# 4,096/7,168, experts 8-256, top-k 2/8; 30 of its 32 cases, two disturbed ones skipped), least
# squares in log time, with GEMM_HOPPER["bf16"].call_s (what the same harness adds to one call)
# kept out of fixed_s. Bytes as the workload counts them (sim.compute.kernels.moe_topk_bytes,
# moe_permute_bytes). moe_topk: softmax + top-k (a fp32 cast, softmax and top-k: its time follows
# the T x E scores, not HBM: 1.6% of the spec); moe_permute: argsort + bincount (which syncs
# with the host, in its 175 us) + index_select; moe_gather: index_select alone; moe_unpermute: zeros +
# weight by probs + index_add_ (bf16 atomics, one per routed row element: 11% of the spec).
# Stacks that fuse their elementwise work (profile elementwise "fused": Transformer Engine's fused
# permutation, moe_permute_fusion in Megatron's MoE recipes; Inductor; XLA) run these classes as a
# copy (MEMORY_FRACTION["copy"], no fixed time; assumed, not measured here).
MOE_MEMORY_HOPPER: dict[str, MemoryParams] = {
    "moe_topk": MemoryParams(fraction=0.0162, fixed_s=22.5e-6),
    "moe_permute": MemoryParams(fraction=0.8531, fixed_s=174.7e-6),
    "moe_gather": MemoryParams(fraction=0.9004, fixed_s=1.5e-6),
    "moe_unpermute": MemoryParams(fraction=0.1109, fixed_s=76.9e-6),
}
# The classes of those whose rate the SMs set, not HBM: on the H200 (same 132 SMs and clocks, 1.43x
# the HBM bandwidth; moe_routing.csv of h200-sxm-141gb, 2026-11-28, the same 30 cases) softmax + top-k
# takes a median 0.996x and the atomic index_add_ unpermute 0.98x the H100's time, where the gather
# alone takes 0.77x. Their fitted byte rate is the H100's per SM, so another GPU runs it times its
# own SM count (clocks taken alike: assumed); the other classes keep their fraction of its HBM.
MOE_MEMORY_SM_BOUND = frozenset({"moe_topk", "moe_unpermute"})
MOE_MEMORY_FIT_CHIP = "H100-SXM"      # the GPU MOE_MEMORY_HOPPER was fitted on


def moe_memory_params(measured: str, chip: Chip) -> MemoryParams | None:
    """``MOE_MEMORY_HOPPER[measured]`` as it runs on *chip* (None: no such class): an SM-bound
    class's rate scaled by the SM counts, expressed as a fraction of *chip*'s HBM."""
    p = MOE_MEMORY_HOPPER.get(measured)
    if p is None or measured not in MOE_MEMORY_SM_BOUND or chip.name == MOE_MEMORY_FIT_CHIP:
        return p
    ref = CATALOGUE[MOE_MEMORY_FIT_CHIP]
    assert chip.sms and ref.sms, chip.name
    return MemoryParams(p.fraction * ref.hbm_Bps / ref.sms * chip.sms / chip.hbm_Bps, p.fixed_s)

# Grouped GEMM (sim.compute.kernels.grouped_gemm_time_s, torch._grouped_mm bf16 on sm90): the
# kernel's fixed time per group (local expert), its time per output tile, and the rate one SM
# streams its operands at, fitted together by sim.compute.moe_tables.fit_grouped on the H100's
# 468 single-kernel grouped rows (least squares in log time, GEMM_HOPPER["bf16"] for the rest):
# moe_grouped_gemm.csv (2-32 experts x 256-4,096 tokens) and moe_grouped_small.csv (8-128 experts
# x 8-1,024 tokens, forward, dgrad and wgrad, measured 2026-11-27). At a few tokens per expert the
# kernel reads every expert's weights for a few rows, and it does so at the same ~2.6-2.8 TB/s on
# the H100 (3.35 TB/s HBM) and the H200 (4.8 TB/s): a limit of the SMs' loads (132 x 19.6 GB/s),
# not of HBM, so the H200's faster memory does not speed it up (the HBM roofline alone ran the H200
# rows at <= 128 tokens per expert a median 18% fast). Test: the H200's rows, never fitted.
# Other architectures keep their own GEMM tile time and the HBM roofline (no grouped GEMM of
# theirs was measured) and take the Hopper time per group (assumed).
GROUPED_GEMM_HOPPER = GroupedGemmParams(group_s=0.45e-6, tile_s=2.34e-6, stream_Bps_per_sm=19.6e9)

# SMs the expert-parallel token transfers hold while compute runs beside them (sim/stages.py
# _ep_overlap), by dispatcher: DeepEP's normal kernels 24 (DeepEP README, Buffer.set_num_sms(24);
# DeepSeek-V3 report section 3.2.2: "only 20 SMs are sufficient"); NCCL's all-to-all and
# all-gather one block per channel, at most 32 channels (NCCL_MAX_NCHANNELS / NCCL_MAX_P2P_NCHANNELS
# default MAXCHANNELS = 32, NCCL environment-variable docs).
EP_COMM_SMS = {"deepep": 24, "alltoall": 32, "allgather": 32}

# GPU idle per dropless MoE layer forward and micro-batch in a PyTorch stack: the dispatcher
# copies the token counts to the host and synchronizes (Megatron-Core token_dispatcher.py: the
# all-to-all dispatcher before its all-to-all, the all-gather one with .cpu(), DeepEP with
# .item(), HybridEP sizing its buffers; TE GroupedLinear's m_splits.tolist()), so the queue drains
# and the GPU waits while the host prepares the dispatch and refills it. Measured, not fitted: a
# rank-0 Nsight Systems profile of Qwen3-30B-A3B on 16 H100 (BF16, EP16, MBS 1, GBS 1024: 64
# micro-batches x 48 MoE layers a step, HybridEP, no EP overlap) has a GPU-active union of
# 22.821 s in a 24.7138 s step (Megatron-Bridge skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md
# l.60-90 @067f987); the rest, 1.893 s, is this idle, 0.62 ms a layer. EP overlap's other
# micro-batch fills it (the same profile with overlap on has no idle: 21.221 s active in 20.992 s).
MOE_SYNC_IDLE_S = (24.7138 - 22.821) / (64 * 48)

# Compute time added per second of expert-parallel transfer overlapped with it (sim/stages.py
# _ep_overlap), on Hopper: the dispatch/combine kernels beside a GEMM take SMs, HBM bandwidth and L2
# from it, more than their share of SMs alone would (HybridEP's 24-32 SMs of 132: 0.22-0.32).
# Measured, not fitted: the rank-0 Nsight Systems comparison of Qwen3-30B-A3B on 16 H100 (BF16, EP16,
# HybridEP) with EP overlap off and on (Megatron-Bridge skills/nemo-mbridge-perf-moe-comm-overlap/
# SKILL.md l.60-90 @067f987): GPU-active union 22.821 s off (no overlap: compute + communication),
# 21.221 s on, with 3.959 s of communication concurrent with GEMM/attention; the kernels' summed
# time grew by 21.221 - 22.821 + 3.959 = 2.359 s for those 3.959 s. The overlap-on case is a test row
# of validation/training (mbridge-skill-...-hybridep-ovl-16), so this constant is not independent
# of it; the recipe card's run (mbridge-card-...-bf16-16) is.
EP_OVERLAP_SLOWDOWN = (21.221 - 22.821 + 3.959) / 3.959
