"""The items of a rank's work: compute ops (``Op``) with their FLOPs and bytes, and collectives
(``Comm``); the GEMM and memory-op constructors every block uses."""

from __future__ import annotations

from dataclasses import dataclass

from ..compute.kernels import AttentionShape, attention_bytes, attention_flops

__all__ = ["BYTES", "Op", "Comm", "Item", "gemm", "mem", "attention"]

BYTES = 2          # bf16 activations and weights


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel on one rank: FLOPs, HBM bytes, the GEMM shape (m, n, k) where it is one.

    ``cls`` says what the compute model needs beyond the shape: for a GEMM ``linear`` (a layer's
    weight matmul, FP8 under Transformer Engine), ``head`` (the output layer), ``router`` or
    ``ssm`` (the Mamba-2 scan's chunk matmuls); for attention the pass (``fwd``, ``bwd``,
    ``recompute``) with its ``attn`` shape; for a memory-bound op its class (``norm``, ``act``,
    ``rope``, ``residual``, ``cross-entropy``, ``embedding``, ``moe-topk``, ``moe-permute``,
    ``moe-unpermute``, each with a ``-bwd`` form), which the software profile maps to a measured
    bandwidth.
    """

    name: str
    kind: str                    # "gemm" | "attention" | "memory"
    flops: float
    bytes: float
    shape: tuple[int, int, int] = (0, 0, 0)
    cls: str = ""
    attn: AttentionShape | None = None
    batch: int = 1               # GEMMs of this shape in one grouped kernel (MoE experts)
    uneven: bool = False         # the batch's row counts vary as a router draws them, around m


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective of one parallel group; ``size_bytes`` as nccl-tests counts it."""

    name: str
    op: str                      # allreduce | allgather | reducescatter | alltoall | sendrecv
    group: str                   # "tp" | "cp" | "ep" | "etp" | "dp"
    size_bytes: int


Item = Op | Comm


def gemm(name: str, m: int, n: int, k: int, cls: str = "linear", batch: int = 1, uneven: bool = False) -> Op:
    """*batch* GEMMs C[m,n] = A[m,k] B[k,n]: 2mnk FLOPs each; read A and B, write C (bf16).
    *uneven*: the groups' m are a router's draws around *m* (dropless MoE experts), not all *m*."""
    return Op(name, "gemm", 2.0 * m * n * k * batch, BYTES * batch * (m * k + k * n + m * n),
              (m, n, k), cls, batch=batch, uneven=uneven)


def mem(name: str, nbytes: float, cls: str) -> Op:
    return Op(name, "memory", 0.0, float(nbytes), cls=cls)


def attention(name: str, shape: AttentionShape, passname: str) -> Op:
    """One fused attention pass (``fwd``, ``bwd`` or ``recompute``) over *shape*."""
    bwd = passname == "bwd"
    return Op(name, "attention", attention_flops(shape, bwd), attention_bytes(shape, bwd),
              cls=passname, attn=shape)
