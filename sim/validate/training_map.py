"""Published training runs -> scenarios: the first stage of the training suite.

``map_runs`` turns every row of ``DIR/training/runs.csv``, after the per-row fixes of
``overrides.csv`` (``sim.validate.training_rows``), into either a scenario mapping in the
DESIGN.md schema or an "unsupported" entry with its reason.
The rules are the tables of ``sim.validate.training_rules`` (hardware strings -> topology,
precision / recompute / sharding strings -> schema values, notes patterns for pipeline schedules
and MoE); every default taken for a blank cell is written into the run's ``assumptions``. Each
scenario is then loaded with ``sim.config.scenario_from_dict``; a row the loader rejects is
unsupported with the loader's message. The measured step comes from
``sim.validate.training_measured.measure_step``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import scenario_from_dict
from ..errors import ConfigError, SimError
from ..hardware import CATALOGUE
from ..models import PRESETS
from ..software import FRAMEWORKS, default_framework
from .data import GPUS_PER_NODE, RUNS_FILE
from .training_measured import Measured, measure_step
from .training_parallel import parallelism
from .training_rows import RowReader, read_rows, repeats
from .training_rules import (
    _BALANCED_ROUTING_NOTES,
    _DEEPEP_NOTES,
    _EXACT_ROUTING_NOTES,
    _FABRIC_NOTES,
    _FLEX_NOTES,
    _GPT_DEFAULT_VOCAB,
    _GPT_STYLE,
    _HEAD_DIM_FACTS,
    _MLP_RULES,
    _MOE_NAME,
    _MOE_NOTES,
    _PER_DEVICE_BATCH,
    _PRECISION_RULES,
    _PRESET_MODELS,
    _RECIPE_FACTS,
    _RECOMPUTE_IN_NOTES,
    _RECOMPUTE_MODULES,
    _RECOMPUTE_RULES,
    _REMAT_CUSTOM,
    _REMAT_POLICY,
    _UNKNOWN_PRECISION,
    HARDWARE_RULES,
    TOPOLOGY_CHIPS,
    _first,
    _Unsupported,
    offloads,
)

__all__ = ["MappedRun", "map_runs"]

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



class _RowMapper(RowReader):
    """Maps one (overridden) runs.csv row; collects assumptions; raises _Unsupported with a reason.
    The parallel layout is ``sim.validate.training_parallel``'s."""

    def __init__(self, row: Mapping[str, str], where: str, forced_topology: str | None) -> None:
        super().__init__(row, where)
        self.forced_topology = forced_topology

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
            if topo not in TOPOLOGY_CHIPS:
                raise _Unsupported(f"topology {topo} (hardware {hardware!r}) is not bundled")
        for pattern, note in _FABRIC_NOTES:
            if re.search(pattern, hardware, re.IGNORECASE):
                self.assumptions.append(note)
        if not CATALOGUE[TOPOLOGY_CHIPS[topo]].is_tpu:
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
        found, preset = _first(_PRESET_MODELS, name)
        if found:
            return self._preset_model(preset, layers, hidden, heads)
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
            if not (m := re.search(_MOE_NOTES, self.notes)):
                raise _Unsupported(f"MoE model {name!r} without expert count / top-k in the notes")
            model["moe"] = {"experts": int(m.group(1)), "top_k": int(m.group(2))}
        return model

    def _preset_model(self, preset: str, layers: int, hidden: int, heads: int) -> dict[str, Any]:
        """The preset's architecture, its layers, hidden and heads checked against the row's."""
        spec = PRESETS[preset]
        for col, got, want in (("layers", layers, spec.layers), ("hidden", hidden, spec.hidden),
                               ("heads", heads, spec.heads)):
            if got != want:
                raise _Unsupported(f"{col} {got} differs from preset {preset}'s {want}")
        self.assumptions.append(f"architecture: preset {preset} (sim/models.py)")
        if re.search(_EXACT_ROUTING_NOTES, self.notes):
            # AutoModel's FakeBalancedGate (noise 0): "perfectly balanced assignment"
            # (nemo_automodel/components/moe/layers.py @15da268)
            # token i's experts (i x k + j) mod E: k consecutive experts (sim.workload.routing)
            self.assumptions.append("routing balanced exactly by the benchmark's fake gate: "
                                    "every expert-parallel rank gets the mean, each token k "
                                    "consecutive experts (routing: round_robin)")
            return {"preset": preset, "moe": {"load_imbalance": 1.0, "routing": "round_robin"}}
        if re.search(_BALANCED_ROUTING_NOTES, self.notes):
            self.assumptions.append("routing force-balanced by the benchmark: the busiest "
                                    "expert-parallel rank's share is the statistical one")
        return {"preset": preset}

    # --- training -------------------------------------------------------------------------
    def precision(self, topology: str) -> str:
        text = self.cell("precision")
        chip = CATALOGUE[TOPOLOGY_CHIPS[topology]]
        if re.search(_UNKNOWN_PRECISION, text, re.IGNORECASE):
            if chip.fp8_faster:
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

    def recompute(self) -> dict[str, Any]:
        """``{"recompute": ...}`` or, for a MaxText policy name, ``{"remat_policy": ...}``; the
        recipe facts (_RECIPE_FACTS) of the row joined in."""
        text = self.cell("recompute")
        m = re.search(_REMAT_POLICY, text)
        if custom := re.fullmatch(_REMAT_CUSTOM, text):
            pairs = [pair.split(":") for pair in custom.group(1).split(",")]
            out: dict[str, Any] = {"remat_policy": {k.strip(): v.strip() for k, v in pairs}}
        elif m and not _first(_RECOMPUTE_RULES, text)[1]:    # a recipe recompute does not name
            out = {"remat_policy": m.group(1)}
        else:
            out = {"recompute": self._recompute(text)}
            if (mods := re.fullmatch(_RECOMPUTE_MODULES, text)) and out["recompute"] == "selective":
                out["recompute_modules"] = [x.strip() for x in mods.group(1).split(",")]
        for col, pattern, keys, why in _RECIPE_FACTS:
            if re.search(pattern, self.cell(col), re.IGNORECASE):
                out.update(keys)
                self.assumptions.append(why)
        return out

    def _recompute(self, text: str) -> str:
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

    # --- the whole row --------------------------------------------------------------------
    def scenario(self) -> tuple[str, dict[str, Any]]:
        chips = self.integer("chips")
        if chips is None:
            raise _Unsupported("chip count not published")
        topo = self.topology(chips)
        model = self.model()
        if cf := self.row.get("capacity_factor", ""):           # overrides.csv: the recipe's drop
            if not _is_moe(model):
                raise _Unsupported(f"capacity_factor {cf} given for dense model {model.get('name')!r}")
            model["moe"] = {**model.get("moe", {}), "capacity_factor": float(cf)}
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
                    "precision": self.precision(topo), **self.recompute()}
        if self.row.get("weight_dtype", "") == "bfloat16":            # overrides.csv
            training.update(optimizer_state="bf16", master_weights=False)
        par, slices = parallelism(self, chips, _plain(model))
        training["micro_batch"] = self.pass_batch(micro, par)
        cluster: dict[str, Any] = {"topology": topo, "chips": chips}
        fw = self.framework()
        if (domain := self.nvl_domain(topo, chips)) is not None:
            cluster["nvl_domain"] = domain
        if slices > 1:
            if not CATALOGUE[TOPOLOGY_CHIPS[topo]].is_tpu:
                raise _Unsupported(f"{slices} slices/pods on GPUs: GPU topologies are one fabric")
            # a stack that overlaps the DCN reduction with the backward pass would send it over
            # each host's PCIe link while the offload copies use it, which the model does not
            # share; one that runs it after the backward (``slice_reduce_bytes``) does not
            stack = FRAMEWORKS[fw or default_framework(CATALOGUE[TOPOLOGY_CHIPS[topo]])]
            if offloads(training.get("remat_policy", "")) and not stack.slice_reduce_bytes:
                raise _Unsupported(f"host offload ({training['remat_policy']}) on {slices} slices "
                                   f"under {stack.framework}: offload copies and DCN traffic share "
                                   "each host's PCIe link, which the model does not share")
            cluster["slices"] = slices
        raw: dict[str, Any] = {"name": self.cell("id"), "cluster": cluster,
                               "model": model, "training": training, "parallelism": par}
        software: dict[str, str | bool] = {}
        if fw is not None:
            software["framework"] = fw
        if re.search(_DEEPEP_NOTES, self.notes) and _is_moe(model):
            software["moe_dispatcher"] = "deepep"
        if re.search(_FLEX_NOTES, self.notes):
            software["attention"] = "flex"
            self.assumptions.append("attention: PyTorch FlexAttention, as the stack column says")
        if _is_moe(model):                     # the recipe's own choices (overrides.csv)
            if dispatcher := self.row.get("moe_dispatcher", ""):
                software["moe_dispatcher"] = dispatcher
            if overlap := self.row.get("ep_overlap", ""):
                software["ep_overlap"] = overlap == "true"
        if software:
            raw["software"] = software
        return topo, raw

    def nvl_domain(self, topo: str, chips: int) -> int | None:
        """The job's GPUs per NVL72 rack (``cluster.nvl_domain``) where it does not fill whole
        racks: the notes' Slurm ``SEGMENT=N trays`` (4 GPUs a compute tray), else, for a job that
        is no whole number of racks, 64 a rack when that divides it (assumed: how MLPerf's
        NVL72 configs that state it place their jobs) or the job's own size within one rack."""
        if topo not in NVL72_TOPOLOGIES:
            return None
        if m := re.search(r"SEGMENT=(\d+) trays", self.notes):
            return 4 * int(m.group(1))
        if chips % 72 == 0:
            return None
        if chips < 72:
            self.assumptions.append(f"placement not published: the job's {chips} GPUs in one rack")
            return chips
        if chips % 64:
            raise _Unsupported(f"{chips} GPUs on NVL72 racks with no placement published")
        self.assumptions.append("placement not published: 64 GPUs a rack (as the configs that "
                                "state it: SEGMENT=16 trays)")
        return 64

    def pass_batch(self, micro: int, par: Mapping[str, Any]) -> int:
        """Sequences one data-parallel replica runs in a pass: the ``micro_batch`` column, or, for
        a row that counts it per device (``_PER_DEVICE_BATCH``), it times the tensor-parallel
        ranks that share those rows."""
        pattern, why = _PER_DEVICE_BATCH
        tp = int(par.get("tp", 1))
        if tp > 1 and re.search(pattern, self.notes):
            self.assumptions.append(why.format(tp=tp, micro=micro * tp))
            return micro * tp
        return micro

    def framework(self) -> str | None:
        """The ``framework`` column (the stack the source ran), None for the chip's default."""
        text = self.row.get("framework", "").strip()
        if text in FRAMEWORKS:
            return text
        if text in ("", "other"):
            self.assumptions.append(f"framework {text or 'not labelled'}: the chip's default "
                                    "software profile")
            return None
        raise ConfigError(f"{self.where}: framework: got {text!r}; valid: "
                          f"{', '.join(FRAMEWORKS)}, other")


