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

import functools
from dataclasses import dataclass, field
from typing import Any

from ..config import Scenario
from ..config.remat import LOGIT_BYTES
from ..models import LayerKind, ModelSpec, kind_index
from .blocks import BlockContext, attention_shape, mixer_block, mlp_block, ssd_backward
from .ops import BYTES, Comm, Item, Op, attention, gemm, mem
from .recompute import module_recompute

__all__ = ["Op", "Comm", "LayerWork", "Workload", "build_workload", "model_flops_per_token",
           "FLOPS_CONVENTION"]

FLOPS_CONVENTION = (
    "PaLM appendix B generalised per layer kind: 6 x active non-embedding parameters (routed "
    "top-k and shared experts, MTP modules included) + per attention layer 6 x heads x "
    "(qk + v head widths) x the keys a query sees uncausally (the sequence; a sliding window's "
    "keys; a chunk's), + per Mamba-2 layer 6 x heads x (chunk x (state + head_dim) + "
    "2 x state x head_dim); the output head not counted")


@dataclass(frozen=True)
class LayerWork:
    """One layer for one micro-batch on one rank."""

    forward: tuple[Item, ...]
    backward: tuple[Item, ...]
    recompute: tuple[Item, ...]          # forward work repeated inside the backward
    params: int                          # parameters of the layer on this rank
    cp_kv_bytes: int = 0                 # K/V block passed round the context-parallel ring
    expert_params: int = 0               # of them, routed-expert parameters (reduced over EDP)
    kind: str = ""                       # LayerKind.label


@dataclass(frozen=True)
class Workload:
    scenario: Scenario
    kinds: tuple[LayerWork, ...]         # one per distinct layer kind of the model
    layer_kinds: tuple[int, ...]         # every model layer's index into kinds
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
    mtp_kind: int | None = None          # the MTP modules' layer (index into kinds), last stage
    mtp_layers: int = 0

    @property
    def layer(self) -> LayerWork:
        """The last layer's work (every layer's, for a uniform stack)."""
        return self.kinds[self.layer_kinds[-1]]

    def stage_layers(self, stage: int) -> tuple[int, ...]:
        """The model layers (indices) pipeline *stage* holds, all of its chunks."""
        return self._stage(stage)[0]

    def stage_counts(self, stage: int) -> tuple[tuple[LayerWork, int], ...]:
        """(layer work, how many) of every kind *stage* runs: its layers and, on the last stage,
        the multi-token-prediction modules' layers."""
        return self._stage(stage)[1]

    # PERF: the stage plans, their floors and the memory estimate ask for a stage's layers and
    # kinds many times a layout; each stage's worked out once (the workload is frozen).
    @functools.cached_property
    def _stage_memo(self) -> dict[int, tuple[tuple[int, ...], tuple[tuple[LayerWork, int], ...]]]:
        return {}

    def _stage(self, stage: int) -> tuple[tuple[int, ...], tuple[tuple[LayerWork, int], ...]]:
        """*stage*'s model layers (indices) and (layer work, how many) of each kind it runs."""
        hit = self._stage_memo.get(stage)
        if hit is None:
            par = self.scenario.parallelism
            layers, counts = _stage_layers(par.model_chunk_layers, par.pp, par.virtual_stages,
                                           stage, self.layer_kinds, self.mtp_kind, self.mtp_layers)
            hit = self._stage_memo[stage] = (layers, tuple((self.kinds[k], n) for k, n in counts))
        return hit

    def stage_mix(self, stage: int) -> tuple[tuple[LayerWork, float], ...]:
        """The stage's mean layer: each kind's work with its weight (its count over the stage's
        layers; the weights sum above 1 where MTP layers ride on the last stage), so that the
        engine's layers x mean layer is the stage's work."""
        n = max(1, len(self.stage_layers(stage)))
        return tuple((lw, c / n) for lw, c in self.stage_counts(stage))

    def stage_params(self, stage: int) -> int:
        """Layer parameters of *stage* on one rank (its layers and MTP modules; no embeddings)."""
        return sum(lw.params * c for lw, c in self.stage_counts(stage))

    def stage_expert_params(self, stage: int) -> int:
        return sum(lw.expert_params * c for lw, c in self.stage_counts(stage))


