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

from ..errors import ConfigError, SimError
from ..hardware import CATALOGUE
from .data import GPUS_PER_NODE, RUNS_FILE, integer
from .training_measured import Measured, measure_step
from .training_rows import read_rows
from .training_rules import (
    _FABRIC_NOTES,
    _GPT_DEFAULT_VOCAB,
    _GPT_STYLE,
    _HEAD_DIM_FACTS,
    _HYBRID_SHARDING,
    _ICI_FSDP,
    _MLP_RULES,
    _MOE_NAME,
    _MOE_NOTES,
    _MOE_UNSUPPORTED_NOTES,
    _MULTISLICE,
    _NO_SEQUENCE_PARALLEL_SOURCES,
    _OFFLOAD_POLICY,
    _PRECISION_RULES,
    _RECIPE_FACTS,
    _RECOMPUTE_IN_NOTES,
    _RECOMPUTE_RULES,
    _REMAT_POLICY,
    _SLICES_IN_ROW,
    _UNKNOWN_PRECISION,
    _UNSUPPORTED_MODEL_FEATURES,
    _ZERO_RULES,
    HARDWARE_RULES,
    TOPOLOGY_CHIPS,
    _first,
    _Unsupported,
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
        return integer(self.row[col], self.where, col)

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

    def recompute(self) -> dict[str, Any]:
        """``{"recompute": ...}`` or, for a MaxText policy name, ``{"remat_policy": ...}``; the
        recipe facts (_RECIPE_FACTS) of the row joined in."""
        text = self.cell("recompute")
        m = re.search(_REMAT_POLICY, text)
        if m and not _first(_RECOMPUTE_RULES, text)[1]:    # a recipe recompute does not name
            out: dict[str, Any] = {"remat_policy": m.group(1)}
        else:
            out = {"recompute": self._recompute(text)}
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
        if moe and ep and (chips // model_par) % ep:
            raise _Unsupported(f"ep = {ep} does not divide dp = {chips // model_par}: the experts "
                               "also span tensor-parallel ranks (Megatron expert_tensor_parallel"
                               "_size 1); the schema carves ep out of dp only")
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
            out: dict[str, Any] = {"schedule": "interleaved", "virtual_stages": vs}
            if layers % (pp * vs) == 0:
                return out
            return {**out, **self._uneven_stages(layers, pp, vs)}
        return {"schedule": "1f1b"}

    def _uneven_stages(self, layers: int, pp: int, vs: int) -> dict[str, Any]:
        """Layers that do not split over pp x vs chunks: the embedding and the loss count as a
        layer each (Megatron-Bridge recipes: account_for_embedding/loss_in_pipeline_split), so the
        end stages hold one layer fewer."""
        if (layers + 2) % (pp * vs):
            raise _Unsupported(f"uneven interleaved stages: {layers} (+ 2 for embedding and loss) "
                               f"layers do not split over pp {pp} x {vs} virtual stages")
        ends = (layers + 2) // pp - 1
        self.assumptions.append(f"{layers} layers on pp {pp} x {vs} virtual stages: embedding and "
                                f"loss count as a layer each: first/last_stage_layers = {ends}")
        return {"first_stage_layers": ends, "last_stage_layers": ends}

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
                    "precision": self.precision(topo), **self.recompute()}
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
            if re.search(_OFFLOAD_POLICY, training.get("remat_policy", "")):
                raise _Unsupported(f"host offload ({training['remat_policy']}) on {slices} slices: "
                                   "offload copies and DCN traffic share each host's PCIe link, "
                                   "which the model does not share (DCN modelled by bandwidth only)")
            cluster["slices"] = slices
        raw = {"name": self.cell("id"), "cluster": cluster,
               "model": model, "training": training, "parallelism": par}
        if (fw := self.framework()) is not None:
            raw["software"] = {"framework": fw}
        return topo, raw

    def framework(self) -> str | None:
        """The ``framework`` column (the stack the source ran), None for the chip's default."""
        from ..software import FRAMEWORKS

        text = self.row.get("framework", "").strip()
        if text in FRAMEWORKS:
            return text
        if text in ("", "other"):
            self.assumptions.append(f"framework {text or 'not labelled'}: the chip's default "
                                    "software profile")
            return None
        raise ConfigError(f"{self.where}: framework: got {text!r}; valid: "
                          f"{', '.join(FRAMEWORKS)}, other")


def map_runs(data_dir: Path) -> tuple[MappedRun, ...]:
    """Map every row of ``data_dir/runs.csv`` (with ``overrides.csv``) to a scenario or a reason.

    Supported scenarios have been loaded with ``sim.config.scenario_from_dict``; a row the loader
    rejects is unsupported with the loader's message. Raises ``ConfigError`` for missing or
    malformed data files (bad numbers, unknown splits, duplicate ids, bad overrides).
    """
    from ..config import scenario_from_dict  # lazily: the loader (and YAML) only when mapping

    out: list[MappedRun] = []
    for r in read_rows(data_dir):
        row = r.cells
        mapper = _RowMapper(row, r.where, r.forced_topology)
        mapper.assumptions.extend(r.overrides)
        chips = mapper.integer("chips")
        try:
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
        assert scn.software is not None
        out.append(MappedRun(id=row["id"], split=row["split"], hardware=row["hardware"], chips=chips,
                             supported=True, reason="", topology=topo, family=chip.family,
                             scenario=raw, measured=measured, assumptions=tuple(mapper.assumptions),
                             framework=scn.software.framework))
    return tuple(out)
