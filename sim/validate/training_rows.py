"""The training suite's data: the rows of runs.csv, with the per-row fixes of overrides.csv.

``runs.csv`` has one row per published run (model, hardware, layout, measured step time /
tokens/s / TFLOP/s / MFU, notes, calibration/test ``split``); ``overrides.csv``
(``id,field,value,reason``) replaces a cell of a row, forces its topology, or states the MoE
software its recipe ran (``moe_dispatcher``, ``ep_overlap``), its token drop and parameter dtype
(``capacity_factor``, ``weight_dtype``), and says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config.fields import _MAX_NUMBER
from ..errors import ConfigError
from ..software import MOE_DISPATCHERS
from .data import RUNS_FILE, SPLITS, integer, read_csv
from .training_rules import TOPOLOGY_CHIPS

__all__ = ["OVERRIDABLE_FIELDS", "Row", "RowReader", "load_overrides", "read_rows", "repeats"]

OVERRIDES_FILE = "overrides.csv"
OVERRIDE_COLUMNS = ("id", "field", "value", "reason")
RUNS_REQUIRED = ("id", "source_url", "model", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
                 "vocab", "seq_len", "global_batch_seqs", "micro_batch", "hardware", "chips", "tp",
                 "pp", "dp", "cp", "ep", "zero_or_fsdp", "recompute", "precision", "step_time_s",
                 "tokens_per_s", "tflops_per_chip", "mfu_pct", "notes", "split")
# Columns an override may replace. Measured values (step_time_s, tokens_per_s, tflops_per_chip,
# mfu_pct, hfu_pct) and the split never are; "topology" forces the topology instead of the
# hardware rules.
OVERRIDABLE_FIELDS = frozenset({
    "topology", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
    "global_batch_seqs", "micro_batch", "chips", "tp", "pp", "dp", "cp", "ep", "zero_or_fsdp",
    "recompute", "precision",
    # software the source's recipe ran, where the framework profile's default is not it
    "moe_dispatcher", "ep_overlap",
    # the recipe's token drop (model.moe.capacity_factor) and parameter dtype (MaxText
    # weight_dtype: bfloat16 = bf16 weights and Adam moments, no fp32 master copy)
    "capacity_factor", "weight_dtype",
})
# What makes two rows one measurement: the same model, hardware, chips and sequence length with
# the same published figures (a source's table quoted again by another page of the same source).
PUBLISHED_FIGURES = ("step_time_s", "tokens_per_s", "tflops_per_chip", "mfu_pct")
SAME_MEASUREMENT = ("model", "hardware", "chips", "seq_len", *PUBLISHED_FIGURES)


@dataclass(frozen=True, slots=True)
class Row:
    """One runs.csv row after its overrides: the cells, where it is (file:line), the topology an
    override forces (None: the hardware rules decide) and one note per override applied."""

    cells: dict[str, str]
    where: str
    forced_topology: str | None
    overrides: tuple[str, ...]


class RowReader:
    """One (overridden) row as the mapping reads it: its cells and the assumptions taken for it,
    in the order they were taken."""

    def __init__(self, row: Mapping[str, str], where: str) -> None:
        self.row = row
        self.where = where
        self.notes = row["notes"]
        self.assumptions: list[str] = []

    def cell(self, col: str) -> str:
        return self.row[col].strip()

    def integer(self, col: str) -> int | None:
        return integer(self.row[col], self.where, col)


def read_rows(data_dir: Path) -> list[Row]:
    """The rows of ``data_dir/runs.csv`` in file order, ``data_dir/overrides.csv`` applied.

    Raises ``ConfigError`` for a missing or malformed file: a missing column, a duplicate id, an
    unknown split, a bad override.
    """
    data_dir = Path(data_dir)
    runs_path = data_dir / RUNS_FILE
    header, rows = read_csv(runs_path)
    if missing := [c for c in RUNS_REQUIRED if c not in header]:
        raise ConfigError(f"{runs_path}: missing column(s) {missing}")
    ids: dict[str, int] = {}
    for line, row in rows:
        if row["id"] in ids:
            raise ConfigError(f"{runs_path}:{line}: duplicate id {row['id']!r} (first on line {ids[row['id']]})")
        if row["split"] not in SPLITS:
            raise ConfigError(f"{runs_path}:{line}: split: expected one of {list(SPLITS)}, got {row['split']!r}")
        ids[row["id"]] = line
    overrides = load_overrides(data_dir / OVERRIDES_FILE, ids) if (data_dir / OVERRIDES_FILE).exists() else {}
    out: list[Row] = []
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
        out.append(Row(row, f"{runs_path}:{line}", forced, tuple(notes)))
    return out


def load_overrides(path: Path, ids: Mapping[str, int]) -> dict[str, list[tuple[str, str, str]]]:
    """``{id: [(field, value, reason), ...]}`` from overrides.csv, checked against runs.csv ids."""
    header, rows = read_csv(path)
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
        if field == "ep_overlap" and value not in ("true", "false"):
            raise ConfigError(f"{where}: ep_overlap {value!r}; valid: true, false")
        if field == "moe_dispatcher" and value not in MOE_DISPATCHERS:
            raise ConfigError(f"{where}: moe_dispatcher {value!r}; valid: {', '.join(MOE_DISPATCHERS)}")
        if field == "weight_dtype" and value not in ("float32", "bfloat16"):
            raise ConfigError(f"{where}: weight_dtype {value!r}; valid: float32, bfloat16")
        if field == "capacity_factor" and not _positive(value):
            raise ConfigError(f"{where}: capacity_factor {value!r}; valid: a number in "
                              f"(0, {_MAX_NUMBER['capacity_factor']:g}]")
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


def repeats(rows: list[Row]) -> dict[str, Row]:
    """``{id: the row it repeats}`` for rows that report a measurement another row already does
    (``SAME_MEASUREMENT``): a measurement is scored once, so a test row never repeats what the
    calibration split holds. Of each group the first calibration row stays, else the first row."""
    groups: dict[tuple[str, ...], list[Row]] = {}
    for r in rows:
        if any(r.cells[c].strip() for c in PUBLISHED_FIGURES):   # else it repeats nothing
            groups.setdefault(tuple(r.cells[c].strip() for c in SAME_MEASUREMENT), []).append(r)
    out: dict[str, Row] = {}
    for group in groups.values():
        kept = next((r for r in group if r.cells["split"] == "calibration"), group[0])
        out.update((r.cells["id"], kept) for r in group if r is not kept)
    return out


def _positive(text: str) -> bool:
    """A finite number in (0, bound], the model section's bound for a capacity factor."""
    try:
        return 0 < float(text) <= _MAX_NUMBER["capacity_factor"]
    except ValueError:
        return False
