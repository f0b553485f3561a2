"""Calibration constants: the one place for numbers fitted to measurements.

Each constant names the data it was fitted on and how: the kernel constants on the H100 kernel
tables and the published Blackwell ones (re-fitted by ``tests/test_calibration.py``), the link
efficiency on the collectives' calibration split (``tests/test_validation_budgets.py``) and the
stack efficiencies on the training runs' calibration split (``tests/test_validation_training.py``).
Constants taken from a publication rather than fitted say so and cite it.
"""

from __future__ import annotations

from .calibration_moe import (  # noqa: F401  (re-exported: cal.NAME for every constant)
    EP_COMM_SMS,
    EP_OVERLAP_SLOWDOWN,
    GROUPED_GEMM_HOPPER,
    MOE_MEMORY_FIT_CHIP,
    MOE_MEMORY_HOPPER,
    MOE_MEMORY_SM_BOUND,
    MOE_SYNC_IDLE_S,
    moe_memory_params,
)
from .compute.kernels import AttentionParams, GemmParams

# Achievable fraction of a link's line rate for bulk collective traffic, by link kind.
#
# nvlink: fitted on the calibration split's single-node NVSwitch runs in the bandwidth regime
#   (8xH100 all-gather, all-to-all, send/recv; 8xA100 all-reduce, send/recv; sizes >= 64 MiB):
#   the median of measured busbw / busbw predicted with the full NVLink rate (fit: see
#   ``sim.validate.fit_nvlink_efficiency``). NCCL's own topology model assumes 20.6 of 25 GB/s
#   per NVLink4 link (0.82, topo.h), in line with this fit.
# ib: NIC / InfiniBand links. No calibration-split run is bound by the NICs alone (the multi-node
#   calibration runs are capped by NCCL's NVLSTree ceiling), so no fit: the InfiniBand data rate
#   after 64b/66b encoding, 64/66 = 0.97 (IBTA: NDR and HDR use 64b/66b).
LINK_EFFICIENCY: dict[str, float] = {
    "nvlink": 0.77,
    "ib": 64 / 66,
    # Ethernet transports: payload per frame over the bytes the wire carries per frame. RoCEv2 at
    # a 4096-byte MTU: 14 Ethernet + 4 FCS + 8 preamble + 12 inter-frame gap + 20 IPv4 + 8 UDP +
    # 12 BTH + 4 ICRC = 82 bytes per 4096 (IBTA RoCEv2 annex A17; IEEE 802.3).
    "roce": 4096 / (4096 + 82),
    # RoCE through Google's gIB NCCL net plugin (GCP A3 Ultra, A4: NCCL_NET=gIB, its own load
    # balancing over several queue pairs per connection): fitted on the calibration split's gIB
    # runs (Google's documented 2-node all-gather outputs on A4 and A3 Ultra; sizes >= 64 MiB) by
    # ``sim.validate.fit_link_efficiency`` (tests/test_validation_budgets.py re-derives it). Those
    # runs plateau at 82-86% of the VMs' 8 x 400 Gb/s where RoCEv2 framing alone would allow 98%;
    # Google publishes no per-flow rate for gIB, so the fraction is measured, not derived.
    "gib": 0.83,
    # EFA (SRD over Ethernet): MTU "approximately 8 KiB" (libfabric fi_efa(7)); the SRD header is
    # not public, so RoCEv2's 82 bytes of headers are assumed.
    "efa": 8192 / (8192 + 82),
    # GPUDirect-TCPX/TCPXO: TCP/IPv4 over Ethernet at an 8,244-byte MTU (the MTU GCP sets on A3
    # GPU-NIC networks; assumed, not in the stored references): 20 IPv4 + 32 TCP (timestamps) bytes
    # inside the MTU, 38 of Ethernet framing outside it: 8,192 payload bytes per 8,282 on the wire.
    "tcpxo": 8192 / 8282,
    "tcpx": 8192 / 8282,
    # HPE Slingshot (NCCL over aws-ofi-nccl on libfabric CXI): fitted on the calibration split's
    # Slingshot runs (ALCF Polaris all-reduce on 2, 8, 256 and 540 nodes, all-gather on 2 and 8;
    # sizes >= 64 MiB; its all-to-alls left out, their point-to-point path a mechanism of its own) by
    # ``sim.validate.fit_link_efficiency``: the efficiency at which the median signed busbw error
    # is zero (tests/test_validation_budgets.py re-derives it), with the deep trees' pipeline fill
    # (``sim.collectives.tree.tree_fill_factor``) in the model it is fitted through. Framing alone
    # (RoCEv2's 82 bytes per 4 KiB) would give 0.98; Polaris reaches about 36 of its nodes'
    # 50 GB/s on rings (its all-gather and all-reduce alike), through GPU-NIC paths that cross
    # the CPU's host bridge (NCCL_NET_GDR_LEVEL=PHB) and the CXI provider, neither with a
    # published rate. Other Ethernet transports keep their framing: their one calibration run
    # each (EFA: a partial table of an older stack; TCPXO: still ramping at 8 GiB) is no basis
    # for a fit.
    "slingshot": 0.725,
}
# The NCCL net plugin's per-step network latency of a transport (us), for transports whose
# topology files give none (``sim.collectives.platform``): fitted on the calibration split's latency points
# (sim.validate.fit_net_latency; tests/test_validation_budgets.py re-derives it). TCPXO: the A3
# Mega 2-node all-reduce's 14 points of 8 B-64 KiB (the only TCPXO calibration run). Slingshot:
# NCCL over aws-ofi-nccl on libfabric CXI (ALCF Polaris, NERSC Perlmutter), the latency points of
# their calibration all-reduces and all-gathers (2 to 540 nodes); the all-to-alls are left out,
# their per-peer cost being NET_PEER_US's (13.0 -> 13.1 with Polaris's dragonfly groups).
NET_LATENCY_US: dict[str, float] = {"tcpxo": 54.5, "slingshot": 13.1}
# The net plugin's cost per remote peer of an all-to-all (us), beyond one step's latency: NCCL
# runs an all-to-all as a send and a receive to every peer (grouped ncclSend / ncclRecv), and a
# GPU's network proxy posts each remote peer's messages one after another, so the fixed cost grows
# with the peers across nodes. (at least NET_PEER_SMALL_B bytes a peer, under it), fitted on the
# calibration split's Slingshot all-to-alls (ALCF Polaris at 2 and 8 nodes, NCCL 2.18 and 2.21;
# latency-regime points) by ``sim.validate.fit_net_peer_us``: the median over the points of the
# measured time beyond the model's, per remote peer (tests/test_validation_budgets.py re-derives
# it). The same runs put the switch between 128 and 256 bytes a peer at both scales (aws-ofi-nccl
# over libfabric CXI, software receive matching: FI_CXI_RX_MATCH_MODE=software in their env).
# Transports without a fitted value (InfiniBand verbs, EFA, RoCE) have none: no calibration run.
NET_PEER_US: dict[str, tuple[float, float]] = {"slingshot": (9.5, 20.5)}
NET_PEER_SMALL_B = 256

