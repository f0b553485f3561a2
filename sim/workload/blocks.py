"""The blocks a layer is made of, as per-rank work for one micro-batch: token mixers (attention,
local attention, multi-head latent attention, Mamba-2) and MLPs (dense, mixture of experts with
its token dispatcher), each between its norm and its residual add.

Pure arithmetic, no simulation; the conventions of ``sim.workload.transformer`` (b micro-batch,
s local tokens, t tensor-parallel size, bf16 tensors). Sources per block:

- Attention: GEMM FLOPs 2mnk, the fused kernel's FLOPs in ``sim.compute.kernels``. A sliding
  window of W keys is computed as the whole 128-key tiles it reaches (``window_keys``:
  non-causal over them, the rest masked: flash kernels skip only tiles wholly outside the mask);
  a chunked layer (Llama 4) is causal attention within chunks of W tokens.
- MLA (DeepSeek-V2 section 2.1; Megatron-Core ``MLASelfAttention``): the down-projections
  W_DQ and W_DKV(+W_KR) replicated over tensor parallelism, the up-projections and W_O split by
  heads; the attention kernel over per-head query/key width qk_nope + qk_rope and value width
  v_head_dim, charged at their mean width (the same FLOPs).
- Mamba-2 (Dao & Gu 2024, sections 6-7; Megatron-Core ``MambaMixer``): in_proj to (z, x, B, C,
  dt) split by heads over tensor parallelism, depthwise causal conv over (x, B, C), the SSD scan
  (``ssd_forward``, ``ssd_backward``) as the kernels of mamba_ssm's ``mamba_chunk_scan_combined``
  run it, a gated RMSNorm and out_proj.
- MoE (Megatron-Core ``MoEAlltoAllTokenDispatcher``, ``MoEAllGatherTokenDispatcher`` and the
  DeepEP ``MoEFlexTokenDispatcher``): the router and its top-k on the rank's sequence shard, the
  permutation, the dispatch over the expert-parallel group, with expert tensor parallelism an
  all-gather of the received tokens over the ETP group (and a reduce-scatter back), the rank's
  experts as one grouped GEMM over their busiest share, the combine. Shared experts run as a
  dense MLP of their width beside the routed ones. A token-dropping MoE under MaxText
  (``SoftwareProfile.moe_capacity_einsum``: src/maxtext/layers/moe.py @e591f30 ``dense_matmul``
  and ``generate_masks``) instead builds one-hot dispatch and combine masks over each sequence's
  S tokens and its E x C expert slots, C = ceil(S k / E) x capacity_factor, and moves the tokens
  by einsum: "BSM,BSEC -> EBCM" into the slots, "EBCM,BSEC -> BSM" back, matmuls of 2 S M E C
  FLOPs a sequence each, where the GPU stacks permute; the dispatch mask comes from top-k indices,
  so its einsum has no second gradient, and the combine's carries the router weights'. Modelled
  where neither tensor, expert tensor nor context parallelism splits the tokens or their width
  (tp = etp = cp = 1, as MaxText's token-dropping recipes run: FSDP and expert parallelism);
  otherwise such a layer is permuted as on the GPU stacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..compute.kernels import ATTENTION_BLOCK_ROWS, AttentionShape
from ..errors import ConfigError
from ..models import LayerKind, ModelSpec
from .ops import BYTES, Comm, Item, Op, attention, gemm, mem
from .routing import destinations

__all__ = ["BlockContext", "mixer_block", "mlp_block", "attention_shape"]


@dataclass(frozen=True, slots=True)
class BlockContext:
    """What every block of a rank needs: the model, tokens per micro-batch on the rank (``tok``,
    all of the micro-batch's local sequence), the tensor-parallel size, sequence parallelism,
    the expert layout (``ep``, ``etp``), the sequence (``local_seq`` this rank's share of it,
    ``cp``) and the MoE token dispatcher."""

    m: ModelSpec
    tok: int
    b: int
    t: int
    sp: bool
    ep: int
    etp: int
    cp: int
    local_seq: int
    dispatcher: str = "alltoall"
    domain_ranks: int = 8        # the expert-parallel group's ranks in one NVLink domain
    einsum_dispatch: bool = False  # token drop by one-hot einsums (SoftwareProfile.moe_capacity_einsum)
    group_tile_rows: int = 0       # grouped expert GEMM tile rows (SoftwareProfile.grouped_tile_rows)


def attention_shape(c: BlockContext, kind: LayerKind) -> AttentionShape:
    """The attention kernel's shape on this rank for a layer of *kind* (module docstring)."""
    m, t = c.m, c.t
    mla = m.attention.mla
    heads_local = m.heads // t
    if mla is not None:
        d, kv_local = (mla.qk_head_dim + mla.v_head_dim) // 2, heads_local
    else:
        d, kv_local = m.head_dim, max(1, m.kv_heads // t)
    w, sinks = kind.window, m.attention.sinks
    if w is None:
        return AttentionShape(c.b, heads_local, kv_local, c.local_seq, c.local_seq * c.cp, d, True,
                              sinks)
    if m.attention.window_type == "chunked":
        chunks = max(1, c.local_seq // w)
        return AttentionShape(c.b * chunks, heads_local, kv_local, c.local_seq // chunks,
                              c.local_seq // chunks, d, True, sinks)
    return AttentionShape(c.b, heads_local, kv_local, c.local_seq,
                          min(window_keys(w), c.local_seq * c.cp), d, False, sinks)


def window_keys(window: int, tile: int = ATTENTION_BLOCK_ROWS) -> int:
    """The keys a sliding-window kernel computes per query: the whole key tiles of *tile* keys
    a query tile's window reaches (its own and those the window's other window - 1 keys start
    in), the keys outside the window masked in them. A window of 128 computes two tiles (256
    keys, half masked); a long window gains at most one tile."""
    return (-(-(window - 1) // tile) + 1) * tile


def _split(c: BlockContext) -> int:
    """The divisor of a sequence-parallel tensor (norms, residuals): t under SP, else 1."""
    return c.t if c.sp else 1


def mixer_block(c: BlockContext, kind: LayerKind) -> list[Item]:
    """Norm, (SP all-gather,) the mixer, (TP reduce-scatter or all-reduce,) residual."""
    if not kind.mixer:
        return []
    m, tok, t = c.m, c.tok, c.t
    h = m.hidden
    act = tok * h * BYTES
    out: list[Item] = [mem("norm1", 2 * act / _split(c), "norm")]
    if c.sp:
        out.append(Comm("tp-ag-attn", "allgather", "tp", act))
    if kind.mixer == "mamba":
        out += _mamba(c)
    else:
        out += _attention_core(c, kind)
    if t > 1:
        out.append(Comm("tp-rs-attn", "reducescatter" if c.sp else "allreduce", "tp", act))
    out.append(mem("residual1", 3 * act / _split(c), "residual"))
    return out


def _attention_core(c: BlockContext, kind: LayerKind) -> list[Item]:
    m, tok, t = c.m, c.tok, c.t
    h, a = m.hidden, m.heads
    shape = attention_shape(c, kind)
    mla = m.attention.mla
    out: list[Item] = []
    if mla is None:
        g, d = m.kv_heads, m.head_dim
        out.append(gemm("qkv", tok, (a + 2 * g) * d // t, h))
        out.append(mem("rope", 2 * tok * (a + g) * d // t * BYTES, "rope"))
        v_width = a * d
    else:
        if mla.q_lora_rank:
            out.append(gemm("q-down", tok, mla.q_lora_rank, h))
            out.append(mem("q-norm", 2 * tok * mla.q_lora_rank * BYTES, "norm"))
            out.append(gemm("q-up", tok, a * mla.qk_head_dim // t, mla.q_lora_rank))
        else:
            out.append(gemm("qkv", tok, a * mla.qk_head_dim // t, h))
        out.append(gemm("kv-down", tok, mla.kv_lora_rank + mla.qk_rope_head_dim, h))
        out.append(mem("kv-norm", 2 * tok * mla.kv_lora_rank * BYTES, "norm"))
        out.append(gemm("kv-up", tok, a * (mla.qk_nope_head_dim + mla.v_head_dim) // t,
                        mla.kv_lora_rank))
        out.append(mem("rope", 2 * tok * (a + 1) * mla.qk_rope_head_dim // t * BYTES, "rope"))
        v_width = a * mla.v_head_dim
    out.append(attention("attention", shape, "fwd"))
    out.append(gemm("attn-out", tok, h, v_width // t))
    return out


def _mamba(c: BlockContext) -> list[Item]:
    m, tok, t = c.m, c.tok, c.t
    mb = m.mamba
    assert mb is not None
    h = m.hidden
    d, gn = mb.d_inner // t, mb.groups * mb.state // t
    heads = mb.heads // t
    xbc = (d + 2 * gn) * tok * BYTES
    chunks = c.b * max(1, math.ceil(c.local_seq / mb.chunk))
    return [
        gemm("in-proj", tok, 2 * d + 2 * gn + heads, h),
        mem("conv1d", 2 * xbc, "act"),
        *ssd_forward(chunks, heads, max(1, mb.groups // t), mb.head_dim, mb.state, mb.chunk),
        mem("gated-norm", 3 * tok * d * BYTES, "norm"),
        gemm("out-proj", tok, h, d),
    ]


def ssd_forward(chunks: int, heads: int, groups: int, p: int, n: int, q: int) -> list[Op]:
    """Mamba-2's SSD scan over *chunks* chunks of *q* tokens (batch x chunks a sequence), *heads*
    heads of width *p*, *groups* B/C groups of state *n*, as mamba_ssm runs it (state-spaces/mamba
    @e9594ce, ops/triton/ssd_combined.py ``_mamba_chunk_scan_combined_fwd``), one op per kernel:
    dt's cumulative decay (fp32), each chunk's state B^T X per head (N x P x Q), the states passed
    between chunks through HBM (fp32 in, bf16 out), C B^T once per group (Q x Q x N), and the chunk
    scan, whose one kernel accumulates both (C B^T o L) X and C h into the same Q x P tile: one GEMM
    of contraction Q + N per head. Not modelled: the causal kernels skip the Q x Q tiles above the
    diagonal (how many depends on the autotuned tile). Checked on the H200's mamba_ssd.csv
    (``validate --suite compute``)."""
    hc, gc = chunks * heads, chunks * groups
    return [mem("ssd-cumsum", hc * q * 12, "act"),
            gemm("ssd-state", p, n, q, "ssm", hc),
            mem("ssd-state-pass", hc * p * n * 6, "act"),       # fp32 states in, bf16 out
            gemm("ssd-cb", q, q, n, "ssm", gc),
            gemm("ssd-scan", q, p, q + n, "ssm", hc)]


def ssd_backward(op: Op) -> list[Op]:
    """The backward kernels of one ``ssd_forward`` op (``_mamba_chunk_scan_combined_bwd``, same
    source): the scan's output gradient gives the states' gradient C^T dY (N x P x Q), the fused
    dX ((C B^T o L)^T dY + B dh: Q x P x Q + N), dC (dY h^T: Q x N x P), d(C B^T) (dY X^T: Q x Q x P)
    and the decay's gradient (another Q x Q x P); C B^T is recomputed and its gradient taken to B
    and C (two Q x N x Q per group); the chunk states are recomputed and give dB (X dh^T: Q x N x P):
    eight gradient products. The state pass is recomputed in fp32 and run backwards (fp32 in, bf16
    out), the cumulative decay recomputed and run backwards (4 fp32 passes)."""
    m, n_, k = op.shape
    hc = op.batch
    again = replace(op, name=op.name + "-recompute")
    if op.name == "ssd-scan":
        q, p, n = m, n_, k - m
        return [gemm("ssd-dstates", n, p, q, "ssm", hc), gemm("ssd-dx", q, p, q + n, "ssm", hc),
                gemm("ssd-dc", q, n, p, "ssm", hc), gemm("ssd-dcb", q, q, p, "ssm", hc),
                gemm("ssd-ddacs", q, q, p, "ssm", hc)]
    if op.name == "ssd-cb":
        q, n = m, k
        return [again, gemm("ssd-cb-db", q, n, q, "ssm", hc), gemm("ssd-cb-dc", q, n, q, "ssm", hc)]
    if op.name == "ssd-state":
        p, n, q = m, n_, k
        return [again, gemm("ssd-db", q, n, p, "ssm", hc)]
    if op.name == "ssd-state-pass":     # recomputed in fp32 (8 B an element), then fp32 in, bf16 out
        elements = op.bytes / 6
        return [replace(again, bytes=8 * elements), mem(op.name + "-bwd", 12 * elements, op.cls + "-bwd")]
    return [again, mem(op.name + "-bwd", 4 / 3 * op.bytes, op.cls + "-bwd")]


def _dense_mlp(c: BlockContext, width: int, prefix: str = "mlp") -> list[Item]:
    m, tok, t = c.m, c.tok, c.t
    up = (2 if m.mlp == "swiglu" else 1) * width // t
    return [gemm(f"{prefix}-up", tok, up, m.hidden),
            mem("activation", (3 if m.mlp == "swiglu" else 2) * tok * width // t * BYTES, "act"),
            gemm(f"{prefix}-down", tok, m.hidden, width // t)]


def mlp_block(c: BlockContext, kind: LayerKind) -> list[Item]:
    """Norm, the MLP (dense, or router, dispatch, experts, combine and shared experts), residual."""
    if not kind.mlp:
        return []
    m, tok, t = c.m, c.tok, c.t
    act = tok * m.hidden * BYTES
    out: list[Item] = [mem("norm2", 2 * act / _split(c), "norm")]
    dense = kind.mlp == "dense"
    shared = [] if dense else _shared(c)
    gathered = dense or bool(shared)        # the block's input gathered over TP (SP)
    if c.sp and gathered:
        out.append(Comm("tp-ag-mlp", "allgather", "tp", act))
    out += _dense_mlp(c, m.ffn_hidden) if dense else shared + _routed(c)
    if t > 1 and gathered:
        out.append(Comm("tp-rs-mlp", "reducescatter" if c.sp else "allreduce", "tp", act))
    out.append(mem("residual2", 3 * act / _split(c), "residual"))
    return out


def _shared(c: BlockContext) -> list[Item]:
    moe = c.m.moe
    assert moe is not None
    if not moe.shared_experts:
        return []
    return _dense_mlp(c, moe.shared_experts * c.m.shared_ffn, "shared")


def _routed(c: BlockContext) -> list[Item]:
    """Router, permutation, dispatch, the rank's experts, combine (module docstring)."""
    m = c.m
    moe = m.moe
    assert moe is not None
    h, e, k = m.hidden, moe.experts, moe.top_k
    shard = c.tok // _split(c)                      # tokens this rank routes (its SP shard)
    copies = shard * k                              # token copies it dispatches
    # The step waits for the busiest expert-parallel rank (MoE.busiest_share).
    busiest = moe.busiest_share(copies, c.ep)
    local = e // c.ep
    out: list[Item] = [gemm("router", shard, e, h, "router"),
                       mem("router-topk", shard * e * 4 * 2 + copies * 12, "moe-topk")]
    if c.einsum_dispatch:
        return out + _einsum_routed(c, shard)
    if c.dispatcher == "allgather":
        # Every rank of the expert group gathers all tokens, computes its experts' share.
        # Every rank of the expert group (ep x etp) gathers all its tokens and keeps the copies
        # routed to its experts: its 1/ep share of the group's, each expert's width over etp.
        group = c.ep * c.etp
        received = math.ceil(copies * c.etp * busiest)
        out.append(Comm("ep-dispatch", "allgather", "ep", shard * h * BYTES * group))
        out.append(mem("permute", 2 * received * h * BYTES, "moe-permute"))
    else:
        received = math.ceil(copies * busiest) * c.etp
        a2a = math.ceil(copies * busiest) * h * BYTES
        if c.dispatcher == "deepep":
            # DeepEP sends a token once per rank (in the domain) or domain (across) it reaches.
            a2a = math.ceil(a2a * _deepep_share(c))
        out.append(mem("permute", 2 * copies * h * BYTES, _permute_cls(c, "moe-permute")))
        if c.ep > 1:
            out.append(Comm("ep-dispatch", "alltoall", "ep", a2a))
        if c.etp > 1:
            out.append(Comm("etp-ag", "allgather", "etp", received * h * BYTES))
    per_expert = max(1, math.ceil(received / local))
    f = m.expert_ffn // c.etp
    up = (2 if m.mlp == "swiglu" else 1) * f
    # Dropless learned routing gives each local expert its own draw of the rows (token drop pads
    # every expert to its capacity; AutoModel's round-robin gate deals them out evenly).
    uneven = moe.capacity_factor is None and moe.routing != "round_robin"
    if uneven and c.group_tile_rows and local > 1:
        # a whole tile wherever one of the local - 1 later groups starts inside one (its rows
        # are a router's draws, so the boundary almost never falls on a tile's first row)
        per_expert += math.ceil(c.group_tile_rows * (local - 1) / local)
    out += [gemm("expert-up", per_expert, up, h, batch=local, uneven=uneven),
            mem("activation", (3 if m.mlp == "swiglu" else 2) * received * f * BYTES, "act"),
            gemm("expert-down", per_expert, h, f, batch=local, uneven=uneven)]
    if c.dispatcher == "allgather":
        out.append(mem("unpermute", 2 * received * h * BYTES, "moe-unpermute"))
        out.append(Comm("ep-combine", "reducescatter", "ep", shard * h * BYTES * c.ep * c.etp))
        return out
    if c.etp > 1:
        out.append(Comm("etp-rs", "reducescatter", "etp", received * h * BYTES))
    if c.ep > 1:
        combine = math.ceil(copies * busiest) * h * BYTES
        if c.dispatcher == "deepep":          # reduced within the node first
            combine = math.ceil(combine * _deepep_share(c))
        out.append(Comm("ep-combine", "alltoall", "ep", combine))
    out.append(mem("unpermute", 2 * copies * h * BYTES, _permute_cls(c, "moe-unpermute")))
    return out


def _einsum_routed(c: BlockContext, shard: int) -> list[Item]:
    """A token-dropping MoE moved by one-hot einsums (module docstring): both masks written and
    read once, the dispatch into every expert's C slots of each local sequence, the all-to-all of
    the slots to their experts' ranks, the rank's experts over their slots, and back."""
    m, moe = c.m, c.m.moe
    assert moe is not None and moe.capacity_factor is not None
    h, e, k, s = m.hidden, moe.experts, moe.top_k, c.local_seq
    seqs = max(1, shard // s)
    per_expert = int(max(math.ceil(s * k / e) * moe.capacity_factor, moe.capacity_factor))
    if per_expert < 1:
        raise ConfigError(f"model.moe.capacity_factor: {moe.capacity_factor:g} leaves each expert 0 "
                          f"slots of a {s}-token sequence (MaxText's int(max(ceil(S k / E) x cf, "
                          f"cf))), dropping every token; valid: at least {1 / math.ceil(s * k / e):g}")
    slots = e * per_expert
    local = e // c.ep
    f = m.expert_ffn // c.etp
    up = (2 if m.mlp == "swiglu" else 1) * f
    rows = seqs * slots // e                        # each expert's slots on the rank
    received = rows * c.ep * local                  # its experts' slots, from every rank of the group
    out: list[Item] = [mem("dispatch-masks", 4 * seqs * s * slots * BYTES, "moe-topk"),
                       gemm("moe-dispatch", slots, h, s, "dispatch", batch=seqs)]
    if c.ep > 1:
        out.append(Comm("ep-dispatch", "alltoall", "ep", seqs * slots * h * BYTES))
    out += [gemm("expert-up", rows * c.ep, up, h, batch=local),
            mem("activation", (3 if m.mlp == "swiglu" else 2) * received * f * BYTES, "act"),
            gemm("expert-down", rows * c.ep, h, f, batch=local)]
    if c.ep > 1:
        out.append(Comm("ep-combine", "alltoall", "ep", seqs * slots * h * BYTES))
    out.append(gemm("moe-combine", s, h, slots, "combine", batch=seqs))
    return out


def _permute_cls(c: BlockContext, cls: str) -> str:
    """DeepEP fuses the permutation into its dispatch and combine kernels (DeepEP README: the
    normal kernels lay tokens out by expert as they receive them): a plain gather's traffic."""
    return "embedding" if c.dispatcher == "deepep" else cls


def _deepep_share(c: BlockContext) -> float:
    """DeepEP's bytes per all-to-all byte. It sends a token once to each other rank its experts
    sit on within the NVLink domain, and once to each other domain over the network, where the
    domain forwards it (``sim.workload.routing``: where the top-k land under the model's
    routing); the all-to-all here spreads its bytes evenly over the group's other ranks, so the
    share is set to put the sends of the path that bounds it on that path: within one domain the
    other ranks' sends over the (ep - 1) / ep of the bytes that leave the rank, across domains
    the other domains' sends over the (ep - domain) / ep that leave the domain (the NVLink
    forwarding, some 9x faster, runs beside it). The hidden states go in BF16: Megatron-Core hands
    them to DeepEP's dispatch as they are (megatron/core/transformer/moe/fused_a2a.py
    ``FusedDispatch``) and its HybridEP path refuses FP8 dispatch ("HybridEP dispatcher does
    not support fp8 dispatch now", same file); a quantized wire format is opt-in, for the ncclep
    backend only (transformer_config.py ``moe_dispatch_fwd_dtype``, default 'bf16'; Megatron-LM
    d98e8a6, 2026-08-22). DeepSeek's own FP8 dispatch (report, section 3.3.1) is no stack here."""
    moe = c.m.moe
    assert moe is not None
    ep, d = c.ep, max(1, min(c.domain_ranks, c.ep))
    dest = destinations(moe.experts, moe.top_k, ep, d, moe.routing, moe.router_groups,
                        moe.router_group_topk)
    if ep <= d:
        return dest.ranks * ep / (ep - 1) / moe.top_k
    return dest.domains * ep / (ep - d) / moe.top_k
