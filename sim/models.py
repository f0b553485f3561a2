"""Model architectures: the ``model:`` section of a scenario, presets, and parameter counts.

Pure data and arithmetic. Counts follow the standard decoder layout: attention Q/O of
hidden x (heads x head_dim), K/V of hidden x (kv_heads x head_dim) (head_dim = hidden / heads unless
the model sets it, as MaxText's scaled models and Qwen3 do), an MLP of 3 matrices (SwiGLU)
or 2 (GELU), two norms per layer; untied input embedding and output head.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MoE", "ModelSpec", "PRESETS"]


@dataclass(frozen=True, slots=True)
class MoE:
    experts: int
    top_k: int
    capacity_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    mlp: str = "swiglu"            # "swiglu" | "gelu"
    moe: MoE | None = None
    head_dim_: int | None = None   # None: hidden / heads (most models); set where a family decouples them

    @property
    def head_dim(self) -> int:
        return self.head_dim_ if self.head_dim_ is not None else self.hidden // self.heads

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    def attention_params(self) -> int:
        hd = self.head_dim
        return 2 * self.hidden * self.heads * hd + 2 * self.hidden * self.kv_heads * hd

    def mlp_params(self) -> int:
        """Parameters of one dense MLP (one expert for MoE)."""
        return self.mlp_matrices * self.hidden * self.ffn_hidden

    def layer_params(self, active_only: bool = False) -> int:
        norms = 2 * self.hidden
        if self.moe is None:
            return self.attention_params() + self.mlp_params() + norms
        experts = self.moe.top_k if active_only else self.moe.experts
        router = self.hidden * self.moe.experts
        return self.attention_params() + experts * self.mlp_params() + router + norms

    def non_embedding_params(self, active_only: bool = False) -> int:
        """N in the PaLM MFU formula (active parameters for MoE when *active_only*)."""
        return self.layers * self.layer_params(active_only) + self.hidden   # + final norm

    def embedding_params(self) -> int:
        return 2 * self.vocab * self.hidden                                  # input + output head

    def total_params(self) -> int:
        return self.non_embedding_params() + self.embedding_params()


# Sources: Llama 3 "The Llama 3 Herd of Models" (Dubey et al. 2024) Table 3; GPT-3 (Brown et al.
# 2020) Table 2.1; Mixtral of Experts (Jiang et al. 2024) Table 1. Qwen3 MoE: the released
# models' Megatron configs in Ascend/MindSpeed-RL configs/model/qwen3_235b_a22b.yaml and
# qwen3_30b_a3b.yaml (gitcode.com; num_layers, hidden_size, num_attention_heads, num_query_groups,
# kv_channels 128 (head_dim apart from hidden / heads), num_experts 128, moe_router_topk 8,
# moe_ffn_hidden_size, padded_vocab_size 151936; no shared experts, every layer MoE), as the
# Qwen3MoE config.json of Hugging Face's Qwen3-Coder-30B-A3B copies print them.
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
    )
}
