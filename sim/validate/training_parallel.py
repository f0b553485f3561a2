"""A runs.csv row's parallel layout -> the scenario's ``parallelism`` section and its slices.

The second half of the row mapping (``sim.validate.training_map``): tp, pp, cp and ep (published,
or 1 where dp and the chips imply it), the expert tensor parallelism (published in the notes, or 1
where ep does not divide dp and the experts fold over tensor-parallel ranks), the ZeRO stage and
the shard group of hybrid sharding, the ICI slices a TPU run spans, the pipeline schedule from the
notes, and sequence parallelism where a source says it was off. Every default taken for a blank
cell is written into the row's ``assumptions``; a layout the schema cannot express raises
``_Unsupported`` with the reason.
Data parallelism is the config's (``sim.config.data_parallel``), not derived again here.
"""

from __future__ import annotations

import re
from typing import Any

from ..config import data_parallel
from .training_rows import RowReader
from .training_rules import (
    _ETP_FOLD_DEFAULT,
    _ETP_IN_NOTES,
    _HYBRID_SHARDING,
    _ICI_FSDP,
    _MULTISLICE,
    _NO_SEQUENCE_PARALLEL_SOURCES,
    _PIPELINE_FLUSHES,
    _SLICES_IN_ROW,
    _ZERO_RULES,
    _first,
    _Unsupported,
)

__all__ = ["parallelism"]


def parallelism(r: RowReader, chips: int, model: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """(the ``parallelism`` mapping, the ICI slices the run spans) of row *r* on *chips* chips
    for its *model* mapping, its assumptions appended to *r* in the order they are taken."""
    zero_text = r.cell("zero_or_fsdp")
    layout, dp = _layout(r, chips, zero_text, "moe" in model)
    par: dict[str, Any] = {**layout, "zero": _zero(r)}
    slices = _slices(r)
    if par["zero"] >= 1 and (group := _zero_group(r, zero_text, dp, slices)) is not None:
        par["zero_group"] = group
    par.update(_schedule(r, model["layers"], par["pp"]))
    if par["pp"] > 1 and (flushes := _flushes(r)) > 1:
        par["pipeline_flushes"] = flushes
    if (sp := _sequence_parallel(r, par["tp"])) is not None:
        par["sequence_parallel"] = sp
    return par, slices


def _zero(r: RowReader) -> int:
    text = r.cell("zero_or_fsdp")
    if not text:
        r.assumptions.append("zero_or_fsdp not published: zero 1 (Megatron distributed "
                             "optimizer / ZeRO-1 default)")
        return 1
    found, value = _first(_ZERO_RULES, text)
    if not found:
        raise _Unsupported(f"zero_or_fsdp {text!r} matches no rule")
    return value


def _slices(r: RowReader) -> int:
    """ICI slices joined over the DCN (1 for a single slice)."""
    for col, pattern in _SLICES_IN_ROW:
        if m := re.search(pattern, r.cell(col)):
            return int(m.group(1))
    if re.search(_MULTISLICE, r.cell("hardware"), re.IGNORECASE):
        raise _Unsupported("multislice run without a published number of slices")
    return 1


def _zero_group(r: RowReader, zero_text: str, dp: int, slices: int) -> int | None:
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
    r.assumptions.append(f"hybrid sharding ({zero_text!r}): zero_group = {group} ({why}); "
                         "gradient shards all-reduced across the replicas")
    return group


def _layout(r: RowReader, chips: int, zero_text: str, moe: bool) -> tuple[dict[str, int], int]:
    """({tp, pp, cp, ep}, dp) of the row: published, or 1 where blank and dp is published or
    implied by FSDP/ZeRO over the remaining chips."""
    tp, pp, cp, ep, dp_published = (r.integer(c) for c in ("tp", "pp", "cp", "ep", "dp"))
    tp_, pp_, cp_ = tp or 1, pp or 1, cp or 1
    model_par = tp_ * pp_ * cp_
    if dp_published is not None:
        if model_par * dp_published != chips:
            raise _Unsupported(f"published layout tp*pp*cp*dp = {tp_}*{pp_}*{cp_}*{dp_published} = "
                               f"{model_par * dp_published} != {chips} chips")
        dp = data_parallel(chips, tp_, pp_, cp_)
    elif re.search(r"FSDP|ZeRO", zero_text, re.IGNORECASE) and chips % model_par == 0:
        dp = data_parallel(chips, tp_, pp_, cp_)
        r.assumptions.append(f"dp not published: the remaining chips / (tp*pp*cp) = {dp} ranks "
                             f"are sharded data parallel ({zero_text!r})")
    else:
        raise _Unsupported("parallel layout not published (dp missing and not implied by "
                           "the zero_or_fsdp column)")
    blank = [c for c, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep if moe else 1))
             if v is None]
    if blank:
        r.assumptions.append(f"{', '.join(blank)} not published: 1 (consistent with dp = "
                             f"chips / (tp*pp*cp) = {dp})")
    out = {"tp": tp_, "pp": pp_, "cp": cp_, "ep": ep or 1}
    if moe and (etp := _expert_tp(r, tp_, cp_, dp, ep or 1)) is not None:
        out["etp"] = etp
    return out, dp


