"""Reader of the Megatron-style per-op traces of the StragglerAnalysis artifact (parquet + meta YAML).

Format (ByteDance-Seed/StragglerAnalysis, ``data/trace-*.parquet``; the README of
``validation/stragglers/``): one row per op of one worker per (dp_rank, stage): columns ``dp_rank``,
``stage``, ``rank``, ``step``, ``optype``, ``start_ts``, ``duration`` (seconds), ``seq_id``, ``mc``,
``gmc``, ``mb_id``. The job meta (``meta-*.yaml``): ``dp_size``, ``pp_size``, ``tp_size``,
``vpp_size``, ``dsp_size``, ``world_size``. ``pandas`` and ``pyarrow`` (the ``traces`` extra)
are imported only when a trace is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..config.fields import check_label, show
from ..config.yamlio import read_yaml
from ..errors import ConfigError
from .table import OpTable, TraceMeta

__all__ = ["COLUMNS", "default_meta_path", "read_meta", "read_megatron_parquet"]

COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc")
_META_KEYS = {"trial_name", "run_id", "dp_size", "dsp_size", "pp_size", "tp_size", "vpp_size", "world_size"}
# The artifact records Megatron's garbage-collection point as a zero-length marker op; every other
# op must have a positive duration.
ZERO_LENGTH_OPTYPES = frozenset({"gc"})
MAX_OP_S = 86_400.0
MAX_CLOCK_S = 1e10


def default_meta_path(trace: Path) -> Path:
    """``trace-AR.parquet`` -> ``meta-AR.yaml`` beside it (the artifact's naming)."""
    stem = trace.stem[len("trace-"):] if trace.stem.startswith("trace-") else trace.stem
    return trace.with_name(f"meta-{stem}.yaml")


def read_meta(path: Path) -> TraceMeta:
    """The job layout in a ``meta-*.yaml`` file."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such meta file; give the job's layout with --meta META "
                          "(dp_size, pp_size, tp_size, vpp_size, world_size)")
    raw: Mapping[str, Any] = read_yaml(path, "trace meta")
    if unknown := sorted(set(raw) - _META_KEYS):
        raise ConfigError(f"{path}: unknown key(s) {unknown}; allowed {sorted(_META_KEYS)}")
    for k in ("dp_size", "pp_size", "tp_size", "world_size"):
        if k not in raw:
            raise ConfigError(f"{path}: {k}: missing; a meta file needs dp_size, pp_size, tp_size, world_size")
    try:
        name = check_label(str(raw.get("trial_name", path.stem)), "trial_name")
        return TraceMeta(name=name, dp=raw["dp_size"], pp=raw["pp_size"],
                         tp=raw["tp_size"], vpp=raw.get("vpp_size", 1), dsp=raw.get("dsp_size", 1),
                         world_size=raw["world_size"])
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise ConfigError("reading a parquet trace needs pandas and pyarrow: "
                          "pip install -e '.[traces]'") from None
    return pd


def read_megatron_parquet(path: Path, meta: TraceMeta) -> OpTable:
    """The ops of the trace at *path*, checked against *meta*; ConfigError names the bad row."""
    pd = _pandas()
    if not path.is_file():
        raise ConfigError(f"{path}: no such trace file")
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for a file it cannot read
        raise ConfigError(f"{path}: not a readable parquet trace ({type(e).__name__}: {e})") from None
    if missing := [c for c in COLUMNS if c not in df.columns]:
        raise ConfigError(f"{path}: missing column(s) {missing}; a trace needs {list(COLUMNS)}")
    if len(df) == 0:
        raise ConfigError(f"{path}: the trace has no ops")
    ints = {}
    for c in ("dp_rank", "stage", "rank", "step", "seq_id", "mc", "gmc"):
        col = df[c]
        if col.isna().any():
            i = int(np.flatnonzero(col.isna().to_numpy())[0])
            raise ConfigError(f"{path}: column {c!r} is empty at row {i} ({_where(df, i)})")
        ints[c] = _whole(path, c, col.to_numpy())
    optype = df["optype"].astype(str).to_numpy(dtype=object)
    for c in ("start_ts", "duration"):
        if df[c].to_numpy().dtype.kind not in "iuf":
            raise ConfigError(f"{path}: column {c!r} holds {df[c].dtype} values (row 0: "
                              f"{show(df[c].iloc[0])}); expected seconds as numbers")
    start = df["start_ts"].to_numpy(dtype=np.float64)
    dur = df["duration"].to_numpy(dtype=np.float64)
    zero_ok = np.isin(optype, list(ZERO_LENGTH_OPTYPES))
    bad = ~np.isfinite(dur) | ~np.isfinite(start) | (dur < 0) | ((dur == 0) & ~zero_ok)
    # an op over a day, or a clock over 1e10 s (year 2286 of Unix time), is no measurement
    bad |= (dur > MAX_OP_S) | (np.abs(start) > MAX_CLOCK_S)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"{path}: {_where(df, i)}: duration {float(dur[i]):g} s, start {float(start[i]):g} s; "
                          f"every op needs a finite duration > 0 (0 only for {sorted(ZERO_LENGTH_OPTYPES)}) "
                          f"and <= {MAX_OP_S:g} s, and a start within +-{MAX_CLOCK_S:g} s "
                          f"({int(bad.sum())} such op(s))")
    _check_layout(path, meta, ints["dp_rank"], ints["stage"], ints["rank"])
    chunks = sorted(set(ints["mc"][ints["mc"] >= 0].tolist()))      # -1: not a chunk's op
    if chunks != list(range(meta.vpp)):
        # an interleaved meta over a 1F1B trace (or the reverse) would replay another schedule
        raise ConfigError(f"{path}: model chunks (column 'mc') {chunks[:8]} in the trace, but the "
                          f"meta says vpp_size {meta.vpp} (chunks 0..{meta.vpp - 1}); give the "
                          "job's own vpp_size")
    return OpTable(source=str(path), dp=ints["dp_rank"], stage=ints["stage"], rank=ints["rank"],
                   step=ints["step"], optype=optype, seq=ints["seq_id"], chunk=ints["mc"],
                   gchunk=ints["gmc"], start_s=start, dur_s=dur)


def _whole(path: Path, c: str, vals: np.ndarray) -> np.ndarray:
    """Column *c* as integers: whole numbers only (text, booleans and fractions are named)."""
    if vals.dtype.kind in "iu":
        return vals.astype(np.int64)
    if vals.dtype.kind == "f":
        bad = ~np.isfinite(vals) | (vals != np.round(vals))
        if not bad.any():
            return vals.astype(np.int64)
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"{path}: column {c!r} is {float(vals[i])!r} at row {i}; expected a whole number "
                          f"({int(bad.sum())} such row(s))")
    raise ConfigError(f"{path}: column {c!r} holds {vals.dtype} values (row 0: {show(vals[0])}); "
                      "expected whole numbers")


def _where(df: Any, i: int) -> str:
    r = df.iloc[i]
    return (f"rank {r.get('rank')} (dp_rank {r.get('dp_rank')}, stage {r.get('stage')}) step {r.get('step')} "
            f"op {r.get('optype')} #{r.get('seq_id')}")


def _check_layout(path: Path, meta: TraceMeta, dp: np.ndarray, stage: np.ndarray, rank: np.ndarray) -> None:
    """Workers of the trace against the meta: stages 0..pp-1, dp ranks 0..dp-1 (or 0..dp*dsp-1),
    one global rank per worker, ranks below the world size."""
    stages = sorted(set(stage.tolist()))
    if stages != list(range(meta.pp)):
        raise ConfigError(f"{path}: stages {stages} in the trace, but the meta says pp {meta.pp} "
                          f"(stages 0..{meta.pp - 1})")
    dps = sorted(set(dp.tolist()))
    if dps not in (list(range(meta.dp)), list(range(meta.dp * meta.dsp))):
        raise ConfigError(f"{path}: dp ranks {dps[:8]}{'...' if len(dps) > 8 else ''} in the trace, but the meta "
                          f"says dp {meta.dp} (dp ranks 0..{meta.dp - 1})")
    if (bad := (rank < 0) | (rank >= meta.world_size)).any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"{path}: rank {rank[i]} (dp_rank {dp[i]}, stage {stage[i]}) is outside the world "
                          f"size {meta.world_size} = dp x dsp x pp x tp of the meta")
    pairs = np.unique(np.stack([dp, stage, rank], axis=1), axis=0)
    workers = np.unique(pairs[:, :2], axis=0)
    if len(workers) != len(pairs):
        seen: dict[tuple[int, int], int] = {}
        for d, s, r in pairs.tolist():
            if (d, s) in seen:
                raise ConfigError(f"{path}: dp_rank {d}, stage {s} is recorded as ranks {seen[(d, s)]} and {r}; "
                                  "one worker has one rank")
            seen[(d, s)] = r
    if len(workers) != len(dps) * meta.pp:
        have = {(int(d), int(s)) for d, s in workers}
        miss = [(d, s) for d in dps for s in range(meta.pp) if (d, s) not in have]
        raise ConfigError(f"{path}: no ops at all for worker(s) (dp_rank, stage) {miss[:5]}; "
                          f"the meta's dp {meta.dp} x pp {meta.pp} workers must all be in the trace")
