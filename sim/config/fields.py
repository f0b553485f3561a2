"""The section reader every config input goes through: each error names the file, the dotted
field, the value found and the valid range; bounds of absurd values by key; token counts."""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Mapping

from ..errors import ConfigError
from ..topology_spec import SliceShape

__all__ = ["Section", "show", "parse_tokens"]


class Section:
    """A mapping being read: tracks its place for messages and rejects unknown keys."""

    def __init__(self, raw: object, where: str, allowed: frozenset[str] | set[str]) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {show(raw)}")
        if unknown := sorted(set(map(str, raw)) - set(allowed)):
            raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        self.raw = raw
        self.where = where

    def at(self, key: str) -> str:
        if self.where == "scenario":           # top level: fields are named by their own key
            return key
        return f"{self.where}.{key}" if not self.where.endswith(":") else f"{self.where} {key}"

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def integer(self, key: str, default: int | None = None, minimum: int | None = 1,
                maximum: int | None = None) -> int:
        v = self.raw.get(key, default)
        if v is None:
            raise ConfigError(f"{self.at(key)}: required (an integer)")
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
            v = int(v)                    # YAML reads 1e6 as a float; a whole one is an integer
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{self.at(key)}: expected an integer, got {show(v)}")
        if minimum is not None and v < minimum:
            raise ConfigError(f"{self.at(key)}: must be >= {minimum}, got {v}")
        limit = maximum if maximum is not None else _MAX_INT.get(key)
        if limit is not None and v > limit:
            raise ConfigError(f"{self.at(key)}: must be <= {limit:,}, got {v:,}")
        return v

    def opt_int(self, key: str, minimum: int = 1) -> int | None:
        return self.integer(key, minimum=minimum) if self.has(key) else None

    def number(self, key: str, default: float | None = None, minimum: float | None = 0.0,
              maximum: float | None = None, strict_min: bool = False) -> float:
        v = self.raw.get(key, default)
        if v is None:
            raise ConfigError(f"{self.at(key)}: required (a number)")
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**300:
            raise ConfigError(f"{self.at(key)}: expected a finite number, got an integer of "
                              f"{len(str(abs(v)))} digits")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{self.at(key)}: expected a finite number, got {show(v)}")
        if minimum is not None and (v < minimum or (strict_min and v == minimum)):
            op = ">" if strict_min else ">="
            raise ConfigError(f"{self.at(key)}: must be {op} {minimum}, got {v}")
        limit = maximum if maximum is not None else _MAX_NUMBER.get(key)
        if limit is not None and v > limit:
            raise ConfigError(f"{self.at(key)}: must be <= {limit:g}, got {v:g}")
        if key in _MIN_NUMBER and v < _MIN_NUMBER[key]:
            raise ConfigError(f"{self.at(key)}: must be >= {_MIN_NUMBER[key]:g}, got {v:g}")
        return float(v)

    def text(self, key: str, default: str | None = None, choices: tuple[str, ...] | None = None) -> str:
        v = self.raw.get(key, default)
        if v is None:
            raise ConfigError(f"{self.at(key)}: required (a string)")
        if not isinstance(v, str):
            raise ConfigError(f"{self.at(key)}: expected a string, got {show(v)}")
        if choices is not None and v not in choices:
            raise ConfigError(f"{self.at(key)}: got {v!r}; valid: {', '.join(choices)}")
        return v

    def label(self, key: str, default: str) -> str:
        """A name printed at the head of tables (``check_label``)."""
        return check_label(self.text(key, default), self.at(key))

    def flag(self, key: str, default: bool) -> bool:
        v = self.raw.get(key, default)
        if not isinstance(v, bool):
            raise ConfigError(f"{self.at(key)}: expected true or false, got {show(v)}")
        return v

    def text_list(self, key: str, default: tuple[str, ...], choices: tuple[str, ...]) -> tuple[str, ...]:
        """A non-empty list of distinct names from *choices* (in *choices*' order); a string
        of comma-separated names is that list (``--set key=a,b``)."""
        v = self.raw.get(key, list(default))
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",")]
        if (not isinstance(v, list) or not v or any(not isinstance(x, str) or x not in choices for x in v)
                or len(set(v)) != len(v)):
            raise ConfigError(f"{self.at(key)}: expected a non-empty list of distinct names from "
                              f"{', '.join(choices)}, got {show(v)}")
        return tuple(c for c in choices if c in v)

    def int_list(self, key: str) -> tuple[int, ...]:
        v = self.raw.get(key)
        if not isinstance(v, list) or not v or any(isinstance(x, bool) or not isinstance(x, int)
                                                  or x <= 0 for x in v):
            raise ConfigError(f"{self.at(key)}: expected a list of positive integers, got {show(v)}")
        return tuple(v)

    def shapes(self, key: str, ndims: int) -> tuple[SliceShape, ...]:
        v = self.raw.get(key, [])
        if not isinstance(v, list):
            raise ConfigError(f"{self.at(key)}: expected a list of shapes, got {show(v)}")
        out = []
        for i, s in enumerate(v):
            if (not isinstance(s, list) or len(s) != ndims
                    or any(isinstance(x, bool) or not isinstance(x, int) or x <= 0 for x in s)):
                raise ConfigError(f"{self.at(key)}[{i}]: expected {ndims} positive integers, got {show(s)}")
            out.append(tuple(s))
        return tuple(out)

    def section(self, key: str, allowed: frozenset[str] | set[str]) -> "Section":
        return Section(self.raw.get(key), self.at(key), allowed)


