"""Kernel time formulas: a GEMM, an attention kernel, a memory-bound op, on one chip.

Pure functions of a shape and a parameter record; the parameters are fitted on the kernel tables
in ``validation/compute/`` (``sim.compute.tables``) and live in ``sim.calibration``. Each formula is
the mechanism the tables show, not a curve through them:

- **GEMM** (NVIDIA): cuBLAS splits C[m, n] into output tiles, one thread block (CTA) per tile, and
  runs them in waves of one tile per SM; a partly filled last wave costs a whole one (wave
  quantisation). A tile's time is its k-loop at the sustained tensor-core rate, plus a pipeline
  fill worth ``k0`` more steps of k, plus a fixed prologue/epilogue. cuBLAS picks among tile shapes;
  we take the fastest of the usual Hopper/Ampere ones. Skinny shapes also meet the HBM roofline.
- **GEMM** (TPU): no per-shape sweep exists for v4-v6e, so a saturating curve in the FLOP count
  (``eff(F) = e_max (1 - exp(-F / (peak t_ramp)))``), fitted on the TPU7x square sweep.
- **Attention** (fused flash kernels): FLOPs at the kernel's sustained rate, plus the critical path
  of the longest thread block (the last block of queries under a causal mask sees every key, so
  its work grows with the sequence, not with the batch), plus the HBM traffic the kernel cannot
  hide (Q, K, V, O and LSE forward; in the backward also dO, dQ, dK, dV and FP32 dQ partials).
- **Grouped GEMM** (MoE experts, one kernel over every local expert): the tile/wave model with the
  grouped kernel's one tile shape instead of cuBLAS's pick (each expert's rows padded to it), plus a
  fixed time per group (expert) that the measured grouped kernels show at few tokens per expert.
- **Memory-bound ops**: bytes moved / (HBM bandwidth x the fraction of it that op class reaches),
  plus a fixed time per call for the op classes measured to have one (MoE routing kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GemmParams", "GroupedGemmParams", "AttentionParams", "AttentionShape", "MemoryParams", "gemm_time_s",
           "gemm_curve_time_s", "grouped_gemm_tiles", "grouped_gemm_time_s", "row_tiles_expected", "attention_flops",
           "attention_bytes", "attention_time_s", "memory_time_s", "fixed_memory_time_s", "moe_topk_bytes",
           "moe_permute_bytes", "splash_time_s", "GEMM_TILES", "GEMM_DTYPE_BYTES"]

# Output tiles (rows x columns) of the cuBLAS/CUTLASS kernels on Hopper and Ampere: 128x128 and the
# 128x256 / 256x128 warp-specialised tiles (CUTLASS 3 default tile shapes for sm90 bf16/fp8).
GEMM_TILES: tuple[tuple[int, int], ...] = ((128, 128), (128, 256), (256, 128))
# The output tiles of PyTorch's grouped GEMM on sm90 (torch._grouped_mm, bf16: CUTLASS ptr-array
# kernels, aten/src/ATen/native/cuda/GroupMM.cu, dispatch_bf16_grouped_kernel_on_tile_size at
# pytorch/pytorch commit 06c0cf0112c2cf4759382fda2171e826207e139c): 128x256 (cooperative, 2x1
# cluster), or 64x128 (ping-pong) when the per-group m or n is at most 128. One tile for the whole
# call, chosen from the average group: no per-shape pick as cuBLAS makes for a single GEMM.
GROUPED_GEMM_TILE: tuple[int, int] = (128, 256)
GROUPED_GEMM_SMALL_TILE: tuple[int, int] = (64, 128)
# Bytes per GEMM input element of each dtype the model runs (block scales not counted: one byte per
# 32 elements for MXFP8, per 16 for NVFP4).
GEMM_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0, "nvfp4": 0.5, "int8": 1.0}
# A flash-attention thread block owns 128 query rows (FlashAttention-2/3 and cuDNN's sm90 kernels).
ATTENTION_BLOCK_ROWS = 128


@dataclass(frozen=True, slots=True)
class GemmParams:
    """One dtype's GEMM constants on one architecture (``sim.calibration.GEMM_HOPPER``).

    ``efficiency``: sustained fraction of the dense peak inside a tile's k-loop; ``tile_s``: fixed
    time per tile (prologue, epilogue); ``k0``: pipeline fill in units of k; ``call_s``: what an
    isolated, timed call adds (launch and event latency; a training step's stream hides it).
    """

    efficiency: float
    tile_s: float
    k0: float
    call_s: float


@dataclass(frozen=True, slots=True)
class GroupedGemmParams:
    """The grouped expert GEMM's own constants on one architecture (``sim.calibration``):
    ``group_s``: fixed time per group (the tile scheduler walking the groups' problem sizes);
    ``tile_s``: time per output tile in place of the single GEMM's (None: the GEMM's own);
    ``stream_Bps_per_sm``: the bytes per second one SM moves when the kernel only streams its
    operands (None: no such limit below the HBM roofline)."""

    group_s: float
    tile_s: float | None
    stream_Bps_per_sm: float | None


@dataclass(frozen=True, slots=True)
class AttentionParams:
    """One attention kernel family and pass on one architecture (``sim.calibration.ATTENTION_HOPPER``).

    ``efficiency``: sustained fraction of the bf16 peak at head_dim 128; ``d256``: its factor at
    head_dim 256; ``tail``: weight of the longest thread block's work; ``mem``: weight of the
    kernel's HBM traffic at the chip's full bandwidth; ``d64``: the efficiency's factor at
    head_dim 64 and below (1: not measured for this kernel and chip).
    """

    efficiency: float
    d256: float
    tail: float
    mem: float
    d64: float = 1.0


@dataclass(frozen=True, slots=True)
class MemoryParams:
    """A memory-bound op class that costs a fixed time per call besides its bytes
    (``sim.calibration.MOE_MEMORY_HOPPER``): ``fraction`` of the HBM bandwidth for the bytes,
    ``fixed_s`` per call on the stream (the measured intercept less what timing one call adds)."""

    fraction: float
    fixed_s: float


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """Per-rank attention: ``batch`` sequences, ``heads`` query heads (``kv_heads`` key/value
    heads), ``seq_q`` queries against ``seq_k`` keys each, ``head_dim``, causal mask or not,
    learned attention ``sinks`` (one extra logit per head: gpt-oss) or not."""

    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool = True
    sinks: bool = False


def gemm_time_s(m: int, n: int, k: int, dtype_bytes: float, peak_flops: float, sms: int,
                hbm_Bps: float, p: GemmParams, batch: int = 1, isolated: bool = False,
                tile_shapes: tuple[tuple[int, int], ...] = GEMM_TILES) -> float:
    """Time of ``batch`` GEMMs C[m,n] = A[m,k] B[k,n] on an SM-based GPU (tile/wave model).

    *dtype_bytes*: bytes per input element (2 bf16, 1 fp8); outputs are bf16. *isolated* adds the
    per-call latency that a microbenchmark of one call measures (``validate --suite compute``).
    *tile_shapes*: the output tiles the kernel may pick from (the fastest is taken).
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    per_sm = peak_flops / sms * p.efficiency
    best = min(_waves_s(batch * math.ceil(m / tm), n, k, tm, tn, per_sm, sms, p.k0, p.tile_s)
               for tm, tn in tile_shapes)
    return max(best, _roofline_s(m, n, k, dtype_bytes, batch, hbm_Bps)) + (p.call_s if isolated else 0.0)


def _waves_s(row_tiles: float, n: int, k: int, tm: int, tn: int, per_sm: float, sms: int, k0: float,
             tile_s: float) -> float:
    """*row_tiles* rows of tm x tn output tiles across n, in waves over the SMs, each tile's k-loop
    at *per_sm* FLOP/s after *k0* of pipeline fill, plus *tile_s*."""
    return math.ceil(row_tiles * math.ceil(n / tn) / sms) * (2.0 * tm * tn * (k + k0) / per_sm + tile_s)


def _gemm_bytes(m: int, n: int, k: int, dtype_bytes: float, batch: int) -> float:
    """Inputs read once, the bf16 output written once."""
    return batch * (dtype_bytes * (m * k + k * n) + 2.0 * m * n)


def _roofline_s(m: int, n: int, k: int, dtype_bytes: float, batch: int, hbm_Bps: float) -> float:
    """The HBM roofline: ``_gemm_bytes`` at 90% of the HBM spec (the order of a plain copy:
    validation/compute/*/memory_bound.csv)."""
    return _gemm_bytes(m, n, k, dtype_bytes, batch) / (0.9 * hbm_Bps)


def grouped_gemm_tiles(m: int, n: int) -> tuple[tuple[int, int], ...]:
    """The one output tile a grouped GEMM of per-group C[m, n] runs (``GROUPED_GEMM_TILE``)."""
    return (GROUPED_GEMM_SMALL_TILE,) if m <= 128 or n <= 128 else (GROUPED_GEMM_TILE,)


def grouped_gemm_time_s(m: int, n: int, k: int, dtype_bytes: float, peak_flops: float, sms: int,
                        hbm_Bps: float, p: GemmParams, groups: int, g: GroupedGemmParams,
                        isolated: bool = False, uneven: bool = False) -> float:
    """One grouped GEMM kernel over *groups* GEMMs C[m,n] = A[m,k] B[k,n] (a rank's experts, each
    over its *m* tokens): the tile/wave model over every group's tiles at the grouped kernel's one
    tile (each group's m padded to it, the tiles of all groups in waves over the SMs) with the
    grouped kernel's own time per tile, or, where the operands stream faster than the SMs can
    load them (few tokens per expert: every expert's weights read once for a few rows; a wgrad
    over few tokens: every expert's gradient written), the bytes at the grouped kernel's
    streaming rate per SM; plus a fixed time per group (``sim.calibration.GROUPED_GEMM_HOPPER``).
    *uneven*: each group's m is a router's draw around *m* (``row_tiles``), so a group just past
    a multiple of the tile takes one more."""
    if m <= 0 or n <= 0 or k <= 0 or groups <= 0:
        return 0.0
    ((tm, tn),) = grouped_gemm_tiles(m, n)
    row_tiles = groups * (row_tiles_expected(m, groups, tm) if uneven else math.ceil(m / tm))
    t = max(_waves_s(row_tiles, n, k, tm, tn, peak_flops / sms * p.efficiency, sms, p.k0,
                     p.tile_s if g.tile_s is None else g.tile_s),
            _roofline_s(m, n, k, dtype_bytes, groups, hbm_Bps))
    if g.stream_Bps_per_sm is not None:
        t = max(t, _gemm_bytes(m, n, k, dtype_bytes, groups) / (sms * g.stream_Bps_per_sm))
    return t + groups * g.group_s + (p.call_s if isolated else 0.0)


def row_tiles_expected(m: int, groups: int, tm: int) -> float:
    """The expected *tm*-row tiles of one group whose rows are a binomial draw of mean *m* (the
    rows of all *groups* each routed to one of them at random): the sum over j of P(rows > j tm),
    the binomial read as a normal with a continuity correction."""
    sd = math.sqrt(m * (1.0 - 1.0 / groups))
    if sd == 0.0:
        return float(math.ceil(m / tm))
    top = int((m + 8.0 * sd) // tm) + 1
    return sum(0.5 * math.erfc((j * tm + 0.5 - m) / (sd * math.sqrt(2.0))) for j in range(top + 1))


def gemm_curve_time_s(flops: float, nbytes: float, peak_flops: float, e_max: float,
                      t_ramp_s: float, hbm_Bps: float) -> float:
    """GEMM time on a chip without a per-shape model (TPU): saturating efficiency in FLOPs."""
    if flops <= 0:
        return nbytes / hbm_Bps
    eff = e_max * (1.0 - math.exp(-flops / (peak_flops * t_ramp_s)))
    return max(flops / (peak_flops * eff), nbytes / hbm_Bps)


def mxu_share(width: int, dim: int | None) -> float:
    """The share of one side of a TPU MXU (a *dim* x *dim* systolic array) a matmul dimension of
    *width* fills, padded up to a multiple of *dim*; 1 without a known array size."""
    return width / (math.ceil(width / dim) * dim) if dim else 1.0


def mxu_fill(n: int, k: int, dim: int | None) -> float:
    """The share of a TPU MXU a matmul's output width *n* and contraction *k* fill (each side
    padded: ``mxu_share``; the rows stream through and need no padding)."""
    return mxu_share(n, dim) * mxu_share(k, dim)


def attention_flops(s: AttentionShape, backward: bool) -> float:
    """Matmul FLOPs of flash attention: 4 b h s_q s_k d forward (QK^T and PV), halved by a causal
    mask over a square score matrix; the backward does 2.5x the forward (five matmuls against two,
    one of them recomputing the scores: Dao 2023, FlashAttention-2, section 3.1.2)."""
    f = 4.0 * s.batch * s.heads * s.seq_q * s.seq_k * s.head_dim
    if s.causal:
        f /= 2
    return 2.5 * f if backward else f


# The MXU width (and head dimension) TPU_SPLASH_VS_GEMM stands for: v4, v5e and v5p.
_SPLASH_REF_MXU = 128


def splash_time_s(s: AttentionShape, backward: bool, peak_flops: float, mxu_dim: int | None,
                  vs_gemm: float, e_max: float, t_ramp_s: float) -> float:
    """Pallas splash attention on a TPU, its work on the GEMM curve once: its matmuls, each filling
    the MXU as far as the head dimension does (v6e's 256-wide array half at head_dim 128), and its
    vector work between them (the online softmax's max, exp, sums and casts). *vs_gemm* is the
    whole kernel's rate against the curve at head_dim 128 on the 128-wide MXU of v4/v5e/v5p, where
    the vector work is the remainder, 1 / vs_gemm - 1 of the matmuls. That work goes with the score
    elements, not the head dimension, and runs on the vector unit, 8 x 128 lanes a TensorCore in
    every generation, while the MXU grew from 128 x 128 to 256 x 256 from v6e on: against the MXU's
    rate it takes (mxu_dim / 128)^2 as long there, assuming four MXUs a TensorCore throughout
    (sim.calibration, above TPU_SPLASH_VS_GEMM, on the sources that disagree)."""
    flops = attention_flops(s, backward)
    wide = ((mxu_dim or _SPLASH_REF_MXU) / _SPLASH_REF_MXU) ** 2
    vector = flops * _SPLASH_REF_MXU / s.head_dim * (1.0 / vs_gemm - 1.0) * wide
    return gemm_curve_time_s(flops / mxu_share(s.head_dim, mxu_dim) + vector, 0.0, peak_flops,
                             e_max, t_ramp_s, 1.0)


def attention_bytes(s: AttentionShape, backward: bool) -> float:
    """HBM bytes a fused attention kernel moves (bf16 tensors, each read or written once):
    forward Q, K, V in and O out; backward Q, O, dO, K, V in, dK, dV out, and dQ: its FP32 partial
    sums written and read (four bf16-sized tensors of Q's shape with the bf16 result, counted as
    2 + 2). The fitted ``mem`` weight absorbs what this count misses."""
    q = s.batch * s.seq_q * s.heads * s.head_dim * 2.0
    kv = s.batch * s.seq_k * s.kv_heads * s.head_dim * 2.0
    if not backward:
        return 2 * q + 2 * kv
    return 3 * q + 2 * kv + 2 * q + 2 * kv + 2 * q


def attention_time_s(s: AttentionShape, backward: bool, p: AttentionParams, peak_flops: float,
                     sms: int, hbm_Bps: float) -> float:
    """Fused flash attention: sustained-rate FLOPs + the longest block's critical path + HBM."""
    eff = p.efficiency * (p.d256 if s.head_dim >= 256 else p.d64 if s.head_dim <= 64 else 1.0)
    rate = peak_flops * eff
    longest = 4.0 * ATTENTION_BLOCK_ROWS * s.seq_k * s.head_dim * (2.5 if backward else 1.0)
    return (attention_flops(s, backward) / rate + p.tail * longest / (rate / sms)
            + p.mem * attention_bytes(s, backward) / hbm_Bps)


def memory_time_s(nbytes: float, hbm_Bps: float, fraction: float) -> float:
    """A memory-bound op: *nbytes* moved at *fraction* of the HBM bandwidth."""
    return nbytes / (hbm_Bps * fraction) if nbytes > 0 else 0.0


def fixed_memory_time_s(nbytes: float, hbm_Bps: float, p: MemoryParams) -> float:
    """A memory-bound op with a fixed time per call (the MoE routing kernels): ``p.fixed_s`` plus
    *nbytes* at ``p.fraction`` of the HBM bandwidth; nothing for no bytes (no call)."""
    return p.fixed_s + memory_time_s(nbytes, hbm_Bps, p.fraction) if nbytes > 0 else 0.0


def moe_topk_bytes(tokens: int, experts: int, top_k: int) -> float:
    """Bytes a router's softmax + top-k is charged for (``moe-topk``, as ``moe_routing.csv``
    counts them): the bf16 logits read, the fp32 probabilities and int64 indices of the top k
    written: 2 T E + T k (4 + 8)."""
    return 2.0 * tokens * experts + 12.0 * tokens * top_k


def moe_permute_bytes(routed: int, hidden: int) -> float:
    """Bytes a permute or unpermute is charged for (``moe-permute``, ``moe-unpermute``): each of
    the *routed* token copies (tokens x top-k) read and written once in bf16, 4 x routed x hidden.
    The unpermute's constants are fitted on this count (its time follows the routed rows, one
    atomic add each), not on the 2 T k H + 2 T H the table states."""
    return 4.0 * routed * hidden
