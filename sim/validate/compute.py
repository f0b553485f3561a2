"""Compute validation suite: every row of the measured kernel tables, predicted vs measured.

``clustersim validate --suite compute`` (issue 10). Data: ``DIR/compute/<gpu>/`` as measured for
this project on Hopper, and published Blackwell measurements (``b200/``, ``gb200/``, ``gb300/``; each source
cited in ``validation/compute/README.md``). The Hopper constants are fitted on the H100 tables only
(``sim.compute.tables``), so the H100 rows are the fit and the H200 rows a test of a chip the fit
never saw. The Blackwell constants are fitted on the rows of the sources that
``sim.calibration.BLACKWELL_FIT_SOURCES`` names for each kernel kind; every other row is a test. Each
row is predicted as the table timed it: one isolated call (the GEMM per-call latency included),
attention forward, backward or forward+backward, memory-bound ops at their class's bandwidth, the
AdamW step per implementation.

Budgets (``[compute]`` in ``budgets.toml``), on the H200 test tables (``BUDGETED_FOLDERS``): median
|time error| of GEMMs of at least ``GEMM_MIN_S`` and of attention rows. The Blackwell tables are
reported, not budgeted: their fit and test rows come from different library versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import calibration as cal
from ..compute.model import flash_params_of
from ..compute.moe_tables import GROUPED_TABLES
from ..compute.rows import predict_case, routing_kernel_cases, ssd_cases
from ..compute.tables import FIT_MIN_S, GPU_FOLDERS, KernelCase, load_cases
from ..errors import ConfigError
from ..hardware import CATALOGUE, Chip
from .stats import median, p90

__all__ = ["GEMM_MIN_S", "BUDGETED_FOLDERS", "ComputeRow", "ComputeSummary", "predict_case",
           "validate_compute"]

GEMM_MIN_S = 50e-6            # the target counts GEMMs of at least 50 us
FIT_FOLDER = "h100-sxm-80gb"  # the Hopper constants are fitted here
BUDGETED_FOLDERS = frozenset({"h200-sxm-141gb"})   # the test tables the [compute] budgets hold
# Attention family -> its short name in the per-family summary groups (Blackwell folders).
_SHORT = {"cudnn": "cudnn", "flash-attention-2": "fa2", "flash-attention-4": "fa4"}


@dataclass(frozen=True, slots=True)
class ComputeRow:
    """One measured kernel and its prediction (seconds; error in %)."""

    gpu: str
    split: str                     # "fit" (H100; Blackwell fit sources) | "test" (every other row)
    table: str
    kind: str
    label: str
    measured_s: float
    predicted_s: float
    err_pct: float


@dataclass(frozen=True, slots=True)
class ComputeSummary:
    """Median and p90 |time error| (%) of one group of rows of one GPU's tables."""

    gpu: str
    split: str
    group: str                     # gemm>=50us | gemm-<dtype>>=50us | attention[ <family>] | memory | ...
    rows: int
    median_abs_pct: float | None
    p90_abs_pct: float | None


def validate_folder(folder: Path, chip: Chip) -> tuple[list[ComputeRow], list[ComputeSummary]]:
    """``validate --suite compute --data DIR`` on a folder of the user's own tables (``clustersim
    bench``): every row predicted by the fit on that folder (split ``fit``: how well the model's
    formulas follow this GPU) and by the bundled constants on the same chip (split ``bundled``: how
    far the bundled fit is from this GPU)."""
    from ..compute.folder_fit import fit_folder

    fit = fit_folder(folder, chip, flash_params_of)
    rows: list[ComputeRow] = []
    groups: dict[tuple[str, str, str], list[float]] = {}
    for c in load_cases(folder):
        for split, f in (("fit", fit), ("bundled", None)):
            _record(rows, groups, chip.name, split, c, predict_case(c, chip, f))
    return rows, _summaries(groups)


def _record(rows: list[ComputeRow], groups: dict[tuple[str, str, str], list[float]], gpu: str,
            split: str, c: KernelCase, pred: float) -> float:
    """One row's prediction into *rows* and its |error| (%) into its summary groups (the single
    GEMMs' dtype group and their all-dtype one); the |error| back."""
    err = abs(pred / c.time_s - 1) * 100
    rows.append(ComputeRow(gpu, split, c.table, c.kind, c.label, c.time_s, pred, err))
    group = _group(c)
    groups.setdefault((gpu, split, group), []).append(err)
    if group.startswith("gemm-"):
        groups.setdefault((gpu, split, "gemm>=50us"), []).append(err)
    return err


def _summaries(groups: dict[tuple[str, str, str], list[float]]) -> list[ComputeSummary]:
    return [ComputeSummary(g, s, grp, len(v), median(v), p90(v)) for (g, s, grp), v in sorted(groups.items())]


def _group(c: KernelCase) -> str:
    """The summary group of a row: MoE grouped GEMMs apart from the single GEMMs (their own
    kernel and constants), a single GEMM by its length and dtype, else the row's kind."""
    if c.table in GROUPED_TABLES:
        return "grouped-gemm"
    if c.kind == "gemm":
        return "gemm<50us" if c.time_s < GEMM_MIN_S else f"gemm-{c.key}>=50us"
    return c.kind


def _split(folder: str, c: KernelCase) -> str:
    if folder == FIT_FOLDER:
        return "fit"
    kind = "gemm" if c.kind == "gemm" else c.key.split(" ")[0]
    return "fit" if c.source in cal.BLACKWELL_FIT_SOURCES.get(kind, ()) else "test"


def validate_compute(data_dir: Path) -> tuple[list[ComputeRow], list[ComputeSummary]]:
    """Predict every row of every GPU folder in *data_dir* (``DIR/compute``)."""
    data_dir = Path(data_dir)
    folders = sorted(p for p in data_dir.iterdir() if p.is_dir()) if data_dir.is_dir() else []
    if not folders:
        raise ConfigError(f"{data_dir}: no kernel-table folders (one per GPU, e.g. {FIT_FOLDER}/)")
    rows: list[ComputeRow] = []
    groups: dict[tuple[str, str, str], list[float]] = {}
    for folder in folders:
        if folder.name not in GPU_FOLDERS:
            raise ConfigError(f"{folder}: unknown GPU folder; known: {', '.join(sorted(GPU_FOLDERS))}")
        chip = CATALOGUE[GPU_FOLDERS[folder.name]]
        cases = load_cases(folder) + routing_kernel_cases(folder) + ssd_cases(folder)
        if not cases:
            raise ConfigError(f"{folder}: no kernel table in it (attention.csv, gemm_*.csv, ...)")
        for c in cases:
            split = _split(folder.name, c)
            err = _record(rows, groups, folder.name, split, c, predict_case(c, chip))
            if c.kind == "gemm" and chip.arch == "blackwell" and c.time_s >= FIT_MIN_S:
                # the published Blackwell GEMM tables are mostly shorter than 50 us
                groups.setdefault((folder.name, split, f"gemm-{c.key}>=20us"), []).append(err)
            if c.kind == "attention" and chip.arch == "blackwell":
                family = _SHORT[c.key.split(" ")[0]]
                groups.setdefault((folder.name, split, f"attention {family}"), []).append(err)
    return rows, _summaries(groups)
