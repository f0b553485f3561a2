"""Helpers the views share: strict JSON and the largest entries of a mapping as text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["dump_json", "top"]


def dump_json(obj: Any) -> str:
    """Strict JSON (no NaN or Infinity): a non-finite number in an output is a bug of ours."""
    return json.dumps(obj, allow_nan=False)


def top(d: Mapping[str, float], n: int) -> str:
    """The *n* largest entries of *d*, largest first: "key 1.234, key 1.100"."""
    return ", ".join(f"{k} {v:.3f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n])
