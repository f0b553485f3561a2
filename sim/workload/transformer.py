"""A decoder transformer step as per-rank work: compute ops with FLOPs and bytes, and collectives.

Pure arithmetic over the scenario (no simulation). Conventions, per rank and per micro-batch:
b micro-batch, s = seq_len / cp local tokens, h hidden, a heads, g kv heads, d head dim, f FFN
width, t tensor-parallel size, V vocab, 2-byte activations and weights (bf16; fp8 GEMMs keep bf16
activations between them).

Sources: GEMM FLOPs 2mnk; backward = 2 x forward (data and weight gradients); attention core
4 b s S a d with S the keys seen (causal halves the work flash attention does); tensor-parallel
collectives with sequence parallelism (2 all-gathers + 2 reduce-scatters per layer and pass, or 2
all-reduces without it: Korthikanti et al. 2022, "Reducing Activation Recomputation"); PaLM
appendix B model FLOPs for MFU (DESIGN.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..compute.kernels import AttentionShape, attention_bytes, attention_flops
from ..config import Scenario
from ..models import ModelSpec

__all__ = ["Op", "Comm", "LayerWork", "Workload", "build_workload", "model_flops_per_token"]

BYTES = 2          # bf16 activations and weights


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel on one rank: FLOPs, HBM bytes, the GEMM shape (m, n, k) where it is one.

    ``cls`` says what the compute model needs beyond the shape: for a GEMM ``linear`` (a layer's
    weight matmul, FP8 under Transformer Engine), ``head`` (the output layer) or ``router``; for
    attention the pass (``fwd``, ``bwd``, ``recompute``) with its ``attn`` shape; for a memory-bound
    op its class (``norm``, ``act``, ``rope``, ``residual``, ``cross-entropy``, ``embedding``, each
    with a ``-bwd`` form), which the software profile maps to a measured bandwidth.
    """

    name: str
    kind: str                    # "gemm" | "attention" | "memory"
    flops: float
    bytes: float
    shape: tuple[int, int, int] = (0, 0, 0)
    cls: str = ""
    attn: AttentionShape | None = None
    batch: int = 1               # GEMMs of this shape in one grouped kernel (MoE experts)


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective of one parallel group; ``size_bytes`` as nccl-tests counts it."""

    name: str
    op: str                      # allreduce | allgather | reducescatter | alltoall | sendrecv
    group: str                   # "tp" | "cp" | "ep" | "dp"
    size_bytes: int


Item = Op | Comm


@dataclass(frozen=True)
class LayerWork:
    """One transformer layer for one micro-batch on one rank."""

    forward: tuple[Item, ...]
    backward: tuple[Item, ...]
    recompute: tuple[Item, ...]          # forward work repeated inside the backward
    params: int                          # parameters of the layer on this rank
    cp_kv_bytes: int = 0                 # K/V block passed round the context-parallel ring


@dataclass(frozen=True)
class Workload:
    scenario: Scenario
    layer: LayerWork
    layers_per_chunk: int                # layers in one model chunk (virtual stage)  } the plan's,
    chunks: int                          # model chunks = pp x virtual stages          } as the loader
    microbatches: int                    # per pipeline per step                       } resolved them
    first_forward: tuple[Item, ...]      # embedding (stage holding chunk 0)
    first_backward: tuple[Item, ...]
    last_forward: tuple[Item, ...]       # output head + loss (stage holding the last chunk)
    last_backward: tuple[Item, ...]
    embed_params: int                    # on the first and on the last stage (untied head)
    pp_bytes: int                        # activation or gradient sent between stages
    model_flops_per_step: float
    tokens_per_step: int
    notes: tuple[str, ...] = field(default_factory=tuple)


def model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """PaLM appendix B: 6N + 12 L H Q T (N non-embedding parameters, active ones for MoE)."""
    return 6 * m.non_embedding_params(active_only=True) + 12 * m.layers * m.heads * m.head_dim * seq_len


def _gemm(name: str, m: int, n: int, k: int, cls: str = "linear", batch: int = 1) -> Op:
    """*batch* GEMMs C[m,n] = A[m,k] B[k,n]: 2mnk FLOPs each; read A and B, write C (bf16)."""
    return Op(name, "gemm", 2.0 * m * n * k * batch, BYTES * batch * (m * k + k * n + m * n),
              (m, n, k), cls, batch=batch)


def _mem(name: str, nbytes: float, cls: str) -> Op:
    return Op(name, "memory", 0.0, float(nbytes), cls=cls)


def _attention(name: str, shape: AttentionShape, passname: str) -> Op:
    bwd = passname == "bwd"
    return Op(name, "attention", attention_flops(shape, bwd), attention_bytes(shape, bwd),
              cls=passname, attn=shape)


# Backward bytes of a memory-bound op per forward byte: RMSNorm reads x and dy and writes dx
# (3 tensors against 2); SwiGLU reads u, v, dy and writes du, dv (5 against 3), GeLU reads x, dy
# and writes dx (3 against 2); RoPE rotates the gradient as it rotated the input; a residual add's
# gradient is added to the branch's (the same 3 tensors).
_BWD_BYTES = {"norm": 1.5, "rope": 1.0, "residual": 1.0, "embedding": 1.0}


# Forward GEMMs -> the tensors (sim/config/remat.py names) their outputs are.
_GEMM_OUTPUTS = {"qkv": ("query_proj", "key_proj", "value_proj"), "attn-out": ("out_proj",),
                 "mlp-up": ("mlpwi_0", "mlpwi_1"), "expert-up": ("mlpwi_0", "mlpwi_1"),
                 "mlp-down": ("mlpwo",), "expert-down": ("mlpwo",)}


def _policy_recompute(fwd: list[Item], scn: Scenario) -> tuple[Item, ...]:
    """The forward work a backward repeats under a per-tensor remat policy: the GEMMs whose outputs
    the policy rematerializes (with the collective that feeds each), the attention core when
    ``context`` is not kept (charged as Megatron's selective recomputation is: nothing for a flash
    kernel, whose backward recomputes its scores itself) and, on stacks that do not fuse them,
    the memory-bound ops (XLA and Inductor fuse them into the recomputed work)."""
    m = scn.model
    kept = {t for t, loc in scn.training.remat_policy if loc != "remat"}
    fused = scn.software.elementwise == "fused"
    out: list[Item] = []
    feeding: list[Item] = []                 # collectives since the last op
    for it in fwd:
        if not isinstance(it, Op):
            feeding.append(it)
            continue
        if it.kind == "gemm" and it.name in _GEMM_OUTPUTS:
            names = _GEMM_OUTPUTS[it.name]
            if m.mlp != "swiglu" and "up" in it.name:
                names = ("mlpwi_0",)
            if not all(x in kept for x in names):
                out += feeding + [it]
        elif it.kind == "attention":
            if "context" not in kept:
                assert it.attn is not None
                out.append(_attention("attention-recompute", it.attn, "recompute"))
        elif it.kind == "memory" and not fused:
            out.append(it)
        feeding = []
    return tuple(out)


def _mlp_forward(m: ModelSpec, tok: int, t: int, sp: bool, ep: int) -> list[Item]:
    """The forward of one layer's MLP block between its norm (and all-gather) and its
    reduce-scatter: a dense MLP, or the router and the rank's routed experts."""
    h, f = m.hidden, m.ffn_hidden
    fwd: list[Item] = []
    if m.moe is None:
        up = (2 if m.mlp == "swiglu" else 1) * f // t
        fwd.append(_gemm("mlp-up", tok, up, h))
        fwd.append(_mem("activation", (3 if m.mlp == "swiglu" else 2) * tok * f // t * BYTES, "act"))
        fwd.append(_gemm("mlp-down", tok, h, f // t))
    else:
        e, k = m.moe.experts, m.moe.top_k
        routed = int(math.ceil(tok * k * m.moe.capacity_factor))   # token copies this rank computes
        fwd.append(_gemm("router", tok, e, h, "router"))
        # With sequence parallelism each tensor-parallel rank dispatches only its 1/t share of the
        # token copies (Megatron's all-to-all dispatcher runs on the sequence shard); the expert GEMMs then
        # see all of them, split over t by the experts' own tensor parallelism.
        a2a = math.ceil(routed / (t if sp else 1)) * h * BYTES
        if ep > 1:
            fwd.append(Comm("ep-dispatch", "alltoall", "ep", a2a))
        # The rank's experts run as one grouped GEMM (Megatron's GroupedMLP, torch._grouped_mm):
        # e / ep experts, each over its share of the token copies the all-to-all brought in.
        local = e // ep
        per_expert = max(1, math.ceil(routed / local))
        up = (2 if m.mlp == "swiglu" else 1) * f // t
        fwd.append(_mem("permute", 2 * routed * h * BYTES, "embedding"))
        fwd.append(_gemm("expert-up", per_expert, up, h, batch=local))
        fwd.append(_mem("activation", (3 if m.mlp == "swiglu" else 2) * routed * f // t * BYTES, "act"))
        fwd.append(_gemm("expert-down", per_expert, h, f // t, batch=local))
        fwd.append(_mem("unpermute", 2 * routed * h * BYTES, "embedding"))
        if ep > 1:
            fwd.append(Comm("ep-combine", "alltoall", "ep", a2a))
    return fwd


def _backward(fwd: list[Item], mlp: str) -> list[Item]:
    """One layer's backward: its forward reversed, every GEMM as its data and weight gradients."""
    bwd: list[Item] = []
    for item in reversed(fwd):
        if isinstance(item, Op):
            if item.kind == "gemm":
                mm, nn, kk = item.shape
                bwd.append(_gemm(item.name + "-dgrad", mm, kk, nn, item.cls, item.batch))
                bwd.append(_gemm(item.name + "-wgrad", kk, nn, mm, item.cls, item.batch))
            elif item.kind == "attention":
                assert item.attn is not None
                bwd.append(_attention("attention-bwd", item.attn, "bwd"))
            else:
                factor = _BWD_BYTES.get(item.cls, 5 / 3 if mlp == "swiglu" else 1.5)
                bwd.append(_mem(item.name + "-bwd", factor * item.bytes, item.cls + "-bwd"))
        else:
            # The backward of an all-gather is a reduce-scatter and vice versa; without sequence
            # parallelism the all-reduce after a row-parallel GEMM becomes one before the
            # column-parallel GEMM's input gradient (same count and size).
            swap = {"allgather": "reducescatter", "reducescatter": "allgather"}
            bwd.append(Comm(item.name + "-bwd", swap.get(item.op, item.op), item.group, item.size_bytes))
    return bwd


def _stage_ends(m: ModelSpec, tok: int, t: int) -> tuple[tuple[Item, ...], tuple[Item, ...],
                                                          tuple[Item, ...], tuple[Item, ...]]:
    """(first stage's forward, its backward, last stage's forward, its backward): the embedding
    on the first stage (a gather: memory bound), the output head and the loss on the last."""
    h, V = m.hidden, m.vocab
    act = tok * h * BYTES
    first_f: tuple[Item, ...] = (_mem("embedding", act * 2, "embedding"),)
    first_b: tuple[Item, ...] = (_mem("embedding-bwd", act * 2, "embedding-bwd"),)
    head = _gemm("lm-head", tok, V // t, h, "head")
    loss = _mem("cross-entropy", tok * V // t * 4 * 3, "cross-entropy")   # fp32 logits: write, read, grad
    last_f: tuple[Item, ...] = (_mem("final-norm", 2 * act, "norm"), head, loss)
    last_b: tuple[Item, ...] = (_gemm("lm-head-dgrad", tok, h, V // t, "head"),
                                _gemm("lm-head-wgrad", h, V // t, tok, "head"),
                                _mem("final-norm-bwd", 3 * act, "norm-bwd"))
    return first_f, first_b, last_f, last_b


def build_workload(scn: Scenario) -> Workload:
    """Per-rank work of one training step of *scn*.

    The loader has checked the plan and resolved its sizes (``scn.parallelism``: micro-batches,
    global batch, layers per chunk, local sequence; sim/config/parallelism.py), so every division
    here is exact; a plan that breaks a rule is refused here with the loader's ConfigError.
    """
    m, tr, par = scn.model, scn.training, scn.parallelism
    par.checked()
    t, cp, ep = par.tp, par.cp, par.ep
    b, S = tr.micro_batch, tr.seq_len
    s = par.local_seq_len
    h, a, g, d = m.hidden, m.heads, m.kv_heads, m.head_dim
    tok = b * s                                            # tokens per micro-batch on this rank
    sp = par.sequence_parallel and t > 1
    act = tok * h * BYTES                                  # one [b, s, h] activation

    fwd: list[Item] = []
    # Attention block
    fwd.append(_mem("norm1", 2 * act / (t if sp else 1), "norm"))
    if sp:                       # without SP the input is replicated: nothing to gather
        fwd.append(Comm("tp-ag-attn", "allgather", "tp", act))
    fwd.append(_gemm("qkv", tok, (a + 2 * g) * d // t, h))
    fwd.append(_mem("rope", 2 * tok * (a + g) * d // t * BYTES, "rope"))
    # Attention over this rank's a/t query heads (and its share of the kv heads) against every key
    # of the sequence (context parallelism hands the other ranks' keys round a ring).
    heads_local = a // t
    kv_local = max(1, g // t)
    attn = AttentionShape(b, heads_local, kv_local, s, s * cp, d, causal=True)
    fwd.append(_attention("attention", attn, "fwd"))
    fwd.append(_gemm("attn-out", tok, h, a * d // t))
    if t > 1:
        fwd.append(Comm("tp-rs-attn", "reducescatter" if sp else "allreduce", "tp", act))
    fwd.append(_mem("residual1", 3 * act / (t if sp else 1), "residual"))
    # MLP block (dense or routed experts)
    fwd.append(_mem("norm2", 2 * act / (t if sp else 1), "norm"))
    if sp:
        fwd.append(Comm("tp-ag-mlp", "allgather", "tp", act))
    fwd.extend(_mlp_forward(m, tok, t, sp, ep))
    if t > 1:
        fwd.append(Comm("tp-rs-mlp", "reducescatter" if sp else "allreduce", "tp", act))
    fwd.append(_mem("residual2", 3 * act / (t if sp else 1), "residual"))

    bwd = _backward(fwd, m.mlp)

    # torchtitan's op-level selective AC (sim/workload/activations.py) changes what is kept, not the
    # time charged: like Megatron's selective recompute, no extra pass (its calibration runs,
    # torchtitan docs/performance.md, step within 3% of the selective-layer runs).
    if tr.remat_policy:
        recompute = _policy_recompute(fwd, scn)
    elif tr.recompute == "full":
        recompute = tuple(fwd)
    elif tr.recompute == "selective":
        # Korthikanti et al.: recompute the attention core only. A flash kernel's backward already
        # does (the compute model charges 0 for it); an unfused one runs its forward again.
        recompute = (_attention("attention-recompute", attn, "recompute"),)
    else:
        recompute = ()

    layer_params = m.layer_params() // t
    if m.moe is not None:
        layer_params = (m.attention_params() + 2 * h) // t + m.moe.experts // ep * m.mlp_params() // t

    first_f, first_b, last_f, last_b = _stage_ends(m, tok, t)
    V = m.vocab
    gb = par.sequences_per_step
    return Workload(
        scenario=scn, layer=LayerWork(tuple(fwd), tuple(bwd), recompute, layer_params,
                                      cp_kv_bytes=2 * tok * g * d // t * BYTES if cp > 1 else 0),
        layers_per_chunk=par.layers_per_chunk, chunks=par.chunks, microbatches=par.microbatches,
        first_forward=first_f, first_backward=first_b, last_forward=last_f, last_backward=last_b,
        embed_params=V * h // t, pp_bytes=act // (t if sp else 1),
        model_flops_per_step=model_flops_per_token(m, S) * gb * S,
        tokens_per_step=gb * S,
    )

