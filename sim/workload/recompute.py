"""Megatron-Core's selective recomputation by module (``training.recompute_modules``, the names in
``sim.config.remat.RECOMPUTE_MODULES``): which of a
layer's forward items the backward runs again, and which kept activations that frees.

Megatron-Core ``TransformerConfig.recompute_modules`` (with ``recompute_granularity:
selective``) checkpoints named submodules: their inputs are kept, everything they save is dropped
and their forward runs again inside the backward. The names and what each covers, as the
Megatron-Core transformer layer, MLA, MLP and MoE modules apply them
(megatron/core/transformer/transformer_config.py ``recompute_modules``, Megatron-LM d98e8a6):

- ``core_attn``: the attention core (the fused kernel runs its forward again);
- ``layernorm``: the input norms of the mixer and of the MLP;
- ``mla_up_proj``: MLA's query and key/value up-projections;
- ``mlp``: a dense MLP (its GEMMs, activation and tensor-parallel collectives);
- ``moe``: the whole MoE block: router, permutation, dispatch, experts, combine, shared experts;
- ``moe_act``: the routed experts' activation function;
- ``shared_experts``: the shared experts.

Modules a layer does not have (``moe`` on a dense layer, ``core_attn`` on a Mamba-2 layer) are
nothing for it.
"""

from __future__ import annotations

from ..models import LayerKind
from .ops import Item, Op, attention

__all__ = ["module_recompute", "dropped_tensors"]


def _modules_of(fwd: list[Item] | tuple[Item, ...], kind: LayerKind) -> list[frozenset[str]]:
    """The modules each forward item belongs to (``sim.workload.blocks`` names its items)."""
    out: list[frozenset[str]] = []
    in_mlp = False
    previous = ""
    for it in fwd:
        name = it.name
        if name == "norm2":
            in_mlp = True
        mods: set[str] = set()
        if name in ("norm1", "norm2"):
            mods.add("layernorm")
        elif not in_mlp:
            if isinstance(it, Op) and it.kind == "attention":
                mods.add("core_attn")
            elif name in ("q-up", "kv-up"):
                mods.add("mla_up_proj")
        elif name != "residual2":
            mods.add("moe" if kind.mlp == "moe" else "mlp")
            if name.startswith("shared-") or (name == "activation" and previous == "shared-up"):
                mods.add("shared_experts")
            elif name == "activation" and previous == "expert-up":
                mods.add("moe_act")
        out.append(frozenset(mods))
        previous = name
    return out


def module_recompute(fwd: list[Item] | tuple[Item, ...], kind: LayerKind,
                     modules: tuple[str, ...]) -> tuple[Item, ...]:
    """The forward items of the *modules* a backward runs again, in forward order; the attention
    core as a forward pass of its kernel (a checkpointed core runs it in full again)."""
    wanted = set(modules)
    out: list[Item] = []
    for it, mods in zip(fwd, _modules_of(fwd, kind)):
        if not mods & wanted:
            continue
        if isinstance(it, Op) and it.kind == "attention":
            assert it.attn is not None
            out.append(attention("attention-recompute", it.attn, "fwd"))
        else:
            out.append(it)
    return tuple(out)


def dropped_tensors(kind: LayerKind, modules: tuple[str, ...]) -> dict[str, str]:
    """Kept-tensor name (``sim.workload.activations``) -> the part of it the *modules* drop
    (``all``, ``experts`` or ``shared``) for a layer of *kind*: a checkpointed module keeps its
    input only."""
    m = set(modules)
    out: dict[str, str] = {}
    if "layernorm" in m:
        out.update({"attn_norm_out": "all", "mlp_norm_out": "all"})
    if "mla_up_proj" in m and kind.mixer == "attention":
        out.update({"query_proj": "all", "key_proj": "all", "value_proj": "all"})
    mlp = ("mlpwi_0", "mlpwi_1", "mlp_act", "silu_out")
    if (kind.mlp == "dense" and "mlp" in m) or (kind.mlp == "moe" and "moe" in m):
        out.update({t: "all" for t in mlp + ("moe_permuted",)})
    elif kind.mlp == "moe":
        if "moe_act" in m:
            out["mlp_act"] = "experts"
        if "shared_experts" in m:
            for t in mlp:
                out[t] = "all" if out.get(t) == "experts" else "shared"
    return out