def _expert_tp(r: RowReader, tp: int, cp: int, dp: int, ep: int) -> int | None:
    """parallelism.etp of an MoE row: the notes' ETP; else 1 where ep does not divide dp (the
    experts fold over tensor-parallel ranks, Megatron-Core's MoE parallel folding); else None
    (the default, tp)."""
    if m := re.search(_ETP_IN_NOTES, r.notes, re.IGNORECASE):
        return int(m.group(1) or m.group(2))
    if dp % ep == 0:
        return None
    etp, why = _ETP_FOLD_DEFAULT
    if (tp * cp * dp) % (ep * etp):
        raise _Unsupported(f"ep = {ep} divides neither dp = {dp} nor tp*cp*dp = {tp * cp * dp} "
                           "(the ranks its experts can fold over)")
    edp = tp * cp * dp // (ep * etp)
    r.assumptions.append(f"etp not published: {etp} (ep = {ep} does not divide dp = {dp}: the "
                         f"experts fold over tensor-parallel ranks, edp = {edp}; {why})")
    return etp


def _schedule(r: RowReader, layers: int, pp: int) -> dict[str, Any]:
    if pp == 1:
        return {}
    notes = r.notes
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
        r.assumptions.append("pipeline schedule not stated: 1f1b (non-interleaved)")
    if vs is not None and vs > 1:
        out: dict[str, Any] = {"schedule": "interleaved", "virtual_stages": vs}
        if layers % (pp * vs) == 0:
            return out
        return {**out, **_uneven_stages(r, layers, pp, vs)}
    return {"schedule": "1f1b"}


def _flushes(r: RowReader) -> int:
    """Pipeline schedules per step: the published gradient-accumulation steps on a stack that
    runs each as its own schedule (``_PIPELINE_FLUSHES``), else 1."""
    source, pattern, why = _PIPELINE_FLUSHES
    if not re.search(source, r.cell("source_url")) or not (m := re.search(pattern, r.notes)):
        return 1
    flushes = int(m.group(1))
    if flushes > 1:
        r.assumptions.append(f"pipeline_flushes = {flushes} ({m.group(0)}): {why}")
    return flushes


def _uneven_stages(r: RowReader, layers: int, pp: int, vs: int) -> dict[str, Any]:
    """Layers that do not split over pp x vs chunks, laid out as the run's framework lays them.

    NeMo AutoModel (torch.distributed.pipelining) gives each of its pp x vs model parts
    layers // parts layers and the first layers % parts parts one more, in model order, with the
    embedding on the first part and the norm and head on the last
    (``generate_hf_model_fqn_per_model_part`` in
    nemo_automodel/components/distributed/pipelining/functional.py, NVIDIA-NeMo/Automodel
    @36044ad3); part i runs on pipeline rank i mod pp (``stage_ids_this_rank``, "loop" style),
    the order of ``stage_layers``. Megatron-Bridge recipes instead count the embedding and the
    loss as a layer each (account_for_embedding/loss_in_pipeline_split), so the end stages hold
    one layer fewer."""
    if "Automodel" in r.cell("source_url"):
        parts = pp * vs
        if layers < parts:
            raise _Unsupported(f"{layers} layers on pp {pp} x {vs} virtual stages: fewer "
                               "layers than model parts")
        base, extra = divmod(layers, parts)
        split = [base + 1] * extra + [base] * (parts - extra)
        r.assumptions.append(f"{layers} layers on pp {pp} x {vs} virtual stages as AutoModel "
                             f"splits them: the first {extra} parts {base + 1} layers, the "
                             f"other {parts - extra} {base}")
        return {"stage_layers": split}
    if (layers + 2) % (pp * vs):
        raise _Unsupported(f"uneven interleaved stages: {layers} (+ 2 for embedding and loss) "
                           f"layers do not split over pp {pp} x {vs} virtual stages")
    ends = (layers + 2) // pp - 1
    r.assumptions.append(f"{layers} layers on pp {pp} x {vs} virtual stages: embedding and "
                         f"loss count as a layer each: first/last_stage_layers = {ends}")
    return {"first_stage_layers": ends, "last_stage_layers": ends}


def _sequence_parallel(r: RowReader, tp: int) -> bool | None:
    if tp == 1:
        return None
    if re.search(r"no sequence parallelism", r.notes, re.IGNORECASE):
        return False
    for pattern, why in _NO_SEQUENCE_PARALLEL_SOURCES:
        if re.search(pattern, r.cell("source_url")):
            r.assumptions.append(f"sequence_parallel: false ({why})")
            return False
    return None
