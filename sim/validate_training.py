"""Training validation suite: published training runs -> scenarios, predicted vs measured step time.

``clustersim validate --suite training`` (DESIGN.md). Data: ``DIR/training/runs.csv`` (one row
per published run: model, hardware, layout, measured step time / tokens/s / TFLOP/s / MFU, notes,
calibration/test ``split``) and ``DIR/training/overrides.csv`` (``id,field,value,reason``: per-row
fixes, each with its reason). Budgets: ``[training]`` in ``DIR/budgets.toml``.

Three stages, each a pure function of the one before:

1. **Mapping** (``map_runs``): every row becomes either a scenario mapping in the DESIGN.md schema
   or an "unsupported" entry with its reason. The rules are the tables below (hardware strings ->
   topology, precision / recompute / sharding strings -> schema values, notes patterns for
   pipeline schedules and MoE); every default taken for a blank cell is written into the run's
   ``assumptions``. Each scenario is then loaded with ``sim.config.scenario_from_dict``; a row the
   loader rejects is unsupported with the loader's message.
2. **Measured step** (``Measured``): the published step time if there is one (``time_from =
   "step"``); else global batch x sequence length / tokens per second (``"tokens"``); else the
   source's FLOP count per step / (TFLOP/s per chip x chips) (``"tflops"``); else the source's FLOP
   count / (MFU x chips x the source's peak) (``"mfu"``). The FLOP count is the source's own
   convention (``FLOPS_CONVENTIONS``): Narayanan et al. SC21 count the recomputed forward pass
   (hardware FLOPs), Megatron-LM, MaxText and MegaScale add the output-head matmul to PaLM's count.
   The measured MFU is then re-normalised to one definition: PaLM model FLOPs (6N + 12·L·H·Q·T per
   token, DESIGN.md) / (step time x chips x the chip's dense BF16 peak), FP8 runs included.
3. **Scoring** (``validate_training``): the predictor's step time and MFU per supported run;
   absolute % error of the step time and absolute MFU error in percentage points; median and p90
   per split and per split x family (A100, H100 (H200 included: the catalogue's family), TPU).
   A run the predictor refuses (``ConfigError``, ``InfeasibleError``) is listed as an error, kept
   out of the aggregates, and is a budget violation when it is in the test split.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import ConfigError, SimError
from .hardware import CATALOGUE, Chip
from .models import ModelSpec
from .units import TFLOPS

__all__ = [
    "FAMILIES",
    "FLOPS_CONVENTIONS",
    "HARDWARE_RULES",
    "OVERRIDABLE_FIELDS",
    "TIME_SOURCES",
    "TOPOLOGY_CHIPS",
    "TRAINING_BUDGET_KEYS",
    "FlopsConvention",
    "HardwareRule",
    "MappedRun",
    "Measured",
    "TrainingPrediction",
    "TrainingPredictor",
    "TrainingReport",
    "TrainingRunResult",
    "TrainingSummary",
    "UnsupportedTrainingRun",
    "check_training_budgets",
    "flops_per_token",
    "format_training_report",
    "map_runs",
    "palm_flops_per_token",
    "training_report_to_json",
    "validate_training",
]

RUNS_FILE = "runs.csv"
OVERRIDES_FILE = "overrides.csv"
OVERRIDE_COLUMNS = ("id", "field", "value", "reason")
SPLITS = ("calibration", "test")
FAMILIES = ("A100", "H100", "TPU")
TIME_SOURCES = ("step", "tokens", "tflops", "mfu")
RUNS_REQUIRED = ("id", "source_url", "model", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
                 "vocab", "seq_len", "global_batch_seqs", "micro_batch", "hardware", "chips", "tp",
                 "pp", "dp", "cp", "ep", "zero_or_fsdp", "recompute", "precision", "step_time_s",
                 "tokens_per_s", "tflops_per_chip", "mfu_pct", "notes", "split")
GPUS_PER_NODE = 8
TRAINING_BUDGET_KEYS = frozenset({"step_median_abs_pct", "step_p90_abs_pct_A100", "step_p90_abs_pct_H100",
                                  "step_p90_abs_pct_TPU", "refused_max_pct"})

# Bundled topology -> its catalogue chip (the `chip:` line of topologies/<name>.yaml; a test checks
# the two agree). Used before the scenario is loaded (GPU node rule, FP8 capability, peaks).
TOPOLOGY_CHIPS = types.MappingProxyType({
    "dgx-a100": "A100-SXM-80GB",
    "dgx-a100-40gb": "A100-SXM-40GB",
    "hgx-a100-4nic": "A100-SXM-80GB",
    "dgx-h100": "H100-SXM",
    "dgx-h200": "H200",
    "tpu-v4": "TPU-v4",
    "tpu-v5e": "TPU-v5e",
    "tpu-v5p": "TPU-v5p",
    "tpu-v6e": "TPU-v6e",
})

# Columns an override may replace. Measured values (step_time_s, tokens_per_s, tflops_per_chip,
# mfu_pct, hfu_pct) and the split never are; "topology" forces the topology instead of the
# hardware rules.
OVERRIDABLE_FIELDS = frozenset({
    "topology", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
    "global_batch_seqs", "micro_batch", "chips", "tp", "pp", "dp", "cp", "ep", "zero_or_fsdp",
    "recompute", "precision",
})


class _Unsupported(Exception):
    """Internal signal: the row cannot be expressed as a scenario; the message is the reason."""


# ----------------------------------------------------------------------------- rule tables

@dataclass(frozen=True, slots=True)
class HardwareRule:
    """The first rule whose ``pattern`` (a regex, any case) is found in the ``hardware`` column wins.

    ``topology`` None: the run is unsupported and ``note`` is the reason. Otherwise ``note`` is an
    assumption made by the mapping ("" for none). ``max_chips``: larger runs are unsupported, with
    ``beyond_reason``.
    """

    pattern: str
    topology: str | None
    note: str = ""
    max_chips: int | None = None
    beyond_reason: str = ""


HARDWARE_RULES: tuple[HardwareRule, ...] = (
    HardwareRule(r"\bV100\b", None, "V100 (Volta) is not in the hardware catalogue"),
    HardwareRule(r"TPU v3", None, "TPU v3 is not in the hardware catalogue"),
    HardwareRule(r"\bH800\b", None, "H800 (export H100 variant, 400 GB/s NVLink) is not in the "
                                    "hardware catalogue"),
    HardwareRule(r"H100.*(HBM2e|500 ?W|lower-TDP)", None,
                 "H100 500 W / HBM2e variant: not the catalogue's H100 SXM (700 W, 80 GB HBM3), "
                 "whose peak and memory bandwidth it does not reach"),
    HardwareRule(r"Omni-Path", None, "Omni-Path fabric: not the rail-optimized InfiniBand "
                                     "fat-tree of the GPU topologies"),
    HardwareRule(r"GCP A3", "dgx-h100", "", max_chips=GPUS_PER_NODE,
                 beyond_reason="GCP A3 VMs talk over GPUDirect-TCPX (4 x 200 Gb/s per VM), not the "
                               "DGX H100's 8 x 400 Gb/s InfiniBand; only single-VM runs map"),
    HardwareRule(r"\bH200\b", "dgx-h200"),
    HardwareRule(r"\bH100\b", "dgx-h100"),
    HardwareRule(r"vTrain validation cluster", "hgx-a100-4nic",
                 "vTrain cluster: 800 Gb/s per node between nodes (vTrain's validation configs: "
                 "inter_node_bandwidth 800, 'total bandwidth of inter-node communication in Gbps' "
                 "per its src/config.py), i.e. 4 x HDR 200 Gb/s: hgx-a100-4nic; memory size not "
                 "stated, 80 GB assumed"),
    HardwareRule(r"\bA100 40 ?GB", "dgx-a100-40gb"),
    HardwareRule(r"\bA100 80 ?GB", "dgx-a100"),
    HardwareRule(r"\bA100\b", "dgx-a100", "A100 memory size not stated: the 80 GB part (dgx-a100) "
                                          "is assumed"),
    HardwareRule(r"TPU v4\b", "tpu-v4"),
    HardwareRule(r"TPU v5p\b", "tpu-v5p"),
    HardwareRule(r"TPU v5e\b", "tpu-v5e"),
    HardwareRule(r"TPU v6e\b", "tpu-v6e"),
)

# Fabric remarks in the hardware column that the topology does not model exactly (assumptions).
_FABRIC_NOTES: tuple[tuple[str, str], ...] = (
    (r"RoCE", "RoCE fabric modelled as the topology's InfiniBand fat-tree at the same per-GPU rate"),
)

# precision column -> scenario precision. Checked in order; FP8 first ("BF16 + Float8 linears" runs
# its matmuls in FP8). FP16 mixed precision has the same tensor-core peak as BF16 on every chip here.
_PRECISION_RULES: tuple[tuple[str, str], ...] = (
    (r"fp8|float8", "fp8"),
    (r"bf16|bfloat16", "bf16"),
    (r"fp16|mixed", "bf16"),
)
_UNKNOWN_PRECISION = r"^$|not stated"

# recompute column -> scenario recompute; None: not representable (the reason is the rule's text).
_RECOMPUTE_RULES: tuple[tuple[str, str | None], ...] = (
    (r"^remat_policy=full$", "full"),
    (r"^remat_policy=(minimal|minimal_flash)$", "selective"),   # MaxText: saves matmul outputs
    (r"^remat_policy=", None),                                  # host offload etc.
    (r"^full\b", "full"),
    (r"^selective\b", "selective"),
    (r"^none\b", "none"),
)
_RECOMPUTE_IN_NOTES = r"remat|recomput|activation checkpoint"

# zero_or_fsdp column -> ZeRO stage. Checked in order; blank -> 1 (Megatron's distributed optimizer,
# recorded as an assumption).
_ZERO_RULES: tuple[tuple[str, int], ...] = (
    (r"SHARD_GRAD_OP|no reshard of params", 2),    # params gathered once per step: ZeRO-2
    (r"^ZeRO-1", 1),
    (r"^ZeRO-2", 2),
    (r"^ZeRO-3", 3),
    (r"FSDP|FULL_SHARD", 3),
)
# Sharding within a slice/VM and plain data parallelism across them (hybrid sharding): the shard
# group is one slice's data-parallel ranks (parallelism.zero_group = dp / slices), or the number
# MaxText's ici_fsdp_parallelism gives when it is positive.
_HYBRID_SHARDING = r"across slices|within slice|DCN DP \d+"
_ICI_FSDP = r"ici_fsdp(?:_parallelism)?=(-?\d+)"
# TPU Multislice: how many ICI slices the run joins over the DCN (hardware column, then notes).
_SLICES_IN_ROW: tuple[tuple[str, str], ...] = (
    ("hardware", r"\((\d+) pods? x \d+ chips\)"),
    ("notes", r"chips = (\d+) ?x "),
)
_MULTISLICE = r"multislice|pods"

# model name -> MLP type of the schema ("swiglu": 3 matrices, "gelu": 2). Checked in order.
_MLP_RULES: tuple[tuple[str, str], ...] = (
    (r"llama|mistral|mixtral|qwen|deepseek|gpt[ _-]?oss|maxtext|palm", "swiglu"),
    (r"nemotron", "gelu"),          # squared-ReLU MLP: two matrices, like GELU
    (r"gpt|mpt|bloom|\bopt\b|megatron-turing|mt-nlg", "gelu"),
)
_GPT_STYLE = r"\bgpt(?![ _-]?oss)|megatron-turing|mt-nlg"     # vocab default 51200 applies
_GPT_DEFAULT_VOCAB = 51200
_MOE_NAME = r"mixtral|qwen3.*a\d+b|deepseek|gpt[ _-]?oss"
_MOE_NOTES = r"(\d+) (?:routed )?experts top-(\d+)"
_MOE_UNSUPPORTED_NOTES = r"shared|MLA attention"
# Model families with an attention the schema does not have (every layer is full causal attention).
_UNSUPPORTED_MODEL_FEATURES: tuple[tuple[str, str], ...] = (
    (r"gpt[ _-]?oss", "GPT-OSS alternates full attention with 128-token sliding-window layers "
                      "(OpenAI gpt-oss model card): sliding-window attention is not in the model "
                      "schema"),
)
# head_dim facts for model families whose head_dim is not hidden / heads (model.head_dim).
_HEAD_DIM_FACTS: tuple[tuple[str, int, str], ...] = (
    (r"qwen3", 128, "Qwen3 config.json: head_dim 128"),
)

# Sources whose software predates Megatron sequence parallelism (Korthikanti et al., May 2022).
_NO_SEQUENCE_PARALLEL_SOURCES: tuple[tuple[str, str], ...] = (
    (r"NVIDIA/Megatron-LM/blob/5281919", "Megatron-LM of Sep 2020 predates sequence parallelism"),
    (r"arxiv\.org/abs/2104\.04473", "Narayanan et al. 2021 predates sequence parallelism"),
)


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


def palm_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """PaLM model FLOPs per token (appendix B; DESIGN.md): 6N + 12·L·H·Q·T.

    N: non-embedding parameters (active ones for MoE); L layers, H heads, Q head dim, T sequence
    length. The attention term is the full (non-causal) score and context matmuls.
    """
    return (6 * model.non_embedding_params(active_only=True)
            + 12 * model.layers * model.heads * model.head_dim * seq_len)


def flops_per_token(model: ModelSpec, seq_len: int, convention: FlopsConvention) -> float:
    """FLOPs per token under a source's *convention* (see ``FLOPS_CONVENTIONS``)."""
    logits = 6 * model.hidden * model.vocab if convention.logits else 0
    return convention.recompute_factor * palm_flops_per_token(model, seq_len) + logits