# Upper bounds of fields, by key: beyond them a value is physically absurd (or would make the
# simulation run for hours); each names why. Lower bounds are at the readers' call sites.
_MAX_INT: dict[str, int] = {
    "chips": 1_000_000,              # a million accelerators: beyond any cluster built
    "layers": 10_000, "hidden": 1_000_000, "ffn_hidden": 10_000_000, "heads": 100_000,
    "kv_heads": 100_000, "head_dim": 65_536, "vocab": 100_000_000,
    "experts": 100_000, "top_k": 100_000,
    "seq_len": 100_000_000,          # 100 M tokens per sequence
    "global_batch": 1_000_000_000, "micro_batch": 1_000_000,
    "tp": 1_000_000, "pp": 100_000, "cp": 1_000_000, "ep": 1_000_000, "virtual_stages": 10_000,
    "pipeline_flushes": 1_000_000,
    "zero_group": 1_000_000, "slices": 1_000,
    "monte_carlo_runs": 100_000,     # the failure Monte Carlo: 100 runs give 5-95% bands
    "seed": 2**63 - 1,
    "gpus": 1_024, "nvswitches": 1_024, "nics": 4_096, "su_nodes": 100_000,
    "leaf_down_ports": 10_000, "leaf_up_ports": 10_000, "two_tier_max_sus": 100_000,
    "pod_sus": 100_000, "group_switches": 10_000, "local_links": 1_000, "global_links": 1_000,
    "system_groups": 100_000, "global_ports": 64,
    "max_gpus": 10_000_000, "cube": 1_024, "wrap_len": 100_000, "chips_per_host": 1_024,
    "default_chips": 10_000_000,
    "mtp_layers": 100,               # multi-token prediction: DeepSeek-V3 has 1, proposals a few
}
_MAX_NUMBER: dict[str, float] = {
    "compute_jitter_sigma": 1.0,     # log-normal sigma: 1 already spreads steps over e^+-2
    "slow_factor": 1_000.0,          # a chip 1,000x slower is a dead chip
    "horizon_days": 3_650.0,         # ten years
    "checkpoint_interval_min": 525_600.0, "checkpoint_write_s": 86_400.0,
    "checkpoint_load_s": 86_400.0, "detect_s": 86_400.0, "restart_s": 86_400.0,
    "swap_s": 86_400.0,              # a day for any one recovery step
    "repair_h": 8_760.0, "sdc_detect_h": 8_760.0,   # a year
    "fleet_factor": 1_000.0, "storage_GBps": 1e7, "fleet_age_days": 36_500.0,
    "step_s": 86_400.0,
    "planned_per_day": 1_000.0, "rate_scale": 10_000.0, "tokens": 1e18,
    "usd_per_chip_hour": 10_000.0, "oversubscription": 1_000.0,
    "core_oversubscription": 1_000.0, "capacity_factor": 1_000.0,
    "nvlink_latency_us": 1e6, "pcie_latency_us": 1e6, "ib_latency_us": 1e6,
    "ici_latency_us": 1e6, "dcn_latency_us": 1e6,          # one second per hop
    "nic_Gbps": 1e6, "ib_port_Gbps": 1e6, "pcie_GBps": 1e5,
    "port_Gbps": 1e6, "link_latency_us": 1e6, "net_latency_us": 1e6,
    "net_simple_overhead_us": 1e6,
}

# Lower bounds where a positive value can still be absurd: a 1 Gb/s NIC or a 0.1 GB/s PCIe link is
# slower than anything an accelerator has been attached with.
_MIN_NUMBER: dict[str, float] = {"nic_Gbps": 1.0, "ib_port_Gbps": 1.0, "port_Gbps": 1.0,
                                 "pcie_GBps": 0.1}


def check_label(v: str, where: str) -> str:
    """*v*, a name printed at the head of tables: printable (no control character reaches a
    terminal) and at most 200 characters; a ConfigError naming *where* otherwise."""
    if not v.isprintable() or len(v) > 200:
        raise ConfigError(f"{where}: {show(v)} holds a control character or is over 200 "
                          "characters; give a printable name")
    return v


def show(v: object) -> str:
    """*v* as a message shows it: its repr (cut at 60 characters) and its type. The repr is
    bounded as it is built (a few items of each container, a few levels), so a huge or
    self-repeating value (a YAML alias bomb) costs no more to show than a small one."""
    text = _SHORT.repr(v)
    return (text[:60] + "...") if len(text) > 60 else f"{text} ({type(v).__name__})"


def _short_repr() -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 4, 6
    r.maxstring, r.maxother, r.maxlong = 70, 70, 70
    return r


_SHORT = _short_repr()


_TOKEN_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_tokens(v: object, where: str) -> float:
    """A token count: a number, or text like ``15T``, ``300B``, ``2.5e12`` (K/M/B/T = 10^3/6/9/12)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**18:
        raise ConfigError(f"{where}: must be <= 1e18 tokens, got an integer of {len(str(abs(v)))} digits")
    if isinstance(v, str):
        t = v.strip().upper()
        if not re.fullmatch(r"\d+(\.\d*)?(E[+-]?\d+)?[KMBGTP]?", t, re.ASCII):
            raise ConfigError(f"{where}: expected a token count like 15T, 300B or 2.5e12, got {v!r}")
        mult = _TOKEN_SUFFIX.get(t[-1:], 1.0)
        v = float(t[:-1] if t[-1:] in _TOKEN_SUFFIX else t) * mult
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 1:
        raise ConfigError(f"{where}: expected a token count >= 1 like 15T or 300B, got {show(v)}")
    if v > 1e18:
        raise ConfigError(f"{where}: must be <= 1e18 tokens, got {v:g}")
    return float(v)