NVL72_TOPOLOGIES = ("gb200-nvl72", "gb300-nvl72")


def _plain(model: dict[str, Any]) -> dict[str, Any]:
    """A preset model's layer count and MoE flag as the explicit fields the layout rules read."""
    if "preset" not in model:
        return model
    spec = PRESETS[model["preset"]]
    return {"layers": spec.layers, **({"moe": {"experts": spec.moe.experts}} if spec.moe else {})}


def _is_moe(model: dict[str, Any]) -> bool:
    return "moe" in model or ("preset" in model and PRESETS[model["preset"]].moe is not None)


def map_runs(data_dir: Path) -> tuple[MappedRun, ...]:
    """Map every row of ``data_dir/runs.csv`` (with ``overrides.csv``) to a scenario or a reason.

    Supported scenarios have been loaded with ``sim.config.scenario_from_dict``; a row the loader
    rejects is unsupported with the loader's message, one that repeats another's measurement
    (``repeats``) with that row. Raises ``ConfigError`` for missing or malformed data files.
    """
    out: list[MappedRun] = []
    rows = read_rows(data_dir)
    repeated = repeats(rows)
    for r in rows:
        row = r.cells
        mapper = _RowMapper(row, r.where, r.forced_topology)
        mapper.assumptions.extend(r.overrides)
        chips = mapper.integer("chips")
        try:
            if (kept := repeated.get(row["id"])) is not None:
                raise _Unsupported(f"the measurement of {kept.cells['id']} ({kept.cells['split']}) "
                                   "again: same model, hardware, chips, sequence and figures")
            topo, raw = mapper.scenario()
            try:
                scn = scenario_from_dict(raw, source=f"{RUNS_FILE}:{row['id']}")
            except SimError as e:
                raise _Unsupported(f"scenario loader: {e}") from None
            chip = scn.cluster.chip
            assert chip.name == TOPOLOGY_CHIPS[topo], (topo, chip.name)
            measured = measure_step(row, mapper.where, scn.model, raw, chip)
        except _Unsupported as e:
            out.append(MappedRun(id=row["id"], split=row["split"], hardware=row["hardware"],
                                 chips=chips, supported=False, reason=str(e),
                                 assumptions=tuple(mapper.assumptions)))
            continue
        out.append(MappedRun(id=row["id"], split=row["split"], hardware=row["hardware"], chips=chips,
                             supported=True, reason="", topology=topo, family=chip.family,
                             scenario=raw, measured=measured, assumptions=tuple(mapper.assumptions),
                             framework=scn.software.framework))
    return tuple(out)