# Time a GPU's network proxy spends on each channel's step of an LL128 call across nodes (us).
# NCCL sends a step to the network only when the whole step is written and fenced and the GPU's
# one proxy thread, which serves the channels of its NIC one after another, has seen it and
# posted the send behind the receiver's clear-to-send (NVIDIA/nccl src/device/prims_ll128.h
# postSend, src/transport/net.cc sendProxyProgress, src/proxy.cc; src/transport/net_ib/p2p.cc),
# so each network step of the call waits for the proxy to get round its channels: 4 at full width
# (two graph channels per NIC, doubled at run time), fewer for a call on fewer channels. NCCL's
# tuner leaves this out. Fitted by ``sim.validate.fit_proxy_step_us`` on the calibration split's
# points that run LL128 across nodes on NCCL's own IB verbs transport (InfiniBand, RoCE: the code
# path cited above; 32 x H100 all-reduce on 4 nodes, 8 x H100 reduce-scatter on 2 nodes; 9
# points): the value at which their median signed time error is zero
# (tests/test_validation_budgets.py re-derives it). Other net plugins (gIB, aws-ofi-nccl, TCPXO's)
# take the same figure, assumed: of the gIB calibration runs, A3 Ultra's 7 LL128 points alone
# fit 7.3 us and A4's 10.4 us, so no one figure of gIB's own describes both.
PROXY_STEP_US = 7.3
# Host time per GPU of one nccl-tests iteration when one thread drives several GPUs (``-g N``):
# the thread issues the N calls of an iteration one after another (a group of N launches), so an
# iteration takes at least N x this (``sim.validate.predictors.CasePredictor``). Fitted by
# ``sim.validate.fit_nccl_tests_launch_s`` on the calibration split's runs with -g > 1 (4xH100
# Snellius all-reduce, -g 4: a flat 16.6-17.8 us from 4 B to 64 KiB, the same floor its all-gather
# and reduce-scatter show with half the ring steps; 8xA100 stas00, -g 8): the median of measured
# latency-regime time / N (tests/test_validation_budgets.py re-derives it).
NCCL_TESTS_LAUNCH_PER_GPU_S = 4.2225e-6
# Host overhead of one torch.distributed all_reduce timed alone on an idle device (ml-engineering's
# all_reduce_bench.py as the data's runs used it: barrier, start event, one call, end event; its
# later docstring puts "PyTorch's per-call host overhead" at "some 20-30us"). Fitted by
# ``sim.validate.fit_torch_call_overhead_s`` on the calibration split's run of that harness
# (8xB200, sizes < 64 MiB): the median of measured minus predicted time
# (tests/test_validation_budgets.py re-derives it).
TORCH_CALL_OVERHEAD_S = 29.38e-6

