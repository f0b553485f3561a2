"""Model architectures: the ``model:`` section of a scenario, presets, and parameter counts.

Pure data and arithmetic. A model is a stack of layers, each of one *kind* (``LayerKind``): a
token mixer (full or local attention, multi-head latent attention, or a Mamba-2 mixer) and an MLP
(dense, or a mixture of experts with routed and shared experts), either of them possibly absent
(hybrid models count each sublayer as a layer, as Megatron's ``hybrid_override_pattern`` does).

Counts follow the standard decoder layout: attention Q/O of hidden x (heads x head_dim), K/V of
hidden x (kv_heads x head_dim) (head_dim = hidden / heads unless the model sets it); MLA's
low-rank projections (DeepSeek-V2 section 2.1: W_DQ, W_UQ/W_QR, W_DKV, W_KR, W_UK, W_UV, W_O);
an MLP of 3 matrices (SwiGLU) or 2 (GELU, squared ReLU); Mamba-2's in_proj to (z, x, B, C, dt),
depthwise conv over (x, B, C), per-head A, D and dt bias, gated norm and out_proj (Dao & Gu 2024,
section 7); two norms per transformer layer, one per hybrid sublayer; untied input embedding
and output head; a multi-token-prediction module (DeepSeek-V3 section 2.2) as two norms, a
2h -> h projection and one more layer of the model's last kind, sharing embedding and head.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from statistics import NormalDist

__all__ = ["MoE", "MLA", "Attention", "Mamba", "LayerKind", "ModelSpec", "PRESETS",
           "HYBRID_CHARS"]

# Megatron-LM hybrid layer allocation (megatron/core/ssm/mamba_hybrid_layer_allocation.py):
# one character per layer.
HYBRID_CHARS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


# How a router spreads a token's top-k experts over the expert ranks (sim.workload.routing).
ROUTINGS = ("learned", "round_robin")


@dataclass(frozen=True, slots=True)
class MoE:
    """Routed experts (``experts``, ``top_k`` of them per token, each ``ffn_hidden`` wide: None =
    the model's ``ffn_hidden``), ``shared_experts`` every token also runs (``shared_ffn_hidden``
    wide: None = the routed width), the first ``first_dense_layers`` layers dense, then an MoE
    layer every ``every``-th layer (the others dense). ``capacity_factor``: None = dropless;
    else each expert takes at most that multiple of its mean share (token drop, padded to it).
    ``load_imbalance``: the busiest expert-parallel rank's tokens over the mean (None: the
    measured default of ``sim.calibration``). ``routing``: how a token's experts spread over the
    ranks (``ROUTINGS``: ``learned``, or AutoModel's ``round_robin`` fake gate; what each
    means: ``sim.workload.routing``); ``router_groups`` / ``router_group_topk``: group-limited
    routing, each token's experts within that many of the contiguous expert groups (DeepSeek-V3:
    8 / 4; 1 / 1: none)."""

    experts: int
    top_k: int
    capacity_factor: float | None = None
    ffn_hidden: int | None = None
    shared_experts: int = 0
    shared_ffn_hidden: int | None = None
    first_dense_layers: int = 0
    every: int = 1
    load_imbalance: float | None = None
    routing: str = "learned"
    router_groups: int = 1
    router_group_topk: int = 1

    def busiest_share(self, copies_per_rank: float, ep: int) -> float:
        """The busiest expert-parallel rank's routed token copies over the mean: token drop pads
        every expert to ``capacity_factor``; else ``load_imbalance`` where given; else the
        statistical excess of routing that is balanced on average (what Megatron's
        --moe-router-force-load-balancing and AutoModel's fake_balanced_gate benchmarks run):
        each rank's count is binomial around *copies_per_rank*, and the step waits for the largest
        of *ep* of them, mean + E[max of ep standard normals] x sd (Blom's approximation)."""
        if self.capacity_factor is not None:
            return self.capacity_factor
        if self.load_imbalance is not None:
            return self.load_imbalance
        if ep <= 1 or copies_per_rank <= 0:
            return 1.0
        z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
        return 1.0 + z * math.sqrt((1 - 1 / ep) / copies_per_rank)


@dataclass(frozen=True, slots=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a ``q_lora_rank`` latent
    (0: a full-rank W_Q), keys and values through a ``kv_lora_rank`` latent; each head's query and
    key are ``qk_nope_head_dim`` + ``qk_rope_head_dim`` wide (the rope part of the key shared by
    all heads), its value ``v_head_dim``."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class Attention:
    """How the attention layers attend: ``mla`` (None: MHA/GQA), local layers with a ``window``
    of keys (None: every layer global), ``window_type`` ``sliding`` (each query its last
    ``window`` keys) or ``chunked`` (queries see their own chunk of ``window`` tokens: Llama 4),
    every ``global_every``-th attention layer global (0: none), learned ``sinks`` (one logit per
    head: gpt-oss)."""

    mla: MLA | None = None
    window: int | None = None
    window_type: str = "sliding"
    global_every: int = 0
    sinks: bool = False


@dataclass(frozen=True, slots=True)
class Mamba:
    """A Mamba-2 mixer: ``heads`` SSM heads of ``head_dim`` channels (d_inner = their product),
    ``state`` the SSM state size N, ``groups`` the B/C groups, ``conv_width`` the depthwise conv,
    ``chunk`` the SSD scan's chunk length (Dao & Gu 2024, section 6)."""

    heads: int
    head_dim: int = 64
    state: int = 128
    groups: int = 8
    conv_width: int = 4
    chunk: int = 128

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim


@dataclass(frozen=True, slots=True)
class LayerKind:
    """What one layer is: ``mixer`` ``attention`` | ``mamba`` | "" (none), ``window`` the local
    attention window (None: global), ``mlp`` ``dense`` | ``moe`` | "" (none)."""

    mixer: str
    mlp: str
    window: int | None = None

    @property
    def label(self) -> str:
        mix = {"attention": "attention" if self.window is None else f"local-{self.window}",
               "mamba": "mamba", "": ""}[self.mixer]
        return "+".join(x for x in (mix, self.mlp) if x) or "empty"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    mlp: str = "swiglu"            # "swiglu" | "gelu" | "relu2" (squared ReLU: Nemotron-H)
    moe: MoE | None = None
    head_dim_: int | None = None   # None: hidden / heads (most models); set where a family decouples them
    attention: Attention = field(default_factory=Attention)
    mamba: Mamba | None = None
    layer_pattern: str | None = None   # hybrid: one HYBRID_CHARS character per layer
    mtp_layers: int = 0                # multi-token-prediction modules (DeepSeek-V3: 1)

    @property
    def head_dim(self) -> int:
        return self.head_dim_ if self.head_dim_ is not None else self.hidden // self.heads

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    @property
    def expert_ffn(self) -> int:
        assert self.moe is not None
        return self.moe.ffn_hidden or self.ffn_hidden

    @property
    def shared_ffn(self) -> int:
        assert self.moe is not None
        return self.moe.shared_ffn_hidden or self.expert_ffn

    # ------------------------------------------------------------------ the stack
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Every layer's kind, in order (module docstring)."""
        return _layer_kinds(self)

    def _build_layer_kinds(self) -> tuple[LayerKind, ...]:
        att = self.attention

        def window(i_attn: int) -> int | None:
            if att.window is None or (att.global_every and (i_attn + 1) % att.global_every == 0):
                return None
            return att.window

        out: list[LayerKind] = []
        if self.layer_pattern is not None:
            n_attn = 0
            for ch in self.layer_pattern:
                kind = HYBRID_CHARS[ch]
                if kind == "attention":
                    out.append(LayerKind("attention", "", window(n_attn)))
                    n_attn += 1
                elif kind == "mamba":
                    out.append(LayerKind("mamba", ""))
                else:
                    out.append(LayerKind("", "dense" if kind == "mlp" else "moe"))
            return tuple(out)
        moe = self.moe
        for i in range(self.layers):
            if moe is None or i < moe.first_dense_layers:
                mlp = "dense"
            else:
                mlp = "moe" if (i - moe.first_dense_layers) % moe.every == moe.every - 1 else "dense"
            out.append(LayerKind("attention", mlp, window(i)))
        return tuple(out)

    def mtp_kind(self) -> LayerKind:
        """The kind of a multi-token-prediction module's layer: the model's last transformer
        layer's kind."""
        kinds = [k for k in self.layer_kinds() if k.mixer == "attention" and k.mlp]
        return kinds[-1] if kinds else LayerKind("attention", "moe" if self.moe else "dense")

    # ------------------------------------------------------------------ parameters
    def attention_params(self) -> int:
        a, h = self.heads, self.hidden
        sinks = a if self.attention.sinks else 0
        mla = self.attention.mla
        if mla is None:
            hd = self.head_dim
            return 2 * h * a * hd + 2 * h * self.kv_heads * hd + sinks
        q = (h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * a * mla.qk_head_dim
             if mla.q_lora_rank else h * a * mla.qk_head_dim)
        kv = (h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
              + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim))
        return q + kv + a * mla.v_head_dim * h + sinks

    def mamba_params(self) -> int:
        mb = self.mamba
        assert mb is not None
        d, gn = mb.d_inner, mb.groups * mb.state
        in_proj = self.hidden * (2 * d + 2 * gn + mb.heads)
        conv = (d + 2 * gn) * (mb.conv_width + 1)
        return in_proj + conv + 3 * mb.heads + d + d * self.hidden

    def mlp_params(self) -> int:
        """Parameters of one dense MLP."""
        return self.mlp_matrices * self.hidden * self.ffn_hidden

    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self.mlp_matrices * self.hidden * self.expert_ffn

    def kind_params(self, kind: LayerKind, active_only: bool = False) -> int:
        """Parameters of one layer of *kind* (active ones: top-k routed experts)."""
        h = self.hidden
        n = 0
        if kind.mixer == "attention":
            n += self.attention_params() + h
        elif kind.mixer == "mamba":
            n += self.mamba_params() + h
        if kind.mlp == "dense":
            n += self.mlp_params() + h
        elif kind.mlp == "moe":
            assert self.moe is not None
            routed = self.moe.top_k if active_only else self.moe.experts
            shared = self.moe.shared_experts * self.mlp_matrices * h * self.shared_ffn
            n += routed * self.expert_params() + shared + h * self.moe.experts + h
        return n

    def layer_params(self, active_only: bool = False) -> int:
        """Mean parameters of a layer (every layer's, for a uniform stack)."""
        return round(sum(self.kind_params(k, active_only) for k in self.layer_kinds()) / self.layers)

    def mtp_params(self, active_only: bool = False) -> int:
        """Parameters of the multi-token-prediction modules (embedding and head shared)."""
        h = self.hidden
        return self.mtp_layers * (2 * h + 2 * h * h + self.kind_params(self.mtp_kind(), active_only))

    def non_embedding_params(self, active_only: bool = False) -> int:
        """N in the PaLM MFU formula (active parameters for MoE when *active_only*), MTP apart."""
        return _non_embedding_params(self, active_only)

    def embedding_params(self) -> int:
        return 2 * self.vocab * self.hidden                                  # input + output head

    def total_params(self) -> int:
        return self.non_embedding_params() + self.embedding_params()


# PERF: a model is frozen; its stack and parameter count are asked for once per layer, stage and
# layout (a plan screens thousands), so they are worked out once per model (issue 32).
@functools.lru_cache(maxsize=64)
def _layer_kinds(model: ModelSpec) -> tuple[LayerKind, ...]:
    return ModelSpec._build_layer_kinds(model)


@functools.lru_cache(maxsize=64)
def kind_index(model: ModelSpec) -> tuple[tuple[LayerKind, ...], tuple[int, ...]]:
    """The model's distinct layer kinds in order of first appearance and each layer's index among
    them (once per model)."""
    distinct: dict[LayerKind, int] = {}
    index = tuple(distinct.setdefault(k, len(distinct)) for k in model.layer_kinds())
    return tuple(distinct), index


@functools.lru_cache(maxsize=128)
def _non_embedding_params(model: ModelSpec, active_only: bool) -> int:
    return sum(model.kind_params(k, active_only) for k in model.layer_kinds()) + model.hidden


# Sources: Llama 3 "The Llama 3 Herd of Models" (Dubey et al. 2024) Table 3; GPT-3 (Brown et al.
# 2020) Table 2.1; Mixtral of Experts (Jiang et al. 2024) Table 1. Qwen3 MoE: the released
# models' Megatron configs in Ascend/MindSpeed-RL configs/model/qwen3_235b_a22b.yaml and
# qwen3_30b_a3b.yaml (gitcode.com; num_layers, hidden_size, num_attention_heads, num_query_groups,
# kv_channels 128 (head_dim apart from hidden / heads), num_experts 128, moe_router_topk 8,
# moe_ffn_hidden_size, padded_vocab_size 151936; no shared experts, every layer MoE), as the
# Qwen3MoE config.json of Hugging Face's Qwen3-Coder-30B-A3B copies print them.
# DeepSeek-V3 and Kimi K2: their config.json on Hugging Face (deepseek-ai/DeepSeek-V3,
# moonshotai/Kimi-K2-Instruct: hidden_size, intermediate_size (dense), moe_intermediate_size,
# n_routed_experts, n_shared_experts, num_experts_per_tok, first_k_dense_replace, q_lora_rank,
# kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, vocab_size,
# num_nextn_predict_layers, n_group and topk_group: 8 / 4 for DeepSeek-V3, 1 / 1 for Kimi K2);
# DeepSeek-V3 technical report (arXiv 2412.19437) section 4.2.
# gpt-oss-120b: openai/gpt-oss-120b config.json (num_local_experts 128, experts_per_token 4,
# intermediate_size 2880, head_dim 64, sliding_window 128, layer_types alternating sliding and
# full attention from layer 0) and the gpt-oss model card (attention sinks).
# gpt-oss-20b: openai/gpt-oss-20b config.json (num_hidden_layers 24, num_local_experts 32,
# num_experts_per_tok 4, hidden_size and intermediate_size 2880, 64 heads / 8 kv heads of head_dim
# 64, sliding_window 128, layer_types alternating sliding and full attention from layer 0,
# vocab_size 201088); the model card (arXiv 2508.10925, Table 1: 20.9B parameters).
# Llama 4 Maverick: meta-llama/Llama-4-Maverick-17B-128E config.json text_config
# (intermediate_size 8192 per expert and the shared expert, intermediate_size_mlp 16384 dense,
# interleave_moe_layer_step 2, num_experts_per_tok 1, attention_chunk_size 8192, no_rope_layers:
# every 4th layer global).
# Nemotron-H-56B: Megatron-Bridge src/megatron/bridge/models/nemotronh/nemotron_h_provider.py
# (NemotronH56BModelProvider: hybrid_override_pattern (54 M, 10 *, 54 -), hidden 8192, ffn 32768
# squared ReLU, 64 heads / 8 query groups, mamba_num_heads 256, mamba_state_dim 256, head dim 64,
# 8 groups; Megatron-LM MambaMixer d_conv 4, chunk_size 128), vocab 131072 (HF NemotronHConfig).
# Nemotron 3 Nano 30B-A3B: the same file's Nemotron3NanoProvider (52-layer M/E/* pattern, hidden
# 2688, 32 heads / 2 query groups, kv_channels 128, Mamba 64 heads x 64, state 128, 8 groups,
# 128 experts top-6 of width 1856, one shared expert of 3712, squared ReLU).
PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("llama3-8b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8,
                  vocab=128256),
        ModelSpec("llama3-70b", layers=80, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8,
                  vocab=128256),
        ModelSpec("llama3-405b", layers=126, hidden=16384, ffn_hidden=53248, heads=128, kv_heads=8,
                  vocab=128256),
        ModelSpec("gpt3-175b", layers=96, hidden=12288, ffn_hidden=4 * 12288, heads=96, kv_heads=96,
                  vocab=50257, mlp="gelu"),
        ModelSpec("mixtral-8x7b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8,
                  vocab=32000, moe=MoE(experts=8, top_k=2)),
        ModelSpec("qwen3-235b-a22b", layers=94, hidden=4096, ffn_hidden=1536, heads=64, kv_heads=4,
                  vocab=151936, moe=MoE(experts=128, top_k=8), head_dim_=128),
        ModelSpec("qwen3-30b-a3b", layers=48, hidden=2048, ffn_hidden=768, heads=32, kv_heads=4,
                  vocab=151936, moe=MoE(experts=128, top_k=8), head_dim_=128),
        ModelSpec("deepseek-v3", layers=61, hidden=7168, ffn_hidden=18432, heads=128, kv_heads=128,
                  vocab=129280, moe=MoE(experts=256, top_k=8, ffn_hidden=2048, shared_experts=1,
                                        first_dense_layers=3, router_groups=8,
                                        router_group_topk=4),
                  attention=Attention(mla=MLA(1536, 512, 128, 64, 128)), mtp_layers=1),
        ModelSpec("kimi-k2", layers=61, hidden=7168, ffn_hidden=18432, heads=64, kv_heads=64,
                  vocab=163840, moe=MoE(experts=384, top_k=8, ffn_hidden=2048, shared_experts=1,
                                        first_dense_layers=1),
                  attention=Attention(mla=MLA(1536, 512, 128, 64, 128))),
        ModelSpec("gpt-oss-120b", layers=36, hidden=2880, ffn_hidden=2880, heads=64, kv_heads=8,
                  vocab=201088, moe=MoE(experts=128, top_k=4), head_dim_=64,
                  attention=Attention(window=128, global_every=2, sinks=True)),
        ModelSpec("gpt-oss-20b", layers=24, hidden=2880, ffn_hidden=2880, heads=64, kv_heads=8,
                  vocab=201088, moe=MoE(experts=32, top_k=4), head_dim_=64,
                  attention=Attention(window=128, global_every=2, sinks=True)),
        ModelSpec("llama4-maverick", layers=48, hidden=5120, ffn_hidden=16384, heads=40, kv_heads=8,
                  vocab=202048, moe=MoE(experts=128, top_k=1, ffn_hidden=8192, shared_experts=1,
                                        every=2),
                  head_dim_=128,
                  attention=Attention(window=8192, window_type="chunked", global_every=4)),
        ModelSpec("nemotron-h-56b", layers=118, hidden=8192, ffn_hidden=32768, heads=64,
                  kv_heads=8, vocab=131072, mlp="relu2",
                  mamba=Mamba(heads=256, head_dim=64, state=256, groups=8),
                  layer_pattern=("M-M-M-M*-" + "M-M-M-M-M*-" * 9 + "M-M-M-M-M-")),
        ModelSpec("nemotron-3-nano", layers=52, hidden=2688, ffn_hidden=1856, heads=32,
                  kv_heads=2, vocab=131072, mlp="relu2", head_dim_=128,
                  moe=MoE(experts=128, top_k=6, shared_experts=1, shared_ffn_hidden=3712),
                  mamba=Mamba(heads=64, head_dim=64, state=128, groups=8),
                  layer_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"),
    )
}