# ----------------------------------------------------------------------------- mapped runs

@dataclass(frozen=True, slots=True)
class Measured:
    """The measured step of one run, in SI units.

    ``time_from``: "step" (published step time), "tokens" (global batch x seq_len / tokens per s),
    "tflops" (source FLOPs per step / (TFLOP/s per chip x chips)) or "mfu" (source FLOPs per step /
    (MFU x chips x the source's peak)). ``mfu`` is PaLM model FLOPs / (step x chips x dense BF16
    peak), FP8 runs included; ``published_mfu`` is the source's own figure (its own FLOP count and
    peak), None where it published none.
    """

    step_time_s: float
    time_from: str
    flops_convention: str
    model_flops_per_step: float
    mfu: float
    published_mfu: float | None


@dataclass(frozen=True, slots=True)
class MappedRun:
    """One row of runs.csv after the mapping: a scenario (``supported``) or the reason it has none."""

    id: str
    split: str
    hardware: str
    chips: int | None
    supported: bool
    reason: str                                # why unsupported; "" when supported
    topology: str | None = None
    family: str | None = None                  # A100 | H100 | TPU (the catalogue's chip family)
    scenario: Mapping[str, Any] | None = None  # DESIGN.md scenario mapping, loads with scenario_from_dict
    measured: Measured | None = None
    assumptions: tuple[str, ...] = ()
    framework: str = ""                        # software profile the run is predicted with