# ----------------------------------------------------------------------------- compute kernels
#
# Every constant below is fitted on the kernel tables measured for this project on one H100 SXM
# (validation/compute/h100-sxm-80gb/, PyTorch 2.11, cuDNN 9.19) by the functions named, and
# re-derived from the tables by tests/test_calibration.py. The H200 tables are never fitted on:
# `clustersim validate --suite compute` reports them as a test of a chip the fit has not seen.

# GEMM tile/wave model (sim.compute.kernels.gemm_time_s), per input dtype, fitted by
# sim.compute.tables.fit_gemm on gemm_layers_bf16.csv + gemm_square.csv (bf16) and
# gemm_layers_fp8.csv + gemm_layers_fp8_bwd.csv + gemm_square.csv (fp8), rows >= 20 us.
GEMM_HOPPER: dict[str, GemmParams] = {
    "bf16": GemmParams(efficiency=0.731, tile_s=3.51e-6, k0=0, call_s=22.0e-6),
    "fp8": GemmParams(efficiency=0.692, tile_s=0.0, k0=442, call_s=27.4e-6),
}
# Other NVIDIA architectures have no per-shape table. Their sustained efficiency is the Hopper fit
# scaled by the ratio of the best-shape matmul rates (MAMF) of the two chips, both measured with
# the same brute-force search (validation/compute_and_tpu.md B3): A100 SXM 86.9% vs H100 SXM
# 80.3% of peak (bf16), B200 77.6%; FP8 B200 76.3% vs H100 70.9%.
MAMF_RATIO_VS_HOPPER: dict[str, dict[str, float]] = {
    "ampere": {"bf16": 0.869 / 0.803},
    "hopper": {"bf16": 1.0, "fp8": 1.0},
    "blackwell": {"bf16": 0.776 / 0.803, "fp8": 0.763 / 0.709},
}
# Blackwell has its own fits (GEMM_BLACKWELL, ATTENTION_BLACKWELL below); its entry here is what
# it was modelled with before them, kept for reference and no longer read by the model.

