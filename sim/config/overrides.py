"""``--set KEY=VALUE`` and ``--over KEY=...``: dotted scenario keys set in a raw scenario mapping,
values read as YAML scalars, each key checked against the schema before anything runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from .model_section import NESTED
from .schema import TOP_KEYS, scenario_keys
from .yamlio import load_value

__all__ = ["apply_overrides", "parse_value", "set_key"]


def parse_value(text: str, where: str) -> Any:
    """A command-line value as a YAML scalar: ``2048`` int, ``0.5`` float, ``true``, ``bf16``."""
    v = load_value(text, where) if text.strip() else ""
    if isinstance(v, (dict, list)):
        raise ConfigError(f"{where}: expected one value (a number, true/false or a name), got {text!r}")
    return v


def set_key(raw: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    """Set a dotted scenario key (``cluster.chips``, ``model.moe.experts``, ``seed``) in *raw*,
    naming the valid keys when it is not one."""
    parts = dotted.split(".")
    keys = scenario_keys()
    top = parts[0]
    if top not in TOP_KEYS:
        raise ConfigError(f"{where}: unknown key {dotted!r}; valid: {', '.join(sorted(TOP_KEYS))} "
                          "and their fields (e.g. cluster.chips, parallelism.tp)")
    if len(parts) == 1:
        if top in keys and top != "model":
            raise ConfigError(f"{where}: {dotted!r} is a section; name one of its fields: "
                              f"{', '.join(f'{top}.{k}' for k in sorted(keys[top]))}")
        raw[top] = value
        return
    if top not in keys or parts[1] not in keys[top]:
        valid = sorted(keys.get(top, ()))
        raise ConfigError(f"{where}: unknown key {dotted!r}; valid under {top}: "
                          f"{', '.join(valid) if valid else '(none: it takes one value)'}")
    remat = len(parts) == 3 and parts[:2] == ["training", "remat_policy"]
    if len(parts) > 2 and not remat and not (top == "model" and parts[1] in NESTED
                                             and len(parts) == 3 and parts[2] in NESTED[parts[1]]):
        raise ConfigError(f"{where}: {dotted!r} is nested too deeply or unknown; valid: "
                          "SECTION.FIELD (model.moe.FIELD, model.attention.FIELD, "
                          "model.mamba.FIELD for the model's parts, training.remat_policy.TENSOR)")
    if remat:
        _per_tensor_remat(raw, where)
    node = raw.get(top)
    if top == "model" and isinstance(node, str):
        node = {"preset": node}                  # a preset name becomes a preset plus overrides
    node = dict(node) if isinstance(node, Mapping) else {}
    raw[top] = node
    for p in parts[1:-1]:
        node[p] = dict(node[p]) if isinstance(node.get(p), Mapping) else {}
        node = node[p]
    node[parts[-1]] = value


def _per_tensor_remat(raw: dict[str, Any], where: str) -> None:
    """``training.remat_policy.TENSOR``: one tensor of MaxText's custom policy (a mapping, which
    the schema checks). It starts from a mapping, ``custom`` or ``recompute: full`` (MaxText's
    custom defaults are full remat); a named policy, or a ``recompute`` that decides another one,
    is refused rather than silently replaced by every other tensor at its default."""
    tr = raw.get("training")
    tr = tr if isinstance(tr, Mapping) else {}
    policy = tr.get("remat_policy")
    hint = ("a tensor can be set only in a custom policy (a mapping of tensor: remat, device or "
            "offload): --set training.remat_policy=custom before the tensors, or write the "
            "mapping in the scenario")
    if policy is None and tr.get("recompute", "selective") != "full":
        raise ConfigError(f"{where}: training.remat_policy is not set (training.recompute "
                          f"{tr.get('recompute', 'selective')!r} decides what is kept); {hint}")
    if policy is not None and policy != "custom" and not isinstance(policy, Mapping):
        raise ConfigError(f"{where}: training.remat_policy is the named policy {policy!r}; {hint}")
    if policy == "custom":
        raw["training"] = {**tr, "remat_policy": {}}


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str],
                    flag: str = "--set") -> dict[str, Any]:
    """A copy of *raw* with each ``KEY=VALUE`` of *overrides* applied (values as YAML scalars)."""
    out = dict(raw)
    seen: set[str] = set()
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: expected KEY=VALUE (e.g. cluster.chips=2048), got {item!r}")
        if key.strip() in seen:     # the last would win, silently
            raise ConfigError(f"{flag} {key.strip()}: given more than once; give each key once")
        child = next((k for k in seen if k.startswith(key.strip() + ".")), None)
        if child:                   # the whole would drop the field set before it, silently
            raise ConfigError(f"{flag} {key.strip()}: given after {child}, which it would "
                              f"replace; give {key.strip()} first")
        seen.add(key.strip())
        set_key(out, key.strip(), parse_value(text, f"{flag} {key.strip()}"), f"{flag} {key.strip()}")
    return out