def _read_csv(path: Path) -> tuple[tuple[str, ...], list[tuple[int, dict[str, str]]]]:
    """Header and (line number, row) pairs of a CSV file; a missing file is a ConfigError."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = tuple(reader.fieldnames or ())
            rows = [(reader.line_num, row) for row in reader]
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte at offset {e.start}); save it as UTF-8") from None
    except csv.Error as e:
        raise ConfigError(f"{path}: not a valid CSV file ({e})") from None
    for line, row in rows:
        if None in row or any(v is None for v in row.values()):
            raise ConfigError(f"{path}:{line}: expected {len(header)} columns {list(header)}")
    return header, rows


def _number(text: str, where: str, field: str) -> float | None:
    """A finite number > 0, or None for a blank cell; anything else is a ConfigError."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {field}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: {field}: expected a finite number > 0, got {text!r}")
    return value


def _integer(text: str, where: str, field: str) -> int | None:
    value = _number(text, where, field)
    if value is None:
        return None
    if value != int(value):
        raise ConfigError(f"{where}: {field}: expected an integer, got {text!r}")
    return int(value)


def _load_overrides(path: Path, ids: Mapping[str, int]) -> dict[str, list[tuple[str, str, str]]]:
    """``{id: [(field, value, reason), ...]}`` from overrides.csv, checked against runs.csv ids."""
    header, rows = _read_csv(path)
    if header != OVERRIDE_COLUMNS:
        raise ConfigError(f"{path}: columns must be exactly {list(OVERRIDE_COLUMNS)}, got {list(header)}")
    out: dict[str, list[tuple[str, str, str]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for line, row in rows:
        where = f"{path}:{line}"
        run_id, field, value, reason = (row[c].strip() for c in OVERRIDE_COLUMNS)
        if run_id not in ids:
            raise ConfigError(f"{where}: id {run_id!r} is not in {RUNS_FILE}")
        if field not in OVERRIDABLE_FIELDS:
            raise ConfigError(f"{where}: field {field!r} cannot be overridden; allowed: "
                              f"{sorted(OVERRIDABLE_FIELDS)} (measured values never are)")
        if field == "topology" and value not in TOPOLOGY_CHIPS:
            raise ConfigError(f"{where}: topology {value!r}; valid: {sorted(TOPOLOGY_CHIPS)}")
        if not value:
            raise ConfigError(f"{where}: value: must not be empty")
        if not reason:
            raise ConfigError(f"{where}: reason: must not be empty")
        if (run_id, field) in seen:
            raise ConfigError(f"{where}: duplicate override of {run_id} {field} (first on line "
                              f"{seen[run_id, field]})")
        seen[run_id, field] = line
        out.setdefault(run_id, []).append((field, value, reason))
    return out


def _first(rules: Iterable[tuple[str, Any]], text: str) -> tuple[bool, Any]:
    for pattern, value in rules:
        if re.search(pattern, text, re.IGNORECASE):
            return True, value
    return False, None


class _RowMapper:
    """Maps one (overridden) runs.csv row; collects assumptions; raises _Unsupported with a reason."""

    def __init__(self, row: Mapping[str, str], where: str, forced_topology: str | None) -> None:
        self.row = row
        self.where = where
        self.forced_topology = forced_topology
        self.notes = row["notes"]
        self.assumptions: list[str] = []

    def cell(self, col: str) -> str:
        return self.row[col].strip()

    def integer(self, col: str) -> int | None:
        return _integer(self.row[col], self.where, col)

    def number(self, col: str) -> float | None:
        return _number(self.row[col], self.where, col)

    # --- hardware -------------------------------------------------------------------------
    def topology(self, chips: int) -> str:
        hardware = self.cell("hardware")
        if self.forced_topology is not None:
            topo = self.forced_topology
        else:
            for rule in HARDWARE_RULES:
                if re.search(rule.pattern, hardware, re.IGNORECASE):
                    break
            else:
                raise _Unsupported(f"hardware {hardware!r} matches no topology rule")
            if rule.topology is None:
                raise _Unsupported(rule.note)
            if rule.max_chips is not None and chips > rule.max_chips:
                raise _Unsupported(rule.beyond_reason)
            if rule.note:
                self.assumptions.append(rule.note)
            topo = rule.topology
        for pattern, note in _FABRIC_NOTES:
            if re.search(pattern, hardware, re.IGNORECASE):
                self.assumptions.append(note)
        if CATALOGUE[TOPOLOGY_CHIPS[topo]].vendor == "nvidia":
            if chips < GPUS_PER_NODE:
                raise _Unsupported(f"fewer than {GPUS_PER_NODE} GPUs ({chips}): a single partial "
                                   "node is not modelled")
            if chips % GPUS_PER_NODE:
                raise _Unsupported(f"{chips} GPUs is not a multiple of {GPUS_PER_NODE} (whole "
                                   "nodes only)")
        return topo

    # --- model ----------------------------------------------------------------------------
    def model(self) -> dict[str, Any]:
        name = self.cell("model")
        layers, hidden, heads = self.integer("layers"), self.integer("hidden"), self.integer("heads")
        if layers is None or hidden is None or heads is None:
            missing = [c for c, v in (("layers", layers), ("hidden", hidden), ("heads", heads)) if v is None]
            raise _Unsupported(f"model dims not published ({', '.join(missing)})")
        for pattern, why in _UNSUPPORTED_MODEL_FEATURES:
            if re.search(pattern, name, re.IGNORECASE):
                raise _Unsupported(why)
        m = re.search(r"head_dim (\d+)", self.notes)
        facts = [(int(m.group(1)), "notes")] if m else []
        facts += [(hd, why) for pattern, hd, why in _HEAD_DIM_FACTS if re.search(pattern, name, re.IGNORECASE)]
        head_dim = None
        for hd, why in facts:
            if hd * heads != hidden:
                head_dim = hd
                self.assumptions.append(f"head_dim {hd} ({why}): attention width {hd * heads} "
                                        f"!= hidden {hidden}")
                break
        found, mlp = _first(_MLP_RULES, name)
        if not found:
            raise _Unsupported(f"MLP type of model {name!r} unknown (no rule in _MLP_RULES)")
        ffn = self.integer("ffn_hidden")
        if ffn is None:
            if mlp != "gelu":
                raise _Unsupported(f"ffn_hidden not published for {mlp} model {name!r}")
            ffn = 4 * hidden
            self.assumptions.append(f"ffn_hidden not published: 4 x hidden = {ffn} (GPT-style GELU MLP)")
        kv_heads = self.integer("kv_heads")
        if kv_heads is None:
            kv_heads = heads
            self.assumptions.append(f"kv_heads not published: {heads} (multi-head attention)")
        vocab = self.integer("vocab")
        if vocab is None:
            if not re.search(_GPT_STYLE, name, re.IGNORECASE):
                raise _Unsupported(f"vocab not published for model {name!r}")
            vocab = _GPT_DEFAULT_VOCAB
            self.assumptions.append(f"vocab not published: {vocab} (GPT-2 BPE padded, GPT-style default)")
        model: dict[str, Any] = {"name": name, "layers": layers, "hidden": hidden, "ffn_hidden": ffn,
                                 "heads": heads, "kv_heads": kv_heads, "vocab": vocab, "mlp": mlp}
        if head_dim is not None:
            model["head_dim"] = head_dim
        if re.search(_MOE_NAME, name, re.IGNORECASE):
            if m := re.search(_MOE_UNSUPPORTED_NOTES, self.notes):
                raise _Unsupported(f"MoE with {m.group(0)!r} in the notes (shared experts / MLA "
                                   "attention): not in the model schema")
            if not (m := re.search(_MOE_NOTES, self.notes)):
                raise _Unsupported(f"MoE model {name!r} without expert count / top-k in the notes")
            model["moe"] = {"experts": int(m.group(1)), "top_k": int(m.group(2))}
        return model

    # --- training -------------------------------------------------------------------------
    def precision(self, topology: str) -> str:
        text = self.cell("precision")
        chip = CATALOGUE[TOPOLOGY_CHIPS[topology]]
        if re.search(_UNKNOWN_PRECISION, text, re.IGNORECASE):
            fp8_faster = chip.fp8_flops is not None and chip.fp8_flops > chip.bf16_flops
            if fp8_faster:
                raise _Unsupported(f"precision not published ({text or 'blank'}) on {chip.name}, "
                                   "whose FP8 peak exceeds its BF16 peak")
            self.assumptions.append(f"precision not published: bf16 ({chip.name} has no faster FP8 path)")
            return "bf16"
        found, value = _first(_PRECISION_RULES, text)
        if not found:
            raise _Unsupported(f"precision {text!r} matches no rule")
        if value == "bf16" and re.search(r"fp16|mixed", text, re.IGNORECASE) and "bf16" not in text.lower():
            self.assumptions.append(f"precision {text!r}: FP16 mixed precision modelled as bf16 "
                                    "(same tensor-core peak)")
        return value

    def recompute(self) -> str:
        text = self.cell("recompute")
        if not text:
            if m := re.search(_RECOMPUTE_IN_NOTES, self.notes, re.IGNORECASE):
                raise _Unsupported(f"recompute column blank but the notes describe one "
                                   f"({m.group(0)!r}...): policy not representable")
            self.assumptions.append("recompute not published: none")
            return "none"
        found, value = _first(_RECOMPUTE_RULES, text)
        if not found or value is None:
            raise _Unsupported(f"recompute policy {text!r} not representable (none/selective/full)")
        return value

    # --- parallelism ----------------------------------------------------------------------
    def zero(self) -> int:
        text = self.cell("zero_or_fsdp")
        if not text:
            self.assumptions.append("zero_or_fsdp not published: zero 1 (Megatron distributed "
                                    "optimizer / ZeRO-1 default)")
            return 1
        found, value = _first(_ZERO_RULES, text)
        if not found:
            raise _Unsupported(f"zero_or_fsdp {text!r} matches no rule")
        return value

    def slices(self) -> int:
        """ICI slices joined over the DCN (1 for a single slice)."""
        for col, pattern in _SLICES_IN_ROW:
            if m := re.search(pattern, self.cell(col)):
                return int(m.group(1))
        if re.search(_MULTISLICE, self.cell("hardware"), re.IGNORECASE):
            raise _Unsupported("multislice run without a published number of slices")
        return 1

    def zero_group(self, zero_text: str, dp: int, slices: int) -> int | None:
        """Shard group of hybrid sharding (None: ZeRO/FSDP over every data-parallel rank)."""
        m = re.search(_ICI_FSDP, zero_text)
        if m and int(m.group(1)) > 0:
            group = int(m.group(1))
            why = f"{m.group(0)} data-parallel ranks"
        elif re.search(_HYBRID_SHARDING, zero_text):
            group = dp // slices
            why = f"dp / slices = {dp} / {slices}"
        else:
            return None
        if dp % group:
            raise _Unsupported(f"sharding group {group} ({zero_text!r}) does not divide dp = {dp}")
        if group == dp:
            return None
        self.assumptions.append(f"hybrid sharding ({zero_text!r}): zero_group = {group} ({why}); "
                                "gradient shards all-reduced across the replicas")
        return group

    def layout(self, chips: int, zero_text: str, moe: bool) -> dict[str, int]:
        tp, pp, cp, ep, dp = (self.integer(c) for c in ("tp", "pp", "cp", "ep", "dp"))
        tp_, pp_, cp_ = tp or 1, pp or 1, cp or 1
        model_par = tp_ * pp_ * cp_
        if dp is not None:
            if model_par * dp != chips:
                raise _Unsupported(f"published layout tp*pp*cp*dp = {tp_}*{pp_}*{cp_}*{dp} = "
                                   f"{model_par * dp} != {chips} chips")
        elif re.search(r"FSDP|ZeRO", zero_text, re.IGNORECASE) and chips % model_par == 0:
            self.assumptions.append(f"dp not published: the remaining chips / (tp*pp*cp) = "
                                    f"{chips // model_par} ranks are sharded data parallel "
                                    f"({zero_text!r})")
        else:
            raise _Unsupported("parallel layout not published (dp missing and not implied by "
                               "the zero_or_fsdp column)")
        blank = [c for c, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep if moe else 1))
                 if v is None]
        if blank:
            self.assumptions.append(f"{', '.join(blank)} not published: 1 (consistent with dp = "
                                    f"chips / (tp*pp*cp) = {chips // model_par})")
        return {"tp": tp_, "pp": pp_, "cp": cp_, "ep": ep or 1}

    def schedule(self, layers: int, pp: int) -> dict[str, Any]:
        if pp == 1:
            return {}
        notes = self.notes
        vs: int | None = None
        if m := re.search(r"\bVP=(\d+)", notes):
            vs = int(m.group(1))
        elif m := re.search(r"(\d+) layers per virtual stage", notes):
            per = int(m.group(1))
            if layers % (pp * per):
                raise _Unsupported(f"{layers} layers on {pp} stages of {per}-layer virtual stages "
                                   "do not divide")
            vs = layers // (pp * per)
        elif m := re.search(r"interleaved (?:PP with|schedule m=)\s*(\d+)", notes, re.IGNORECASE):
            vs = int(m.group(1))
        elif re.search(r"interleaved", notes, re.IGNORECASE):
            raise _Unsupported("interleaved pipeline schedule without a published number of "
                               "virtual stages")
        else:
            self.assumptions.append("pipeline schedule not stated: 1f1b (non-interleaved)")
        if vs is not None and vs > 1:
            if layers % (pp * vs):
                raise _Unsupported(f"uneven interleaved stages: {layers} layers on pp {pp} x "
                                   f"{vs} virtual stages (the schema has equal stages only)")
            return {"schedule": "interleaved", "virtual_stages": vs}
        return {"schedule": "1f1b"}

    def sequence_parallel(self, tp: int) -> bool | None:
        if tp == 1:
            return None
        if re.search(r"no sequence parallelism", self.notes, re.IGNORECASE):
            return False
        for pattern, why in _NO_SEQUENCE_PARALLEL_SOURCES:
            if re.search(pattern, self.cell("source_url")):
                self.assumptions.append(f"sequence_parallel: false ({why})")
                return False
        return None

    # --- the whole row --------------------------------------------------------------------
    def scenario(self) -> tuple[str, dict[str, Any]]:
        chips = self.integer("chips")
        if chips is None:
            raise _Unsupported("chip count not published")
        topo = self.topology(chips)
        model = self.model()
        seq_len, batch = self.integer("seq_len"), self.integer("global_batch_seqs")
        if seq_len is None:
            raise _Unsupported("seq_len not published")
        if batch is None:
            raise _Unsupported("global batch not published")
        micro = self.integer("micro_batch")
        if micro is None:
            micro = 1
            self.assumptions.append("micro_batch not published: 1")
        training = {"seq_len": seq_len, "global_batch": batch, "micro_batch": micro,
                    "precision": self.precision(topo), "recompute": self.recompute()}
        zero_text = self.cell("zero_or_fsdp")
        par: dict[str, Any] = {**self.layout(chips, zero_text, "moe" in model), "zero": self.zero()}
        slices = self.slices()
        dp = chips // (par["tp"] * par["pp"] * par["cp"])
        if par["zero"] >= 1 and (group := self.zero_group(zero_text, dp, slices)) is not None:
            par["zero_group"] = group
        par.update(self.schedule(model["layers"], par["pp"]))
        if (sp := self.sequence_parallel(par["tp"])) is not None:
            par["sequence_parallel"] = sp
        cluster: dict[str, Any] = {"topology": topo, "chips": chips}
        if slices > 1:
            if CATALOGUE[TOPOLOGY_CHIPS[topo]].vendor == "nvidia":
                raise _Unsupported(f"{slices} slices/pods on GPUs: GPU topologies are one fabric")
            cluster["slices"] = slices
        raw = {"name": self.cell("id"), "cluster": cluster,
               "model": model, "training": training, "parallelism": par}
        if (fw := self.framework()) is not None:
            raw["software"] = {"framework": fw}
        return topo, raw

    def framework(self) -> str | None:
        """The ``framework`` column (the stack the source ran), None for the chip's default."""
        from .software import FRAMEWORKS

        text = self.row.get("framework", "").strip()
        if text in FRAMEWORKS:
            return text
        if text in ("", "other"):
            self.assumptions.append(f"framework {text or 'not labelled'}: the chip's default "
                                    "software profile")
            return None
        raise ConfigError(f"{self.where}: framework: got {text!r}; valid: "
                          f"{', '.join(FRAMEWORKS)}, other")

    def measure(self, model: ModelSpec, raw: Mapping[str, Any], chip: Chip) -> Measured:
        training = raw["training"]
        chips = raw["cluster"]["chips"]
        tokens = training["global_batch"] * training["seq_len"]
        palm_flops = tokens * palm_flops_per_token(model, training["seq_len"])
        _, conv_name = _first(_FLOPS_RULES, self.cell("source_url"))
        convention = FLOPS_CONVENTIONS[conv_name or "palm"]
        source_flops = tokens * flops_per_token(model, training["seq_len"], convention)
        step_s, tps, tflops, mfu_pct = (self.number(c) for c in ("step_time_s", "tokens_per_s",
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
                and re.search(_HARDWARE_FLOPS_NOTES, self.notes)):
            raise _Unsupported(f"published {time_from} counts hardware FLOPs (notes) under a "
                               "formula we do not have")
        return Measured(step_time_s=step_s, time_from=time_from, flops_convention=convention.name,
                        model_flops_per_step=palm_flops,
                        mfu=palm_flops / (step_s * chips * chip.bf16_flops),
                        published_mfu=None if mfu_pct is None else mfu_pct / 100)


def map_runs(data_dir: Path) -> tuple[MappedRun, ...]:
    """Map every row of ``data_dir/runs.csv`` (with ``overrides.csv``) to a scenario or a reason.

    Supported scenarios have been loaded with ``sim.config.scenario_from_dict``; a row the loader
    rejects is unsupported with the loader's message. Raises ``ConfigError`` for missing or
    malformed data files (bad numbers, unknown splits, duplicate ids, bad overrides).
    """
    from .config import scenario_from_dict  # lazily: the loader (and YAML) only when mapping

    data_dir = Path(data_dir)
    runs_path = data_dir / RUNS_FILE
    header, rows = _read_csv(runs_path)
    if missing := [c for c in RUNS_REQUIRED if c not in header]:
        raise ConfigError(f"{runs_path}: missing column(s) {missing}")
    ids: dict[str, int] = {}
    for line, row in rows:
        if row["id"] in ids:
            raise ConfigError(f"{runs_path}:{line}: duplicate id {row['id']!r} (first on line {ids[row['id']]})")
        if row["split"] not in SPLITS:
            raise ConfigError(f"{runs_path}:{line}: split: expected one of {list(SPLITS)}, got {row['split']!r}")
        ids[row["id"]] = line
    overrides = _load_overrides(data_dir / OVERRIDES_FILE, ids) if (data_dir / OVERRIDES_FILE).exists() else {}
    out: list[MappedRun] = []
    for line, original in rows:
        row = dict(original)
        forced: str | None = None
        notes: list[str] = []
        for field, value, reason in overrides.get(row["id"], ()):
            if field == "topology":
                forced = value
            else:
                row[field] = value
            notes.append(f"override {field} = {value}: {reason}")
        mapper = _RowMapper(row, f"{runs_path}:{line}", forced)
        mapper.assumptions.extend(notes)
        chips = mapper.integer("chips")
        try:
            topo, raw = mapper.scenario()
            try:
                scn = scenario_from_dict(raw, source=f"{RUNS_FILE}:{row['id']}")
            except SimError as e:
                raise _Unsupported(f"scenario loader: {e}") from None
            chip = scn.cluster.chip
            assert chip.name == TOPOLOGY_CHIPS[topo], (topo, chip.name)
            measured = mapper.measure(scn.model, raw, chip)
        except _Unsupported as e:
            out.append(MappedRun(id=row["id"], split=row["split"], hardware=row["hardware"],
                                 chips=chips, supported=False, reason=str(e),
                                 assumptions=tuple(mapper.assumptions)))
            continue
        assert scn.software is not None
        out.append(MappedRun(id=row["id"], split=row["split"], hardware=row["hardware"], chips=chips,
                             supported=True, reason="", topology=topo, family=chip.family,
                             scenario=raw, measured=measured, assumptions=tuple(mapper.assumptions),
                             framework=scn.software.framework))
    return tuple(out)


# ----------------------------------------------------------------------------- scoring

class TrainingPrediction(Protocol):
    """What ``TrainingPredictor()(scenario)`` returns (sim.training)."""

    @property
    def step_time_s(self) -> float: ...
    @property
    def mfu(self) -> float: ...
    @property
    def model_flops_per_step(self) -> float: ...


TrainingPredictor = Callable[[Mapping[str, Any]], TrainingPrediction]
"""Given a scenario mapping (DESIGN.md schema), the predicted step; may raise ConfigError or
InfeasibleError for a scenario it cannot run."""


@dataclass(frozen=True, slots=True)
class TrainingRunResult:
    """One supported run: measured vs predicted. Errors: step in %, MFU in percentage points."""

    id: str
    split: str
    family: str
    topology: str
    chips: int
    framework: str
    time_from: str
    flops_convention: str
    measured_step_s: float
    measured_mfu: float
    published_mfu: float | None
    model_flops_per_step: float                    # PaLM, from the mapping
    assumptions: tuple[str, ...]
    scenario: Mapping[str, Any]
    predicted_step_s: float | None = None
    predicted_mfu: float | None = None
    step_abs_err_pct: float | None = None
    mfu_abs_err_pp: float | None = None
    predicted_model_flops_per_step: float | None = None
    error: str | None = None                       # the predictor refused the run: its message


@dataclass(frozen=True, slots=True)
class UnsupportedTrainingRun:
    """A row with no scenario; listed with its reason, never predicted."""

    id: str
    split: str
    hardware: str
    chips: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class TrainingSummary:
    """Aggregate over the predicted runs of one split (family "all"), split x family, or split x
    family x framework (``framework`` "all" for the first two)."""

    split: str
    family: str
    runs: int
    step_median_abs_pct: float | None
    step_p90_abs_pct: float | None
    mfu_median_abs_pp: float | None
    framework: str = "all"


@dataclass(frozen=True, slots=True)
class TrainingReport:
    """Everything ``clustersim validate --suite training`` shows."""

    runs: tuple[TrainingRunResult, ...]        # supported rows, runs.csv order
    splits: tuple[TrainingSummary, ...]        # one per split, family "all"
    families: tuple[TrainingSummary, ...]      # one per (split, family) with supported runs
    unsupported: tuple[UnsupportedTrainingRun, ...]
    stacks: tuple[TrainingSummary, ...] = ()   # one per (split, family, framework)

    @property
    def errors(self) -> tuple[TrainingRunResult, ...]:
        """Supported runs the predictor refused."""
        return tuple(r for r in self.runs if r.error is not None)

    def summary(self, split: str, family: str = "all") -> TrainingSummary:
        """The summary of *split* (and *family*); KeyError if that group has no supported runs."""
        for s in (self.splits if family == "all" else self.families):
            if s.split == split and s.family == family:
                return s
        raise KeyError(f"no summary for split={split!r} family={family!r}")


def _percentile(values: Sequence[float], q: float) -> float | None:
    """q-quantile (0..1), linear interpolation between order statistics (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _score(run: MappedRun, predict: TrainingPredictor) -> TrainingRunResult:
    assert run.supported and run.measured is not None and run.scenario is not None
    assert run.family is not None and run.topology is not None and run.chips is not None
    m = run.measured
    unscored = TrainingRunResult(
        id=run.id, split=run.split, family=run.family, topology=run.topology, chips=run.chips,
        framework=run.framework, time_from=m.time_from, flops_convention=m.flops_convention, measured_step_s=m.step_time_s,
        measured_mfu=m.mfu, published_mfu=m.published_mfu, model_flops_per_step=m.model_flops_per_step,
        assumptions=run.assumptions, scenario=run.scenario)
    try:
        pred = predict(run.scenario)
    except SimError as e:              # ConfigError, InfeasibleError, TopologyError: listed, not scored
        return dataclasses.replace(unscored, error=f"{type(e).__name__}: {e}")
    step_s, mfu, flops = float(pred.step_time_s), float(pred.mfu), float(pred.model_flops_per_step)
    # MFU is not capped at 1: PaLM counts the full T x T attention, which causal kernels halve, so
    # a fast long-sequence step can exceed 100 % of the peak by that count.
    if not (math.isfinite(step_s) and step_s > 0 and math.isfinite(mfu) and mfu >= 0
            and math.isfinite(flops) and flops > 0):
        raise ValueError(f"predictor returned step_time_s={step_s!r}, mfu={mfu!r}, "
                         f"model_flops_per_step={flops!r} for {run.id}; expected a time > 0 s, "
                         "an MFU >= 0 and FLOPs > 0")
    return dataclasses.replace(unscored, predicted_step_s=step_s, predicted_mfu=mfu,
                               step_abs_err_pct=abs(step_s - m.step_time_s) / m.step_time_s * 100,
                               mfu_abs_err_pp=abs(mfu - m.mfu) * 100,
                               predicted_model_flops_per_step=flops)


def _summarize(split: str, family: str, runs: Iterable[TrainingRunResult],
               framework: str = "all") -> TrainingSummary:
    runs = [r for r in runs if r.error is None]
    step = [r.step_abs_err_pct for r in runs if r.step_abs_err_pct is not None]
    mfu = [r.mfu_abs_err_pp for r in runs if r.mfu_abs_err_pp is not None]
    return TrainingSummary(split=split, family=family, runs=len(runs),
                           step_median_abs_pct=_percentile(step, 0.5),
                           step_p90_abs_pct=_percentile(step, 0.9),
                           mfu_median_abs_pp=_percentile(mfu, 0.5), framework=framework)


def validate_training(data_dir: Path, predict: TrainingPredictor,
                      mapped: Sequence[MappedRun] | None = None) -> TrainingReport:
    """Score *predict* against every supported run in *data_dir* (a ``training/`` folder).

    *mapped*: the result of ``map_runs(data_dir)`` when the caller already has it. Runs the
    predictor refuses (a ``SimError``) are listed and kept out of the aggregates. Raises
    ``ConfigError`` for missing or malformed data files, ``ValueError`` for a nonsensical prediction.
    """
    from .progress import progress

    mapped = map_runs(data_dir) if mapped is None else tuple(mapped)
    supported = [m for m in mapped if m.supported]
    results = tuple(_score(m, predict) for m in progress(supported, len(supported), "training runs"))
    unsupported = tuple(UnsupportedTrainingRun(id=m.id, split=m.split, hardware=m.hardware,
                                               chips=m.chips, reason=m.reason)
                        for m in mapped if not m.supported)
    splits = tuple(_summarize(s, "all", (r for r in results if r.split == s)) for s in SPLITS)
    groups = sorted({(SPLITS.index(r.split), FAMILIES.index(r.family) if r.family in FAMILIES
                      else len(FAMILIES), r.family) for r in results})
    families = tuple(_summarize(SPLITS[i], fam, (r for r in results if r.split == SPLITS[i]
                                                  and r.family == fam))
                     for i, _, fam in groups)
    stack_keys = sorted({(SPLITS.index(r.split), r.family, r.framework) for r in results})
    stacks = tuple(_summarize(SPLITS[i], fam, (r for r in results if r.split == SPLITS[i]
                                                and r.family == fam and r.framework == fw), fw)
                   for i, fam, fw in stack_keys)
    return TrainingReport(runs=results, splits=splits, families=families, unsupported=unsupported,
                          stacks=stacks)


# ----------------------------------------------------------------------------- budgets

def check_training_budgets(report: TrainingReport, table: Mapping[str, float]) -> list[str]:
    """Violations of the ``[training]`` budgets, one line each; [] when within budget.

    Each family of ``FAMILIES`` is held separately to the median and (its own) p90 of its test split. A family
    with no predicted test run is a violation, and so is a family whose refused test runs (the
    predictor raised, e.g. a plan our memory model says does not fit although it ran) exceed
    ``refused_max_pct`` of its test runs; every refusal is listed in the report either way.
    """
    for key in sorted(TRAINING_BUDGET_KEYS):
        if key not in table:
            raise ConfigError(f"budgets: [training]: missing key {key!r}")
    out: list[str] = []
    for family in FAMILIES:
        try:
            s = report.summary("test", family)
        except KeyError:
            s = None
        if s is None or s.runs == 0:
            out.append(f"training: no predicted test-split runs for family {family}; cannot check budgets")
            continue
        for key, label, value in (("step_median_abs_pct", "median", s.step_median_abs_pct),
                                  (f"step_p90_abs_pct_{family}", "p90", s.step_p90_abs_pct)):
            assert value is not None
            if value > table[key]:
                out.append(f"training: {family} test split step-time {label} abs error {value:.2f}% "
                           f"> budget {key} = {table[key]:g}% ({s.runs} runs)")
        tested = [r for r in report.runs if r.split == "test" and r.family == family]
        refused = [r for r in tested if r.error is not None]
        if tested and 100 * len(refused) / len(tested) > table["refused_max_pct"]:
            out.append(f"training: {family} test split: {len(refused)} of {len(tested)} runs refused "
                       f"> budget refused_max_pct = {table['refused_max_pct']:g}% "
                       f"({', '.join(r.id for r in refused)})")
    return out


# ----------------------------------------------------------------------------- output

def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_training_report(report: TrainingReport) -> str:
    """Fixed-width text: per-run rows, per-split and per-family summaries, unsupported, errors."""
    width = max([len(r.id) for r in report.runs] + [len(u.id) for u in report.unsupported] + [3])
    lines = [
        "training: predicted vs measured step time of published training runs",
        ("  step error: |pred - meas| / meas in %; MFU: PaLM model FLOPs / (step x chips x dense "
         "BF16 peak), FP8 runs included; MFU error in percentage points"),
        ("  from: where the measured step comes from (step | tokens: batch x seq / tokens/s | "
         "tflops, mfu: the source's FLOP count, see flops_convention in --json)"),
        "",
        (f"{'run':<{width}}  {'split':<12}{'family':<7}{'framework':<14}{'chips':>6} {'from':<7}{'meas s':>10}"
         f"{'pred s':>10}{'err%':>8}{'meas MFU%':>10}{'pred MFU%':>10}  note"),
    ]
    for r in report.runs:
        note = f"predictor refused: {r.error}" if r.error is not None else ""
        if (r.predicted_model_flops_per_step is not None
                and abs(r.predicted_model_flops_per_step / r.model_flops_per_step - 1) > 0.01):
            note = (f"predictor's model FLOPs differ by "
                    f"{(r.predicted_model_flops_per_step / r.model_flops_per_step - 1) * 100:+.1f}%")
        lines.append(f"{r.id:<{width}}  {r.split:<12}{r.family:<7}{r.framework:<14}{r.chips:>6} {r.time_from:<7}"
                     f"{r.measured_step_s:>10.4g}{_f(r.predicted_step_s, '.4g'):>10}"
                     f"{_f(r.step_abs_err_pct, '.1f'):>8}{r.measured_mfu * 100:>10.1f}"
                     f"{_f(None if r.predicted_mfu is None else r.predicted_mfu * 100, '.1f'):>10}"
                     f"  {note}".rstrip())
    head = (f"{'split':<12}{'family':<8}{'framework':<14}{'runs':>5}{'step med%':>11}"
            f"{'step p90%':>11}{'MFU med pp':>12}")
    lines += ["", "by split (predicted runs):", head]
    for s in (*report.splits, None, *report.families, "stacks", *report.stacks):
        if s is None:
            lines += ["", "by split and family:", head]
            continue
        if s == "stacks":
            lines += ["", "by split, family and framework (software profile):", head]
            continue
        assert isinstance(s, TrainingSummary)
        lines.append(f"{s.split:<12}{s.family:<8}{s.framework:<14}{s.runs:>5}"
                     f"{_f(s.step_median_abs_pct, '.1f'):>11}"
                     f"{_f(s.step_p90_abs_pct, '.1f'):>11}{_f(s.mfu_median_abs_pp, '.1f'):>12}")
    lines += ["", f"unsupported ({len(report.unsupported)} runs, not predicted):"]
    for u in report.unsupported:
        lines.append(f"{u.id:<{width}}  {u.split:<12}{_f(u.chips, 'd'):>6}  {u.reason}")
    lines += ["", f"errors ({len(report.errors)} runs the predictor refused):"]
    for r in report.errors:
        lines.append(f"{r.id:<{width}}  {r.split:<12}{r.chips:>6}  {r.error}")
    return "\n".join(lines)


def training_report_to_json(report: TrainingReport) -> dict[str, Any]:
    """The report as plain JSON types (times in s, MFU as fractions, errors in % and pp)."""
    return {
        "suite": "training",
        "flops_conventions": {c.name: dataclasses.asdict(c) for c in FLOPS_CONVENTIONS.values()},
        "runs": [dataclasses.asdict(r) for r in report.runs],
        "splits": [dataclasses.asdict(s) for s in report.splits],
        "families": [dataclasses.asdict(s) for s in report.families],
        "stacks": [dataclasses.asdict(s) for s in report.stacks],
        "unsupported": [dataclasses.asdict(u) for u in report.unsupported],
        "errors": [{"id": r.id, "split": r.split, "error": r.error} for r in report.errors],
    }


# ----------------------------------------------------------------------------- calibration fit

def fit_stack_efficiency(data_dir: Path,
                         predictor_for: Callable[[dict[tuple[str, str, str], float]], Any],
                         rounds: int = 3, min_runs: int = 3) -> dict[tuple[str, str, str], float]:
    """Fit of ``sim.calibration.STACK_EFFICIENCY`` on the calibration split only.

    Per (framework, GPU family or TPU generation, precision) with at least *min_runs* calibration
    runs, the factor on kernel time that makes the median ratio of predicted to measured step time
    1 over that group's calibration runs: start from 1 and rescale by the median ratio *rounds*
    times (communication does not scale with it). *predictor_for(table)* builds a predictor with
    that table. Groups with fewer runs are left out (they run at 1.0).
    """
    from .config import scenario_from_dict
    from .software import resolve_software

    mapped = [m for m in map_runs(data_dir) if m.supported and m.split == "calibration"]
    keys: dict[str, tuple[str, str, str]] = {}
    for m in mapped:
        assert m.scenario is not None
        scn = scenario_from_dict(m.scenario)
        chip = scn.cluster.chip
        profile = scn.software or resolve_software(None, None, chip)
        keys[m.id] = (profile.framework, chip.family if chip.vendor == "nvidia" else chip.arch,
                      scn.training.precision)
    counts: dict[tuple[str, str, str], int] = {}
    for k in keys.values():
        counts[k] = counts.get(k, 0) + 1
    table = {k: 1.0 for k, n in counts.items() if n >= min_runs}
    for _ in range(rounds):
        predict = predictor_for(dict(table))
        ratios: dict[tuple[str, str, str], list[float]] = {k: [] for k in table}
        for m in mapped:
            if keys[m.id] in ratios:
                r = _score(m, predict)
                if r.error is None and r.predicted_step_s:
                    ratios[keys[m.id]].append(r.predicted_step_s / r.measured_step_s)
        for k, v in ratios.items():
            if v:
                table[k] *= float(sorted(v)[len(v) // 2])
    return {k: round(v, 3) for k, v in sorted(table.items())}