# ----------------------------------------------------------------------------- Blackwell kernels
#
# Fitted on published B200, GB200 and GB300 measurements (validation/compute/b200/, gb200/, gb300/; each table
# cited in validation/compute/README.md) by the functions named, re-derived by
# tests/test_calibration.py. The sources each kernel kind is fitted on, by the tables' `source`
# column; every other row is reported as a test (``clustersim validate --suite compute``).
BLACKWELL_FIT_SOURCES: dict[str, frozenset[str]] = {
    "gemm": frozenset({"xla-sm100", "deepgemm-pr348-cublaslt"}),
    "cudnn": frozenset({"cudnn-fe-gb200-llama3.1-cudnn9.23", "cudnn-fe-gb300-llama3.1-cudnn9.23"}),
    "flash-attention-4": frozenset({"cudnn-fe-gb200-llama3.1-cudnn9.23"}),
    "flash-attention-2": frozenset({"cudnn-fe-b200-cudnn9.13"}),
}
# GEMM tile/wave model per input dtype on B200 (arch "blackwell"), at the chip's own peak for it,
# with the Hopper tile shapes (sim.compute.kernels.GEMM_TILES; Blackwell's two-SM 256-row tiles are
# not modelled: the fitted terms absorb them).
# bf16, fp8: sim.compute.tables.fit_gemm on gemm_shapes.csv's xla-sm100 rows (XLA's sm_100 matmul
#   table, e4m3 x e4m3 for fp8) at the 11 shapes whose bf16 row takes >= 20 us
#   (tables.same_shape_rows: each dtype on the same shapes). Kernel-time table: call_s is small.
# mxfp8: no per-shape MXFP8 GEMM measurement was found. Assumed: cuBLAS's block-scaled (1x32,
#   e8m0) kernels run at the per-tensor FP8 rate (same tensor-core peak; the scale factors are
#   1/32 of the operand bytes), so the fp8 fit.
# nvfp4: only efficiency is fitted (tables.fit_gemm_efficiency; tile and call terms of the fp8
#   fit) on gemm_fp4.csv's rows >= 20 us: cuBLASLt MXFP4 (1x32 e8m0 scales) GEMMs on B200, which
#   stand for NVFP4 (1x16 e4m3 scales): the same FP4 tensor-core peak; no NVFP4 GEMM by shape was
#   found.
GEMM_BLACKWELL: dict[str, GemmParams] = {
    "bf16": GemmParams(efficiency=0.78, tile_s=1.47e-6, k0=0, call_s=4.0e-6),
    "fp8": GemmParams(efficiency=0.869, tile_s=0.58e-6, k0=0, call_s=6.7e-6),
    "mxfp8": GemmParams(efficiency=0.869, tile_s=0.58e-6, k0=0, call_s=6.7e-6),
    "nvfp4": GemmParams(efficiency=0.536, tile_s=0.58e-6, k0=0, call_s=6.7e-6),
}
# Blackwell chips other than the B200 have no per-shape GEMM table. Their GEMM efficiency is the
# B200 fit scaled by the ratio of the chips' best-shape matmul rates (MAMF, one brute-force
# search: ml-engineering compute/accelerator/README.md, validation/compute/README.md): GB200
# reaches 72.9% (bf16) and 72.3% (fp8) of its 1,200 W peak against B200's 77.6% and 76.3%, i.e.
# 4% more TFLOP/s, not the 11% its peak says. mxfp8 and nvfp4 take the fp8 ratio (assumed). A
# chip with no entry runs the B200 fit at its own peak (assumed).
MAMF_BLACKWELL: dict[str, dict[str, float]] = {
    "B200": {"bf16": 0.776, "fp8": 0.763},
    "GB200": {"bf16": 0.729, "fp8": 0.723},
    "B300": {"bf16": 0.786, "fp8": 0.745},
}
# Fused attention on Blackwell, fitted by sim.compute.tables.fit_attention (sequences >= 2,048,
# the H100 tables' shortest; the backward is measured directly), each at its chip's own peak:
# cudnn: gb200/attention.csv, the cuDNN frontend's llama3.1 sweep (cuDNN 9.23 called through the
#   frontend, as Transformer Engine does; batch 2, 64/8 heads, head_dim 128, causal and
#   non-causal, 2k-32k) on a GB200. The B200 has no table of that path (its one cuDNN table times
#   PyTorch SDPA on cuDNN 9.13, whose per-call cost grows with the sequence: a test here).
# flash-attention-2: b200/attention.csv, PyTorch's FlashAttention-2 build through SDPA on a B200
#   (cuDNN frontend's benchmark; causal, batch 1, 128/8 heads, head_dim 128). Like the H100 table
#   it includes what PyTorch's SDPA adds around the kernel; the GB200 rows of the same harness
#   are a test.
# Each table has one head count and head_dim, so d256 and tail are held at the Hopper fit's (one
# head count cannot separate the longest block's path from the HBM term: both grow with the
# sequence alone) and efficiency and mem are fitted. The B200 runs the GB200-fitted cuDNN
# constants at its own peak (assumed: the same fraction of peak).
ATTENTION_BLACKWELL: dict[tuple[str, str], AttentionParams] = {
    ("cudnn", "fwd"): AttentionParams(efficiency=0.663, d256=1.157, tail=0.968, mem=1.394),
    ("cudnn", "bwd"): AttentionParams(efficiency=0.535, d256=0.753, tail=0.155, mem=1.565),
    ("flash-attention-2", "fwd"): AttentionParams(efficiency=0.189, d256=0.967, tail=0.945, mem=10.154),
    ("flash-attention-2", "bwd"): AttentionParams(efficiency=0.155, d256=0.871, tail=0.4, mem=12.192),
}
# Blackwell Ultra (Chip.blackwell_ultra: B300, GB300) doubles the SFU's exponential throughput
# (NVIDIA, "Inside NVIDIA Blackwell Ultra": "2x attention-layer acceleration"), the bound of a
# flash forward's softmax at head_dim 128, so its attention has its own fit rather than B200's.
# cudnn: sim.compute.tables.fit_attention as ATTENTION_BLACKWELL's cudnn entries, on
#   gb300/attention.csv's cuDNN 9.23 llama3.1 sweep (the same frontend run and shapes as the GB200
#   fit: batch 2, 64/8 heads, head_dim 128, causal and not, 2k-32k) at GB300's own peak, the same
#   2,500 TFLOP/s dense BF16 as GB200's: 1.32x GB200's forward efficiency and 1.19x its backward
#   (the backward recomputes the exponentials too, against 2.5x the forward's matmul FLOPs). The B300
#   runs these constants at its own peak (assumed: the same fraction of peak).
# flash-attention-2: B200's constants (assumed: PyTorch's FA2 build issues Ampere-style mma.sync,
#   whose rate, not the SFU, bounds it; GB300's FA2 rows in the cuDNN 9.13 and 9.17 tables are a
#   test of that). FlashAttention-4 is this cudnn fit at FA4_SPEEDUP_VS_CUDNN (GB200's ratio:
#   GB300's own rows of the 9.23 run give 0.99 fwd / 1.03 bwd, a test).
ATTENTION_BLACKWELL_ULTRA: dict[tuple[str, str], AttentionParams] = {
    ("cudnn", "fwd"): AttentionParams(efficiency=0.876, d256=1.157, tail=0.968, mem=0.927),
    ("cudnn", "bwd"): AttentionParams(efficiency=0.639, d256=0.753, tail=0.155, mem=1.949),
    ("flash-attention-2", "fwd"): ATTENTION_BLACKWELL[("flash-attention-2", "fwd")],
    ("flash-attention-2", "bwd"): ATTENTION_BLACKWELL[("flash-attention-2", "bwd")],
}
# FlashAttention-4 (CuTe DSL, Blackwell) was measured beside cuDNN on one GB200 in one run (cuDNN
# frontend's llama3.1 sweep, cuDNN 9.23, FA4 4.0.0b15: batch 2, 64/8 heads, head_dim 128), in
# TFLOP/s at sequence 4k, 8k, 16k, 32k, causal then non-causal (gb200/attention.csv). FA4 is the
# cuDNN model at the median ratio of those (tests/test_calibration.py recomputes it), as
# FlashAttention-3 is on Hopper.
FA4_VS_CUDNN_TFLOPS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fwd": ((1330, 1518, 1636, 1529, 1538, 1686, 1663, 1470),
            (1352, 1539, 1622, 1545, 1559, 1634, 1549, 1519)),
    "bwd": ((1133, 1346, 1429, 1267, 1391, 1380, 1402, 1313),
            (1141, 1301, 1288, 1162, 1316, 1358, 1313, 1198)),
}
FA4_SPEEDUP_VS_CUDNN: dict[str, float] = {"fwd": 0.988, "bwd": 1.062}
# Memory-bound ops on Blackwell: no copy or elementwise measurement with a stated figure was found
# (the B200 reports seen give "over 6,000 GB/s" from CUDA samples or "> 5 TB/s"), so they run at
# the H100-fitted fractions of the chip's own HBM bandwidth (MEMORY_FRACTION below; assumed).

