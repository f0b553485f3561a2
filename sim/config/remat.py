"""Training-memory keys of the ``training`` section: per-tensor remat policies (MaxText's names),
Megatron-Core's recompute modules, optimizer-state precision, the logits' precision and vocabulary
tiling, parsed into
plain frozen values.

``training.remat_policy`` takes MaxText's vocabulary (AI-Hypercomputer/maxtext
src/MaxText/configs/base.yml @003b41698f6e, ``remat_policy`` and the ``custom`` tensor list; the
policies themselves in src/MaxText/layers/decoders.py ``get_remat_policy``): either the name of one
of its recipes, or a mapping ``{tensor: device | offload | remat}`` over the names a decoder layer
tags with ``checkpoint_name`` (``custom``; unnamed tensors are rematerialized). ``device`` keeps
the tensor in HBM until the backward, ``offload`` moves it to pinned host memory and back,
``remat`` recomputes it. ``qkv_proj`` and ``mlpwi`` are MaxText's names under ``fused_qkv`` /
``fused_mlp``; here they name the same bytes as their parts (query/key/value, mlpwi_0/mlpwi_1),
and a part named explicitly wins. ``decoder_layer_input`` "cannot be rematerialized" (base.yml):
it is the scan's checkpoint and stays on the device unless offloaded.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from .fields import show

__all__ = ["LOCATIONS", "REMAT_PRESETS", "REMAT_TENSORS", "OPTIMIZER_STATES", "RECOMPUTE_MODULES",
           "LOGIT_BYTES",
           "RematPolicy", "XLA_REMAT_TAG", "parse_remat_policy", "xla_rematerialized"]

# ``training.logits_dtype``: the bytes of a logit the loss reads and its backward writes: fp32
# where the loss upcasts them (Megatron's vocab-parallel cross entropy, PyTorch's default), bf16
# where it does not (NeMo AutoModel's MaskedCrossEntropy with fp32_upcast: false).
LOGIT_BYTES = {"fp32": 4, "bf16": 2}

# ``training.recompute_modules``: Megatron-Core's ``recompute_modules`` names (what each covers:
# sim/workload/recompute.py).
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act",
                     "shared_experts")

LOCATIONS = ("device", "offload", "remat")
# Tensors one layer can keep, in MaxText's names (the fused aliases expand to their parts).
REMAT_TENSORS = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "context",
                 "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo")
_ALIASES = {"qkv_proj": ("query_proj", "key_proj", "value_proj"), "mlpwi": ("mlpwi_0", "mlpwi_1")}
_QKV = ("query_proj", "key_proj", "value_proj")
_DOTS = (*_QKV, "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo")   # dots with no batch dims
# MaxText's named recipes -> the tensors each saves on the device / offloads (decoders.py):
# minimal = jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims (every projection output,
# not the attention dots, which have batch dims); *_flash / *_with_context add "context".
REMAT_PRESETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "full": ((), ()),
    "minimal": (_DOTS, ()),
    "minimal_flash": ((*_DOTS, "context"), ()),
    "minimal_with_context": ((*_DOTS, "context"), ()),
    "save_dot_with_context_except_mlp": ((*_QKV, "out_proj", "context"), ()),
    "save_dot_except_mlpwi": ((*_QKV, "out_proj", "mlpwo"), ()),
    "save_dot_except_mlp": ((*_QKV, "out_proj"), ()),
    "save_qkv_proj": (_QKV, ()),
    "qkv_proj_offloaded": ((), _QKV),
    "minimal_offloaded": ((), _DOTS),
    "save_out_proj": (("out_proj",), ()),
    # the custom policy with every tensor at base.yml's default (remat; the layer input on device)
    "custom": ((), ()),
}
OPTIMIZER_STATES = ("fp32", "bf16")

# The policy as the memory and compute models read it: (tensor, location) for every REMAT_TENSORS
# name, in that order.
RematPolicy = tuple[tuple[str, str], ...]


def _preset(name: str) -> RematPolicy:
    device, offload = REMAT_PRESETS[name]
    loc = {t: "device" if t in device else "offload" if t in offload else "remat"
           for t in REMAT_TENSORS}
    loc["decoder_layer_input"] = "device"
    return tuple((t, loc[t]) for t in REMAT_TENSORS)


def parse_remat_policy(raw: object, where: str) -> tuple[str, RematPolicy]:
    """``(name, policy)`` of a ``training.remat_policy`` value: a MaxText recipe name, or a mapping
    of tensor names to ``device | offload | remat`` (name ``custom``). ConfigError naming *where*,
    the value and the valid choices otherwise."""
    if isinstance(raw, str):
        if raw not in REMAT_PRESETS:
            raise ConfigError(f"{where}: unknown remat policy {raw!r}; valid: "
                              f"{', '.join(REMAT_PRESETS)}, or a mapping {{tensor: "
                              f"{' | '.join(LOCATIONS)}}} over {', '.join(_names())}")
        return raw, _preset(raw)
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where}: expected a MaxText remat policy name or a mapping {{tensor: "
                          f"{' | '.join(LOCATIONS)}}}, got {show(raw)}")
    loc = {t: "remat" for t in REMAT_TENSORS}
    loc["decoder_layer_input"] = "device"
    explicit: dict[str, str] = {}
    for key, value in raw.items():
        name = str(key)
        if name not in REMAT_TENSORS and name not in _ALIASES:
            raise ConfigError(f"{where}.{name}: unknown tensor {name!r}; valid: "
                              f"{', '.join(_names())} (MaxText's checkpoint names)")
        if value not in LOCATIONS:
            raise ConfigError(f"{where}.{name}: expected one of {', '.join(LOCATIONS)}, got "
                              f"{show(value)}")
        if name == "decoder_layer_input" and value == "remat":
            raise ConfigError(f"{where}.decoder_layer_input: got 'remat', but the layer input "
                              "cannot be rematerialized (it is where recomputation starts); "
                              "valid: device, offload")
        if name in _ALIASES:
            for part in _ALIASES[name]:
                if part not in explicit:
                    loc[part] = str(value)
        else:
            explicit[name] = loc[name] = str(value)
    return "custom", tuple((t, loc[t]) for t in REMAT_TENSORS)


def _names() -> list[str]:
    return [*REMAT_TENSORS, *_ALIASES]


# How a policy XLA's rematerialization extended names itself (sim.workload.xla_remat):
# "<policy> + XLA remat: <tensor>, <tensor>".
XLA_REMAT_TAG = " + XLA remat: "


def xla_rematerialized(policy_name: str) -> tuple[str, ...]:
    """The tensors XLA's rematerialization turned to ``remat`` in a policy of *policy_name*
    (``training.remat_policy_name``); none where it changed nothing."""
    if XLA_REMAT_TAG not in policy_name:
        return ()
    return tuple(policy_name.split(XLA_REMAT_TAG, 1)[1].split(", "))
