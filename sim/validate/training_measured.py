"""The measured step of a published run, and the FLOP counts its source used to publish it.

A source gives a step time, tokens per second, TFLOP/s per chip or an MFU; the last two are FLOPs
per step under the source's own count, which is not always PaLM's (DESIGN.md):
``FLOPS_CONVENTIONS`` names each convention and ``_FLOPS_RULES`` which source uses which. The
convention is a validation-only fact (how a paper counted); the PaLM count itself is the
simulator's, ``sim.workload.transformer.model_flops_per_token``, the same that ``clustersim run``
reports MFU with.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..hardware import Chip
from ..models import ModelSpec
from ..units import TFLOPS
from ..workload.transformer import model_flops_per_token
from .data import number
from .training_rules import _first, _Unsupported

__all__ = ["FLOPS_CONVENTIONS", "TIME_SOURCES", "FlopsConvention", "Measured", "flops_per_token",
           "measure_step"]

TIME_SOURCES = ("step", "tokens", "tflops", "mfu")


@dataclass(frozen=True, slots=True)
class FlopsConvention:
    """How a source counts FLOPs per token: ``recompute_factor`` x PaLM (6N + 12·L·H·Q·T), plus
    the output-head matmul 6·hidden·vocab when ``logits``."""

    name: str
    recompute_factor: float
    logits: bool
    source: str


FLOPS_CONVENTIONS = types.MappingProxyType({c.name: c for c in (
    FlopsConvention("palm", 1.0, False, "PaLM appendix B (DESIGN.md): 6N + 12·L·H·Q·T per token"),
    FlopsConvention("palm+logits", 1.0, True,
                    "PaLM + 6·h·V output head: Megatron-LM num_floating_point_operations, MaxText "
                    "calculate_tflops_training_per_device, MegaScale (its 53.0% MFU at 39.3k tok/s "
                    "on 256 GPUs reproduces with this count and 312 TFLOP/s)"),
    FlopsConvention("megatron-eq3", 4 / 3, True,
                    "Narayanan et al. SC21 eq. (3) 96·B·s·l·h²·(1 + s/6h + V/16lh): the recomputed "
                    "forward pass is counted (hardware FLOPs) = 4/3 x PaLM + 6·h·V"),
)})
# source_url pattern -> FLOP convention of the TFLOP/s or MFU it publishes (default "palm").
_FLOPS_RULES: tuple[tuple[str, str], ...] = (
    (r"arxiv\.org/abs/2104\.04473", "megatron-eq3"),
    (r"(google|AI-Hypercomputer)/maxtext", "palm+logits"),
    (r"NVIDIA/Megatron-LM", "palm+logits"),
    (r"arxiv\.org/abs/2402\.15627", "palm+logits"),
)
_HARDWARE_FLOPS_NOTES = r"HARDWARE FLOPs|INCLUDE recomputation"


def flops_per_token(model: ModelSpec, seq_len: int, convention: FlopsConvention) -> float:
    """FLOPs per token under a source's *convention* (see ``FLOPS_CONVENTIONS``)."""
    logits = 6 * model.hidden * model.vocab if convention.logits else 0
    return convention.recompute_factor * model_flops_per_token(model, seq_len) + logits


@dataclass(frozen=True, slots=True)
class Measured:
    """The measured step of one run, in SI units.

    ``time_from``: "step" (published step time), "tokens" (global batch x seq_len / tokens per s),
    "tflops" (source FLOPs per step / (TFLOP/s per chip x chips)) or "mfu" (source FLOPs per step /
    (MFU x chips x the source's peak)). ``mfu`` is PaLM model FLOPs / (step x chips x dense BF16
    peak), FP8 runs included; ``published_mfu`` is the source's own figure (its own FLOP count and
    peak), None where it published none. ``peak_memory_GiB``: the peak device memory per chip
    the source measured (optional column ``peak_memory_GiB`` of runs.csv, GiB = 2^30 bytes), None
    where it published none.
    """

    step_time_s: float
    time_from: str
    flops_convention: str
    model_flops_per_step: float
    mfu: float
    published_mfu: float | None
    peak_memory_GiB: float | None = None


def measure_step(row: Mapping[str, str], where: str, model: ModelSpec, raw: Mapping[str, Any],
                 chip: Chip) -> Measured:
    """The measured step of *row* (``where``: its file and line), whose scenario mapping is *raw*
    (with the loaded *model* and *chip*). Raises ``_Unsupported`` when the row publishes no
    measurement we can turn into a step time."""
    training = raw["training"]
    chips = raw["cluster"]["chips"]
    tokens = training["global_batch"] * training["seq_len"]
    palm_flops = tokens * model_flops_per_token(model, training["seq_len"])
    _, conv_name = _first(_FLOPS_RULES, row["source_url"].strip())
    convention = FLOPS_CONVENTIONS[conv_name or "palm"]
    source_flops = tokens * flops_per_token(model, training["seq_len"], convention)
    step_s, tps, tflops, mfu_pct = (number(row[c], where, c) for c in ("step_time_s", "tokens_per_s",
                                                                     "tflops_per_chip", "mfu_pct"))
    if step_s is not None:
        time_from = "step"
    elif tps is not None:
        step_s, time_from = tokens / tps, "tokens"
    elif tflops is not None:
        step_s, time_from = source_flops / (tflops * TFLOPS * chips), "tflops"
    elif mfu_pct is not None:
        # README: each source's MFU is against its own peak, FP8 runs against the FP8 peak.
        peak = chip.peak_flops(training["precision"])
        step_s, time_from = source_flops / (mfu_pct / 100 * chips * peak), "mfu"
    else:
        raise _Unsupported("no measured step time, tokens/s, TFLOP/s or MFU")
    if (time_from in ("tflops", "mfu") and convention.recompute_factor == 1
            and re.search(_HARDWARE_FLOPS_NOTES, row["notes"])):
        raise _Unsupported(f"published {time_from} counts hardware FLOPs (notes) under a "
                           "formula we do not have")
    peak_mem = number(row.get("peak_memory_GiB") or "", where, "peak_memory_GiB")
    return Measured(step_time_s=step_s, time_from=time_from, flops_convention=convention.name,
                    model_flops_per_step=palm_flops,
                    mfu=palm_flops / (step_s * chips * chip.bf16_flops),
                    published_mfu=None if mfu_pct is None else mfu_pct / 100,
                    peak_memory_GiB=peak_mem)