# TPU GEMMs (no per-shape table for v4-v6e): eff(F) = e_max (1 - exp(-F / (peak t_ramp))), least
# squares on the TPU7x square sweep (validation/compute/gemm.csv, compute_and_tpu.md A3):
# e_max 0.79, t_ramp 7.7 us; the H100 square sweep gives 0.78 and 8.4 us, and we keep the H100
# t_ramp for every TPU (a ramp of fixed duration scales with the chip's peak).
# The sweep is per TensorCore: its peak is half the chip's 2,307 TFLOP/s (FACTS.md GCP-7x: BF16
# peak per chip, 2 TensorCores).
TPU7X_CORE_PEAK_FLOPS = 2307e12 / 2
TPU_GEMM_E_MAX = 0.79
TPU_GEMM_T_RAMP_S = 8.4e-6

# Fused attention per kernel family and pass (sim.compute.kernels.attention_time_s), fitted by
# sim.compute.tables.fit_attention on attention.csv (cuDNN = CUDNN_ATTENTION, FlashAttention-2 =
# PyTorch's FLASH_ATTENTION build; the backward is the fwd+bwd row less the fwd row).
# d64: the efficiency's factor at head_dim 64 (gpt-oss), the median over attention_extra.csv's hd64
# rows (two shapes, fwd and fwd+bwd) of what makes each come out as measured, the other fields
# held (sim.compute.tables.fit_attention_d64). Without it the cuDNN forward ran 22-27% fast there.
ATTENTION_HOPPER: dict[tuple[str, str], AttentionParams] = {
    ("cudnn", "fwd"): AttentionParams(efficiency=0.678, d256=1.157, tail=0.968, mem=1.36, d64=0.724),
    ("cudnn", "bwd"): AttentionParams(efficiency=0.568, d256=0.753, tail=0.155, mem=3.044, d64=0.91),
    ("flash-attention-2", "fwd"): AttentionParams(efficiency=0.355, d256=0.967, tail=0.945, mem=1.475,
                                                  d64=0.893),
    ("flash-attention-2", "bwd"): AttentionParams(efficiency=0.337, d256=0.871, tail=0.4, mem=4.789,
                                                  d64=0.916),
}
# FlashAttention-3 was not measured here. Shah et al. 2024 (arXiv 2407.08608, H100 SXM5, BF16,
# head dim 128) measure it beside cuDNN at sequence 2k, 4k, 8k, 16k, in TFLOP/s: causal forward
# FA3 521 579 602 616 vs cuDNN 484 518 529 539; backward FA3 501 542 559 561 vs cuDNN 465 499 518
# 516. FA3 is cuDNN's model at the median ratio of those (tests/test_calibration.py recomputes it).
FA3_VS_CUDNN_TFLOPS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fwd": ((521, 579, 602, 616), (484, 518, 529, 539)),
    "bwd": ((501, 542, 559, 561), (465, 499, 518, 516)),
}
FA3_SPEEDUP_VS_CUDNN: dict[str, float] = {"fwd": 1.128, "bwd": 1.082}
# FlashAttention-2 on Ampere, where it was written for: 50-73% of the A100 peak (Dao 2023,
# arXiv 2307.08691, abstract; forward at the top of that range, backward lower). No table: the
# forward takes 0.70 and the backward 0.55 of peak, with the Hopper fit's tail and HBM terms.
# cuDNN's fused attention on Ampere is taken to run as FlashAttention-2 does (assumed).
ATTENTION_AMPERE_EFFICIENCY: dict[str, float] = {"fwd": 0.70, "bwd": 0.55}
# The Triton FlashAttention kernel (OpenAI's Triton tutorial kernel as llm-foundry shipped it,
# attn_impl: triton, before FlashAttention-2): FlashAttention-2 is "1.3-2.5x faster than
# FlashAttention in Triton" (Dao 2023, arXiv 2307.08691, section 4.1). We take the geometric mean
# of that range, 1.80, as the Triton kernel's slowdown against FlashAttention-2 (not measured here).
FA2_VS_TRITON = (1.3 * 2.5) ** 0.5
# PyTorch FlexAttention (torch.compile(flex_attention), static shapes, default kernel options; what
# NeMo AutoModel runs for gpt-oss): its fwd+bwd time over cuDNN's at the same causal shape, the median
# of four shapes (head_dim 64 at 2 x 4,096 and 1 x 4,096 tokens, 64/8 heads; head_dim 128 at 2 x 4,096
# and 2 x 8,192, 32/8 heads: 1.64, 1.67, 1.58, 1.52), measured on one H100 on 2026-11-27
# (validation/compute/h100-sxm-80gb/flex_attention.csv, benchmarks/device/h100_flex_attention.py).
# Both passes' matmul rates take it (the forward rows, each timed first after a compile, are not used:
# validation/compute/README.md). tests/test_flex_attention.py recomputes it from the table; the
# table's sliding-window and sink rows test the window's whole tiles and the sink rescale below.
FLEX_VS_CUDNN = 1.61
# FlexAttention with attention sinks (gpt-oss) returns the log-sum-exp and scales its output by
# sigmoid(lse - sink) in eager PyTorch (AutoModel's FlexAttention.forward @b3711ff): the bf16 output
# read and multiplied into fp32, then cast back, 12 bytes an output element forward; the backward
# through the cast and the product, 18 bytes (bf16 and fp32 gradients, the output re-read).
FLEX_SINK_BYTES_PER_ELEMENT: dict[str, float] = {"fwd": 12.0, "bwd": 18.0}
# TPU: Pallas splash attention (MaxText's default `attention: flash`) has no public per-shape
# measurement; at head_dim 128 on the 128-wide MXU of v4/v5e/v5p it runs at this fraction of the
# GEMM curve's efficiency (assumed, as before this model: its softmax work sits between the
# matmuls). That remainder is vector work, and on the 256-wide MXU of v6e and TPU7x it takes 4x as
# long against the matmuls (sim.compute.kernels.splash_time_s): a TensorCore's vector unit is
# 8 x 128 lanes in every generation (jax/_src/tpu_info.py @cec06d1), and four MXUs a TensorCore,
# as on v4/v5e/v5p, is assumed. The sources disagree on the count: tpu_info and GCP's v6e page now
# say two 256-wide MXUs, an earlier copy of that page four. Four at v5p's 1.75 GHz give v6e's
# 918 TFLOP/s and 4.67x v5e's four 128-wide at 1.5 GHz, the 4.7x Google puts on larger MXUs and a
# higher clock (cloud.google.com/blog/products/compute/introducing-trillium-6th-gen-tpus, May 2024);
# two would need 3.5 GHz on v6e and 4.4 GHz on TPU7x. With two, the factor is 2x, which is what
# this model was before it (the remainder scaled with the half-filled matmuls): v6e's Llama 3.1
# 8B / 70B test rows -10.3 / -6.5% there, -3.9 / -2.2% at 4x.
TPU_SPLASH_VS_GEMM = 0.75