# PERF: XLA's remat trials and a plan's layouts build many workloads of the same stack of layers
# and pipeline; which layers (and how many of each kind) a stage holds is theirs alike.
@functools.lru_cache(maxsize=4096)
def _stage_layers(per: tuple[int, ...], pp: int, vs: int, stage: int, layer_kinds: tuple[int, ...],
                  mtp_kind: int | None, mtp_layers: int
                  ) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """*stage*'s model layers (indices; chunk c holds model chunk c x pp + stage, *per* layers
    each) and (kind index, how many) of each kind it runs, the MTP modules' on the last stage."""
    layers: list[int] = []
    for c in range(vs):
        g = c * pp + stage
        start = sum(per[:g])
        layers += range(start, start + per[g])
    counts: dict[int, int] = {}
    for i in layers:
        counts[layer_kinds[i]] = counts.get(layer_kinds[i], 0) + 1
    if mtp_kind is not None and stage == pp - 1:
        counts[mtp_kind] = counts.get(mtp_kind, 0) + mtp_layers
    return tuple(layers), tuple(sorted(counts.items()))


def _mixer_flops_per_token(m: ModelSpec, kind: LayerKind, seq_len: int) -> int:
    """The attention or scan term of one layer of *kind* (FLOPS_CONVENTION)."""
    if kind.mixer == "attention":
        mla = m.attention.mla
        width = (mla.qk_head_dim + mla.v_head_dim) if mla is not None else 2 * m.head_dim
        w = kind.window
        span = seq_len if w is None else min(w, seq_len)
        return 6 * m.heads * width * span
    if kind.mixer == "mamba":
        mb = m.mamba
        assert mb is not None
        return 6 * mb.heads * (mb.chunk * (mb.state + mb.head_dim) + 2 * mb.state * mb.head_dim)
    return 0


@functools.lru_cache(maxsize=256)
def model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """PaLM appendix B: 6N + 12 L H Q T (N non-embedding parameters, active ones for MoE),
    per layer kind (FLOPS_CONVENTION); the same number as PaLM's for a uniform dense stack."""
    mixers = sum(_mixer_flops_per_token(m, k, seq_len) for k in m.layer_kinds())
    mtp = 0
    if m.mtp_layers:
        mtp = 6 * m.mtp_params(active_only=True) + m.mtp_layers * _mixer_flops_per_token(
            m, m.mtp_kind(), seq_len)
    return 6 * m.non_embedding_params(active_only=True) + mixers + mtp


# Backward bytes of a memory-bound op per forward byte: RMSNorm reads x and dy and writes dx
# (3 tensors against 2); SwiGLU reads u, v, dy and writes du, dv (5 against 3), GeLU reads x, dy
# and writes dx (3 against 2); RoPE rotates the gradient as it rotated the input; a residual add's
# gradient is added to the branch's (the same 3 tensors).
_BWD_BYTES = {"norm": 1.5, "rope": 1.0, "residual": 1.0, "embedding": 1.0, "moe-topk": 1.0,
              "moe-permute": 1.0, "moe-unpermute": 1.0}


# Forward GEMMs -> the tensors (sim/config/remat.py names) their outputs are.
_GEMM_OUTPUTS = {"qkv": ("query_proj", "key_proj", "value_proj"), "attn-out": ("out_proj",),
                 "mlp-up": ("mlpwi_0", "mlpwi_1"), "expert-up": ("mlpwi_0", "mlpwi_1"),
                 "mlp-down": ("mlpwo",), "expert-down": ("mlpwo",)}


