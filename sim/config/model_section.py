"""The ``model:`` section of a scenario -> ``ModelSpec``: a preset, its overrides, or explicit
fields, with the layer kinds (``sim.models``) and every rule a model must keep, each broken rule
one line naming the field, the value and what would be valid.

Keys (DESIGN.md schema; the nested sections are optional)::

    model:
      preset: deepseek-v3          # or the explicit fields below
      layers: 61   hidden: 7168   ffn_hidden: 18432   heads: 128   kv_heads: 128   vocab: 129280
      head_dim: 128                # where the attention width is not hidden
      mlp: swiglu                  # swiglu | gelu | relu2
      moe: {experts: 256, top_k: 8, ffn_hidden: 2048, shared_experts: 1, shared_ffn_hidden: 2048,
            first_dense_layers: 3, every: 1, capacity_factor: null, load_imbalance: null,
            routing: learned, router_groups: 8, router_group_topk: 4}
      attention: {mla: {q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128,
                        qk_rope_head_dim: 64, v_head_dim: 128},
                  window: 128, window_type: sliding, global_every: 2, sinks: true}
      mamba: {heads: 128, head_dim: 64, state: 128, groups: 8, conv_width: 4, chunk: 128}
      layer_pattern: "M-M*-M-"     # hybrid: M Mamba-2, * attention, - MLP, E MoE; one per layer
      mtp_layers: 1
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from ..errors import ConfigError
from ..models import HYBRID_CHARS, MLA, PRESETS, ROUTINGS, Attention, Mamba, ModelSpec, MoE
from .fields import Section

__all__ = ["MODEL_KEYS", "read_model", "check_model_sequence"]

MODEL_KEYS = frozenset({"preset", "name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads",
                        "head_dim", "vocab", "mlp", "moe", "attention", "mamba", "layer_pattern",
                        "mtp_layers"})
MOE_KEYS = frozenset(f.name for f in fields(MoE))
ATTENTION_KEYS = frozenset({"mla", "window", "window_type", "global_every", "sinks"})
MLA_KEYS = frozenset(f.name for f in fields(MLA))
MAMBA_KEYS = frozenset(f.name for f in fields(Mamba))
NESTED = {"moe": MOE_KEYS, "attention": ATTENTION_KEYS, "mamba": MAMBA_KEYS}


def _moe(s: Section, base: MoE | None) -> MoE | None:
    if not s.has("moe"):
        return base
    m = s.section("moe", MOE_KEYS)
    b = base                              # the preset's experts, the defaults of every field

    def opt(key: str) -> Any:
        return m.opt_int(key) if m.has(key) else getattr(b, key, None)

    cf = m.raw.get("capacity_factor", getattr(b, "capacity_factor", None))
    imb = m.raw.get("load_imbalance", getattr(b, "load_imbalance", None))
    moe = MoE(
        experts=m.integer("experts", b.experts if b else None),
        top_k=m.integer("top_k", b.top_k if b else None),
        capacity_factor=(None if cf is None else
                         m.number("capacity_factor", minimum=0.0, strict_min=True)),
        ffn_hidden=opt("ffn_hidden"),
        shared_experts=m.integer("shared_experts", b.shared_experts if b else 0, minimum=0),
        shared_ffn_hidden=opt("shared_ffn_hidden"),
        first_dense_layers=m.integer("first_dense_layers", b.first_dense_layers if b else 0,
                                     minimum=0),
        every=m.integer("every", b.every if b else 1),
        load_imbalance=None if imb is None else m.number("load_imbalance", minimum=1.0),
        routing=m.text("routing", b.routing if b else "learned", choices=ROUTINGS),
        router_groups=m.integer("router_groups", b.router_groups if b else 1),
        router_group_topk=m.integer("router_group_topk", b.router_group_topk if b else 1),
    )
    if moe.top_k > moe.experts:
        raise ConfigError(f"model.moe.top_k: {moe.top_k} exceeds experts = {moe.experts}; "
                          f"valid: 1 .. {moe.experts}")
    g, gk = moe.router_groups, moe.router_group_topk
    if moe.experts % g:
        raise ConfigError(f"{m.at('router_groups')}: {g} does not divide experts = "
                          f"{moe.experts}; valid: a divisor of {moe.experts} (1: no groups)")
    if gk > g or gk * (moe.experts // g) < moe.top_k:
        raise ConfigError(f"{m.at('router_group_topk')}: {gk} of {g} groups of "
                          f"{moe.experts // g} experts cannot hold top_k = {moe.top_k}; valid: "
                          f"{-(-moe.top_k * g // moe.experts)} .. {g}")
    return moe


def _attention(s: Section, base: Attention) -> Attention:
    if not s.has("attention"):
        return base
    a = s.section("attention", ATTENTION_KEYS)
    mla = base.mla
    if a.has("mla"):
        if a.raw["mla"] is None or a.raw["mla"] is False:
            mla = None
        else:
            q = a.section("mla", MLA_KEYS)
            old = mla
            mla = MLA(**{k: q.integer(k, getattr(old, k) if old else None,
                                      minimum=0 if k == "q_lora_rank" else 1) for k in MLA_KEYS})
    window = a.opt_int("window") if a.has("window") else base.window
    return Attention(mla=mla, window=window,
                     window_type=a.text("window_type", base.window_type, ("sliding", "chunked")),
                     global_every=a.integer("global_every", base.global_every, minimum=0),
                     sinks=a.flag("sinks", base.sinks))


def _mamba(s: Section, base: Mamba | None) -> Mamba | None:
    if not s.has("mamba"):
        return base
    mb = s.section("mamba", MAMBA_KEYS)
    if not mb.has("heads") and base is None:
        raise ConfigError(f"{mb.at('heads')}: missing; give the Mamba-2 mixer's SSM heads "
                          "(d_inner = heads x head_dim)")
    dflt = base or Mamba(heads=1)
    vals = {k: mb.integer(k, getattr(dflt, k)) for k in MAMBA_KEYS if k != "heads"}
    return Mamba(heads=mb.integer("heads", dflt.heads), **vals)


def _pattern(s: Section, base: str | None, layers: int) -> str | None:
    pat = s.raw["layer_pattern"] if s.has("layer_pattern") else base
    if pat is None:
        return None
    if not isinstance(pat, str) or not pat or set(pat) - set(HYBRID_CHARS):
        raise ConfigError(f"{s.at('layer_pattern')}: {pat!r}; valid: a string of "
                          f"{', '.join(repr(c) for c in HYBRID_CHARS)} (Mamba-2, attention, MLP, "
                          "MoE), one per layer")
    if len(pat) != layers:
        raise ConfigError(f"{s.at('layer_pattern')}: {len(pat)} characters but model.layers = "
                          f"{layers}; valid: one character per layer")
    return pat


def read_model(raw: object) -> ModelSpec:
    """The scenario's ``model:`` section (a preset name, a mapping with a preset and overrides,
    or explicit fields) as a checked ``ModelSpec``."""
    if isinstance(raw, str):
        raw = {"preset": raw}
    s = Section(raw, "model", MODEL_KEYS)
    base: ModelSpec | None = None
    if s.has("preset"):
        name = s.text("preset")
        if name not in PRESETS:
            raise ConfigError(f"model.preset: unknown model {name!r}; valid: {', '.join(sorted(PRESETS))}")
        base = PRESETS[name]

    def pick(key: str) -> int:
        if base is not None and not s.has(key):
            return int(getattr(base, key))
        return s.integer(key)

    layers = pick("layers")
    spec = ModelSpec(
        name=s.label("name", base.name if base else "custom"),
        layers=layers, hidden=pick("hidden"), ffn_hidden=pick("ffn_hidden"),
        heads=pick("heads"), kv_heads=pick("kv_heads"), vocab=pick("vocab"),
        mlp=s.text("mlp", base.mlp if base else "swiglu", ("swiglu", "gelu", "relu2")),
        moe=_moe(s, base.moe if base else None),
        head_dim_=s.opt_int("head_dim") if s.has("head_dim") or base is None else base.head_dim_,
        attention=_attention(s, base.attention if base else Attention()),
        mamba=_mamba(s, base.mamba if base else None),
        layer_pattern=_pattern(s, base.layer_pattern if base else None, layers),
        mtp_layers=s.integer("mtp_layers", base.mtp_layers if base else 0, minimum=0),
    )
    _check(spec, s)
    return spec


def _check(m: ModelSpec, s: Section) -> None:
    if m.attention.mla is None:
        if m.head_dim_ is None and m.hidden % m.heads:
            raise ConfigError(f"model.heads: {m.heads} does not divide hidden = {m.hidden}; "
                              f"give model.head_dim where the attention width is not hidden")
        if m.heads % m.kv_heads:
            raise ConfigError(f"model.kv_heads: {m.kv_heads} does not divide heads = {m.heads}")
    kinds = m.layer_kinds()
    used = {k.mixer for k in kinds} | {k.mlp for k in kinds}
    if "mamba" in used and m.mamba is None:
        raise ConfigError(f"{s.at('layer_pattern')}: has Mamba-2 layers ('M') but model.mamba is "
                          "not given; valid: add model.mamba (heads, head_dim, state, groups)")
    if "moe" in used and m.moe is None:
        raise ConfigError(f"{s.at('layer_pattern')}: has MoE layers ('E') but model.moe is not "
                          "given; valid: add model.moe (experts, top_k)")
    if m.mamba is not None and m.mamba.heads % m.mamba.groups:
        raise ConfigError(f"model.mamba.groups: {m.mamba.groups} does not divide heads = "
                          f"{m.mamba.heads}")
    moe = m.moe
    if moe is not None and m.layer_pattern is None and moe.first_dense_layers >= m.layers:
        raise ConfigError(f"model.moe.first_dense_layers: {moe.first_dense_layers} leaves no MoE "
                          f"layer of model.layers = {m.layers}; valid: 0 .. {m.layers - 1}")
    if moe is not None and m.layer_pattern is None and moe.every > m.layers - moe.first_dense_layers:
        rest = m.layers - moe.first_dense_layers
        raise ConfigError(f"model.moe.every: {moe.every} leaves no MoE layer among the {rest} layers "
                          f"after the first {moe.first_dense_layers}; valid: 1 .. {rest}")
    att = m.attention
    if att.global_every and att.window is None:
        raise ConfigError(f"model.attention.global_every: {att.global_every} without "
                          "model.attention.window; valid: give the local layers' window")


def check_model_sequence(m: ModelSpec, raw_model: object, seq_len: int) -> ModelSpec:
    """A window the scenario gives longer than ``training.seq_len`` is refused; a preset's
    window at least the sequence makes its local layers global (the window never binds)."""
    window = m.attention.window
    if window is None or window < seq_len:
        return m
    given = (isinstance(raw_model, dict) and isinstance(raw_model.get("attention"), dict)
             and "window" in raw_model["attention"])
    if given and window > seq_len:
        raise ConfigError(f"model.attention.window: {window} is longer than training.seq_len = "
                          f"{seq_len}; valid: 1 .. {seq_len}")
    return replace(m, attention=replace(m.attention, window=None, global_every=0))