# Memory-bound ops: fraction of the HBM spec reached, per op class, fitted by
# sim.compute.tables.fit_memory_fractions on memory_bound.csv (median over its shapes; eager
# PyTorch kernels: F.rms_norm, silu(u) * v, x + y). `copy` (a 2 GiB device-to-device copy) stands
# for a fused elementwise kernel that streams its tensors once.
# `quantize`: the fused per-tensor FP8 quantization kernels (amax, scale and cast, with or without
# the transposed copy) of quantize_compiled.csv, the rate every low-precision recipe's quantize
# kernels run at (sim/precision.py; assumed for the block-scaled formats, which Hopper cannot run).
MEMORY_FRACTION: dict[str, float] = {
    "copy": 0.879, "quantize": 0.666, "residual_add": 0.855, "rmsnorm_fwd": 0.515,
    "rmsnorm_bwd": 0.245, "swiglu_fwd": 0.304,
}
# TPU: a copy reaches 6.42 of ~7.37 TB/s on TPU7x (compute_and_tpu.md A2): 0.87; XLA fuses
# elementwise work, so every memory-bound op runs at that fraction.
TPU_MEMORY_FRACTION = 0.87

# TPU Multislice under MaxText (its profile's ``slice_reduce_bytes``): what each layer's gradient
# all-reduce across slices adds to the step per DCN ring step, 2 (slices - 1) of them a layer
# (the slices its replica group spans), beyond its bytes. MaxText reduces gradients hierarchically
# (in the slice, across slices over the DCN, then in the slice:
# docs/guides/optimization/sharding.md @e591f30) and layer by layer in the scanned backward (its
# v5e scripts' --xla_tpu_enable_data_parallel_all_reduce_opt, "overlap opportunities for DCN
# all-reduces"); each DCN transfer goes PCIe -> host -> NIC -> host -> PCIe (the scaling book, tpus.md
# @54e2c439; Cloud TPU's multislice introduction). No published latency for that path was found,
# and the measured steps grow with the slice count in proportion to the layer count, not the bytes
# (configs/v5e/README.md: ~28 ms a layer from 2 to 32 slices at 16B, 32B and 64B): least squares
# on the relative errors of the calibration split's multi-slice TPU runs, with the stack
# efficiencies refitted beside it (sim.validate.fit_dcn_layer_step_s). Linear in the slice count:
# the measured growth slows past 16 slices at 16B, so beyond the 32 slices measured it may
# overstate the step.
TPU_DCN_LAYER_STEP_S = 2.50e-04