def _policy_recompute(fwd: list[Item], scn: Scenario) -> tuple[Item, ...]:
    """The forward work a backward repeats under a per-tensor remat policy: the GEMMs whose outputs
    the policy rematerializes (with the collective that feeds each), the attention forward when
    ``context`` is not kept and, on stacks that do not fuse them, the memory-bound ops (XLA and
    Inductor fuse them into the recomputed work).

    MaxText tags the flash kernel's residuals, its output and log-sum-exp, with the name
    ``context`` (src/maxtext/layers/attention_op.py @e591f30: the splash kernel's
    ``residual_checkpoint_name="context"``), so a policy that does not save ``context``
    (``minimal``, ``save_dot_except_mlpwi``, a custom list without it) runs the forward kernel
    again inside the backward, and one that does (``minimal_with_context``) does not
    (decoders.py ``get_remat_policy``)."""
    m = scn.model
    kept = {t for t, loc in scn.training.remat_policy if loc != "remat"}
    fused = scn.software.elementwise == "fused"
    out: list[Item] = []
    feeding: list[Item] = []                 # collectives since the last op
    for it in fwd:
        if not isinstance(it, Op):
            feeding.append(it)
            continue
        if it.kind == "gemm" and it.cls in ("dispatch", "combine"):
            # unnamed einsums with batch dimensions, which no remat policy saves (blocks.py)
            out += feeding + [it]
        elif it.kind == "gemm" and it.name in _GEMM_OUTPUTS:
            names = _GEMM_OUTPUTS[it.name]
            if m.mlp != "swiglu" and "up" in it.name:
                names = ("mlpwi_0",)
            if not all(x in kept for x in names):
                out += feeding + [it]
        elif it.kind == "attention":
            if "context" not in kept:
                assert it.attn is not None
                out.append(attention("attention-recompute", it.attn, "fwd"))
        elif it.kind == "memory" and not fused:
            out.append(it)
        feeding = []
    return tuple(out)


def _backward(fwd: list[Item], mlp: str) -> list[Item]:
    """One layer's backward: its forward reversed, every GEMM as its data and weight gradients."""
    bwd: list[Item] = []
    for item in reversed(fwd):
        if isinstance(item, Op):
            if item.name.startswith("ssd-"):
                bwd += ssd_backward(item)         # Mamba-2's scan: its own backward kernels
            elif item.kind == "gemm":
                mm, nn, kk = item.shape
                # the data gradient keeps the forward's rows per group; the weight gradient
                # contracts over them (its output tiles do not follow the groups' rows)
                # (a dispatch einsum's left operand is its mask, top-k indices: no data gradient)
                if item.cls != "dispatch":
                    bwd.append(gemm(item.name + "-dgrad", mm, kk, nn, item.cls, item.batch, item.uneven))
                bwd.append(gemm(item.name + "-wgrad", kk, nn, mm, item.cls, item.batch))
            elif item.kind == "attention":
                assert item.attn is not None
                bwd.append(attention("attention-bwd", item.attn, "bwd"))
            else:
                factor = _BWD_BYTES.get(item.cls, 5 / 3 if mlp == "swiglu" else 1.5)
                bwd.append(mem(item.name + "-bwd", factor * item.bytes, item.cls + "-bwd"))
        else:
            # The backward of an all-gather is a reduce-scatter and vice versa; without sequence
            # parallelism the all-reduce after a row-parallel GEMM becomes one before the
            # column-parallel GEMM's input gradient (same count and size).
            swap = {"allgather": "reducescatter", "reducescatter": "allgather"}
            bwd.append(Comm(item.name + "-bwd", swap.get(item.op, item.op), item.group, item.size_bytes))
    return bwd


