"""What one measured row times: a kernel spec, its FLOPs and bytes as ``validation/compute/README.md``
counts them, the table cells it is written as, and the compute model's time for it on a chip.

Pure Python: no PyTorch here (``sim.bench.torch_backend`` runs the specs on a GPU). The timing
method is the README's: 3 warm-up calls, then the median of 10 timed calls (5 for attention
forward+backward), CUDA events around each call.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import calibration as cal
from ..compute.kernels import GEMM_DTYPE_BYTES, AttentionShape, attention_flops
from ..compute.rows import predict_case
from ..compute.tables import BACKENDS, KernelCase
from ..hardware import Chip

__all__ = ["WARMUP", "REPS", "REPS_FWD_BWD", "GEMM_LAYOUTS", "ATTENTION_BACKENDS", "Gemm", "GroupedGemm",
           "Attention", "Memory", "Optimizer", "Kernel", "flops", "need_bytes", "reps", "cells",
           "predict_s"]

WARMUP = 3
REPS = 10
REPS_FWD_BWD = 5
# How a GEMM's operands are laid out (the training pass of a linear layer, or a plain a @ b):
# fwd y = x W^T (F.linear), dgrad dx = dy W, wgrad dW = dy^T x, square a @ b.
GEMM_LAYOUTS = ("fwd", "dgrad", "wgrad", "square")
# The PyTorch SDPA backends measured (torch.nn.attention.SDPBackend names) -> the model's kernel
# family (``sim.compute.tables.BACKENDS``, which the table's rows are read back with).
ATTENTION_BACKENDS = {b: BACKENDS[b] for b in ("CUDNN_ATTENTION", "FLASH_ATTENTION")}
# Optimizer state the runs allocate per parameter: fp32 param, grad, exp_avg, exp_avg_sq (16 B),
# and what a step moves: those four read, three written (README: 28 B).
_ADAM_STATE_B = 16
_ADAM_MOVED_B = 28


@dataclass(frozen=True, slots=True)
class Gemm:
    """C[m, n] = A[m, k] B[k, n] in *dtype* (``bf16``; ``fp8``: e4m3 inputs, per-tensor scales,
    bf16 output through ``torch._scaled_mm``), operands laid out as *layout* (``GEMM_LAYOUTS``)."""

    m: int
    n: int
    k: int
    dtype: str = "bf16"
    layout: str = "fwd"


@dataclass(frozen=True, slots=True)
class GroupedGemm:
    """One ``torch._grouped_mm`` over *experts* bf16 GEMMs of [tokens_per_expert, k] x [k, n]."""

    experts: int
    tokens_per_expert: int
    n: int
    k: int


@dataclass(frozen=True, slots=True)
class Attention:
    """Causal SDPA with one *backend* forced (``ATTENTION_BACKENDS``), forward or forward+backward."""

    backend: str
    shape: AttentionShape
    backward: bool = False


@dataclass(frozen=True, slots=True)
class Memory:
    """An eager memory-bound op (``sim.compute.tables.MEMORY_OPS``) over a bf16 [rows, cols] tensor (``copy``: a
    vector of *rows* elements, cols 1; ``swiglu_fwd``: u and v each [rows, cols / 2])."""

    op: str
    rows: int
    cols: int = 1


@dataclass(frozen=True, slots=True)
class Optimizer:
    """One AdamW step (``sim.software.OPTIMIZERS``) over *params* fp32 parameters in *tensors* tensors."""

    impl: str
    params: int
    tensors: int = 20


Kernel = Gemm | GroupedGemm | Attention | Memory | Optimizer


def flops(k: Kernel) -> float:
    """FLOPs the table's rate column divides (README): 2mnk; attention 4bhs^2d/2 forward, 3.5x
    that forward+backward; 0 for memory-bound ops."""
    if isinstance(k, Gemm):
        return 2.0 * k.m * k.n * k.k
    if isinstance(k, GroupedGemm):
        return 2.0 * k.experts * k.tokens_per_expert * k.n * k.k
    if isinstance(k, Attention):
        fwd = attention_flops(k.shape, backward=False)
        return 3.5 * fwd if k.backward else fwd
    return 0.0


def bytes_moved(k: Memory | Optimizer) -> float:
    """Bytes read + written as the README states them: copy 2 x 2 B per element; RMSNorm x read,
    y written (2 tensors) forward, + x, dy read, dx written backward (5); SwiGLU u, v read and the
    [rows, cols / 2] output written; residual add 2 read, 1 written; AdamW 28 B per parameter."""
    if isinstance(k, Optimizer):
        return float(_ADAM_MOVED_B * k.params)
    n = k.rows * k.cols
    return {"copy": 4.0, "rmsnorm_fwd": 4.0, "rmsnorm_fwd+bwd": 10.0, "swiglu_fwd": 3.0,
            "residual_add": 6.0}[k.op] * n


def need_bytes(k: Kernel) -> float:
    """GPU memory a case allocates, with room for the library's workspace (an upper bound: the
    case is skipped when the GPU has less free)."""
    if isinstance(k, Gemm):
        staging = 2.0 * (k.m * k.k + k.k * k.n) if k.dtype == "fp8" else 0.0   # bf16 before the cast
        return GEMM_DTYPE_BYTES[k.dtype] * (k.m * k.k + k.k * k.n) + 2.0 * k.m * k.n + staging + 2**28
    if isinstance(k, GroupedGemm):
        e, t = k.experts, k.tokens_per_expert
        return 2.0 * (e * t * k.k + e * k.k * k.n + e * t * k.n) + 2**28
    if isinstance(k, Attention):
        s = k.shape
        qo = 2.0 * s.batch * s.seq_q * s.heads * s.head_dim           # one [b, h, s, d] bf16 tensor
        tensors = 4 + (5 if k.backward else 0)                       # q, k, v (expanded), o; dO, grads
        return tensors * qo + 2**29
    if isinstance(k, Optimizer):
        return 1.25 * _ADAM_STATE_B * k.params                       # foreach's temporaries
    return 2.0 * bytes_moved(k) + 2**26                               # eager temporaries


def reps(k: Kernel) -> int:
    """Timed calls of the case (README: 10; 5 for attention forward+backward)."""
    return REPS_FWD_BWD if isinstance(k, Attention) and k.backward else REPS


def cells(k: Kernel, time_s: float) -> dict[str, str | int | float]:
    """The kernel's columns of its table row, measured time included (README's units)."""
    us = time_s * 1e6
    if isinstance(k, Gemm):
        return {"m": k.m, "n": k.n, "k": k.k, "time_us": round(us, 2),
                "tflops": round(flops(k) / time_s / 1e12, 1)}
    if isinstance(k, GroupedGemm):
        return {"experts_local": k.experts, "tokens_per_expert": k.tokens_per_expert,
                "m_total": k.experts * k.tokens_per_expert, "n": k.n, "k": k.k,
                "time_us": round(us, 2), "tflops": round(flops(k) / time_s / 1e12, 1)}
    if isinstance(k, Attention):
        s = k.shape
        return {"backend": k.backend, "batch": s.batch, "seq": s.seq_q, "heads": s.heads,
                "kv_heads": s.kv_heads, "head_dim": s.head_dim, "causal": int(s.causal),
                "pass": "fwd+bwd" if k.backward else "fwd", "time_us": round(us, 1),
                "tflops": round(flops(k) / time_s / 1e12, 1)}
    if isinstance(k, Optimizer):
        return {"optimizer": k.impl, "params": k.params, "time_ms": round(time_s * 1e3, 3),
                "bytes_per_param_moved": _ADAM_MOVED_B,
                "GBps": round(bytes_moved(k) / time_s / 1e9, 1)}
    shape = str(k.rows) if k.op == "copy" else f"{k.rows}x{k.cols}"
    return {"op": k.op, "shape": shape, "bytes_moved": int(bytes_moved(k)), "time_us": round(us, 1),
            "GBps": round(bytes_moved(k) / time_s / 1e9, 1)}


def predict_s(k: Kernel, chip: Chip) -> float:
    """The compute model's time for one call of *k* on *chip* as a table times it
    (``sim.compute.rows.predict_case`` on the row it will be; beyond a GEMM's call latency, the
    harness's per-call overhead), for the estimate."""
    if isinstance(k, Gemm):
        dtype = k.dtype if chip.fp8_flops is not None else "bf16"   # a chip with no FP8: as bf16
        return predict_case(KernelCase("", "gemm", dtype, "", 0.0, m=k.m, n=k.n, k=k.k), chip)
    if isinstance(k, GroupedGemm):
        return predict_case(KernelCase("", "gemm", "bf16", "", 0.0, m=k.tokens_per_expert, n=k.n,
                                       k=k.k, batch=k.experts), chip)
    if isinstance(k, Attention):
        key = f"{ATTENTION_BACKENDS[k.backend]} {'fwd+bwd' if k.backward else 'fwd'}"
        case = KernelCase("", "attention", key, "", 0.0, attention=k.shape)
    elif isinstance(k, Optimizer):
        case = KernelCase("", "optimizer", k.impl, "", 0.0, nbytes=bytes_moved(k))
    else:
        case = KernelCase("", "memory", k.op, "", 0.0, nbytes=bytes_moved(k))
    return predict_case(case, chip) + cal.TORCH_CALL_OVERHEAD_S