# AdamW step, fraction of the HBM spec per implementation, fitted by
# sim.compute.tables.fit_optimizer_fractions on optimizer.csv (500 M fp32 parameters).
OPTIMIZER_FRACTION: dict[str, float] = {"adamw_fused": 0.748, "adamw_foreach": 0.273}

# ----------------------------------------------------------------------------- software stacks
#
# What a whole training step loses against the sum of its kernels as the tables measured them
# (launch gaps, allocator and host work, clocks under sustained power, SMs that overlapped NCCL
# kernels take), per (software profile, GPU family or TPU generation, precision), as a factor on
# kernel time: fitted on that group's calibration runs only by
# sim.validate.fit_stack_efficiency (median predicted / measured step -> 1, three
# rounds). A group with fewer than 3 calibration runs has no entry and borrows
# (sim.compute.model.stack_efficiency_of): its framework's groups on the same hardware, else the
# median of every group on that hardware (MaxText on H100 has one calibration run, behind a fabric
# #16 adds, and runs at the H100 median). TPU v4 and v6e have no group at all (MaxText: 0 and 1
# calibration runs), so they run at 1.0.
# Blackwell (family B200: B200 and GB200) has its own groups, fitted on MLPerf Training v5.0/v5.1
# calibration runs (issue 27): Megatron-TE FP8 loses 0.60 against the Blackwell kernel fits, NVFP4
# 0.75, where H100 FP8 loses 0.80. The gap is what the B200/GB200 kernel tables (single kernels,
# short bursts) do not show in a whole step; sustained clocks under the 1,000-1,200 W power limit
# are the likeliest part of it, and no Blackwell clock trace in a training step was found to
# split it out. Chips with no fitted group borrow their predecessor's (a lookup order, not a fit):
# B300 and GB300 (family B300: 3 calibration runs over two precisions) take B200's; TPU7x takes
# v5p's (the last training TPU with a fitted group: v6e has none).
STACK_PREDECESSOR: dict[str, str] = {"B200": "H100", "B300": "B200", "tpu7x": "tpu-v5p"}
STACK_EFFICIENCY: dict[tuple[str, str, str], float] = {
    ("deepspeed", "A100", "bf16"): 0.899,
    ("llm-foundry", "A100", "bf16"): 1.041,
    ("llm-foundry", "H100", "bf16"): 0.982,
    ("maxtext", "tpu-v5e", "bf16"): 1.052,
    ("maxtext", "tpu-v5p", "bf16"): 0.998,
    ("megatron", "A100", "bf16"): 0.947,
    ("megatron-te", "B200", "fp8"): 0.598,
    ("megatron-te", "B200", "nvfp4"): 0.751,
    ("megatron-te", "H100", "fp8"): 0.797,
    ("pytorch-fsdp", "A100", "bf16"): 0.755,
}