@functools.lru_cache(maxsize=1024)      # PERF: the same ops for a plan's layouts (their op times by identity)
def _stage_ends(m: ModelSpec, tok: int, t: int, logit_B: int = 4
                ) -> tuple[tuple[Item, ...], tuple[Item, ...], tuple[Item, ...], tuple[Item, ...]]:
    """(first stage's forward, its backward, last stage's forward, its backward): the embedding
    on the first stage (a gather: memory bound), the output head and the loss on the last, over
    logits of *logit_B* bytes (``training.logits_dtype``)."""
    h, V = m.hidden, m.vocab
    act = tok * h * BYTES
    first_f: tuple[Item, ...] = (mem("embedding", act * 2, "embedding"),)
    first_b: tuple[Item, ...] = (mem("embedding-bwd", act * 2, "embedding-bwd"),)
    head = gemm("lm-head", tok, V // t, h, "head")
    loss = mem("cross-entropy", tok * V // t * logit_B * 3, "cross-entropy")   # logits: write, read, grad
    last_f: tuple[Item, ...] = (mem("final-norm", 2 * act, "norm"), head, loss)
    last_b: tuple[Item, ...] = (gemm("lm-head-dgrad", tok, h, V // t, "head"),
                                gemm("lm-head-wgrad", h, V // t, tok, "head"),
                                mem("final-norm-bwd", 3 * act, "norm-bwd"))
    return first_f, first_b, last_f, last_b


def _layer_work(scn: Scenario, c: BlockContext, kind: LayerKind) -> LayerWork:
    """One layer of *kind*: its blocks' forward, the backward, what the backward recomputes, the
    rank's parameters of it."""
    m, tr, par = scn.model, scn.training, scn.parallelism
    t = par.tp
    fwd = mixer_block(c, kind) + mlp_block(c, kind)
    bwd = _backward(fwd, m.mlp)
    attn = attention_shape(c, kind) if kind.mixer == "attention" else None
    # torchtitan's op-level selective AC (sim/workload/activations.py) changes what is kept, not the
    # time charged: like Megatron's selective recompute, no extra pass (its calibration runs,
    # torchtitan docs/performance.md, step within 3% of the selective-layer runs).
    if tr.remat_policy:
        recompute = _policy_recompute(fwd, scn)
    elif tr.recompute_modules:
        recompute = module_recompute(fwd, kind, tr.recompute_modules)
    elif tr.recompute == "full":
        recompute = tuple(fwd)
    elif tr.recompute == "selective" and attn is not None:
        # Korthikanti et al.: recompute the attention core only. A flash kernel's backward already
        # does (the compute model charges 0 for it); an unfused one runs its forward again.
        recompute = (attention("attention-recompute", attn, "recompute"),)
    else:
        recompute = ()
    expert = 0
    params = m.kind_params(kind) // t
    if kind.mlp == "moe":
        moe = m.moe
        assert moe is not None
        expert = moe.experts // par.ep * m.expert_params() // par.etp
        params = (m.kind_params(kind) - moe.experts * m.expert_params()) // t + expert
    cp_kv = 0
    if par.cp > 1 and attn is not None:
        cp_kv = 2 * c.tok * attn.kv_heads * attn.head_dim * BYTES
    return LayerWork(tuple(fwd), tuple(bwd), recompute, params, cp_kv_bytes=cp_kv,
                     expert_params=expert, kind=kind.label)


# PERF: a plan's layouts of one size, and XLA's remat trials of each, share their layers' work
# wherever the rank's block context, the layer kind and what decides the recomputation agree
# (the pipeline, ZeRO and the chip count do not enter it); LayerWork is immutable, so the same
# object serves them all (benchmarks/release.py plan-70b).
_LAYER_WORK: dict[tuple[Any, ...], LayerWork] = {}
_LAYER_WORK_MAX = 4096


def _layer_work_of(scn: Scenario, c: BlockContext, kind: LayerKind) -> LayerWork:
    """``_layer_work``, memoised on everything it reads."""
    tr = scn.training
    key = (c, kind, tr.remat_policy, tr.recompute_modules, tr.recompute, scn.software.elementwise)
    hit = _LAYER_WORK.get(key)
    if hit is None:
        if len(_LAYER_WORK) >= _LAYER_WORK_MAX:
            _LAYER_WORK.clear()
        hit = _LAYER_WORK[key] = _layer_work(scn, c, kind)
    return hit


def _mtp_ends(m: ModelSpec, tok: int, t: int, logit_B: int = 4) -> tuple[list[Item], list[Item]]:
    """A multi-token-prediction module's work beyond its layer: the two norms and the 2h -> h
    projection before it, its own output head and loss after it (DeepSeek-V3 section 2.2)."""
    h, V = m.hidden, m.vocab
    act = tok * h * BYTES
    fwd: list[Item] = [mem("mtp-norms", 4 * act, "norm"), gemm("mtp-proj", tok, h, 2 * h),
                       gemm("mtp-head", tok, V // t, h, "head"),
                       mem("mtp-loss", tok * V // t * logit_B * 3, "cross-entropy")]
    return fwd, _backward(fwd, m.mlp)


def build_workload(scn: Scenario) -> Workload:
    """Per-rank work of one training step of *scn*.

    The loader has checked the plan and resolved its sizes (``scn.parallelism``: micro-batches,
    global batch, layers per chunk, local sequence; sim/config/parallelism.py), so every division
    here is exact; a plan that breaks a rule is refused here with the loader's ConfigError.
    """
    m, tr, par = scn.model, scn.training, scn.parallelism
    par.checked()
    t = par.tp
    b, S = tr.micro_batch, tr.seq_len
    s = par.local_seq_len
    h = m.hidden
    tok = b * s                                            # tokens per micro-batch on this rank
    sp = par.sequence_parallel and t > 1
    act = tok * h * BYTES                                  # one [b, s, h] activation
    sw = scn.software
    domain = getattr(scn.cluster.topology, "gpus_per_node", None) or par.ep * par.etp
    c = BlockContext(m, tok, b, t, sp, par.ep, par.etp, par.cp, s,
                     dispatcher=sw.moe_dispatcher, domain_ranks=max(1, domain // par.etp),
                     einsum_dispatch=(sw.moe_capacity_einsum and m.moe is not None
                                      and m.moe.capacity_factor is not None
                                      and t == par.etp == par.cp == 1),
                     group_tile_rows=sw.grouped_tile_rows if scn.cluster.chip.is_tpu else 0)
    distinct, layer_kinds = kind_index(m)
    mtp_kind = None
    if m.mtp_layers:                       # the MTP modules' kind, a new one if no layer has it
        mk = m.mtp_kind()
        distinct += () if mk in distinct else (mk,)
        mtp_kind = distinct.index(mk)
    kinds = tuple(_layer_work_of(scn, c, k) for k in distinct)

    logit_B = LOGIT_BYTES[scn.training.logits_dtype]
    first_f, first_b, last_f, last_b = _stage_ends(m, tok, t, logit_B)
    if m.mtp_layers:
        mf, mb = _mtp_ends(m, tok, t, logit_B)
        last_f += tuple(mf) * m.mtp_layers
        last_b += tuple(mb) * m.mtp_layers
    V = m.vocab
    gb = par.sequences_per_step
    return Workload(
        scenario=scn, kinds=kinds, layer_kinds=tuple(layer_kinds),
        layers_per_chunk=par.layers_per_chunk, chunks=par.chunks, microbatches=par.microbatches,
        first_forward=first_f, first_backward=first_b, last_forward=last_f, last_backward=last_b,
        embed_params=V * h // t, pp_bytes=act // (t if sp else 1),
        model_flops_per_step=model_flops_per_token(m, S) * gb * S,
        tokens_per_step=gb * S, mtp_kind=mtp_kind, mtp_layers=m.mtp_layers,
    )
