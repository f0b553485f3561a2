"""The measured kernel tables (``validation/compute/<gpu>/``) read into typed cases, and the fits
of the kernel constants on them.

Each table is described in ``validation/compute/README.md``. A ``KernelCase`` is one measured row
with what the model needs to predict it; ``fit_*`` re-derive every constant of
``sim.calibration`` that comes from these tables (``tests/test_calibration.py`` checks that they
equal the committed values), always on the H100 tables: the H200 tables are a test of a chip the
fit never saw. The Blackwell tables (``b200/``, ``gb200/``, ``gb300/``) copy published measurements; the
Blackwell constants are fitted on the rows of the sources ``sim.calibration.BLACKWELL_FIT_SOURCES``
names per kernel kind, the other rows are a test.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError
from .kernels import (
    GEMM_DTYPE_BYTES,
    AttentionParams,
    AttentionShape,
    GemmParams,
    attention_flops,
    attention_time_s,
    gemm_time_s,
)

__all__ = ["KernelCase", "GPU_FOLDERS", "load_cases", "fit_gemm", "fit_gemm_efficiency", "same_shape_rows",
           "fit_attention", "fit_attention_d64", "load_head_dim_cases", "fit_gemm_curve",
           "fit_memory_fractions", "fit_optimizer_fractions", "BACKENDS", "DTYPE_BYTES"]

# Folder -> catalogue chip (sim.hardware) of the GPU it was measured on.
GPU_FOLDERS = {"h100-sxm-80gb": "H100-SXM", "h200-sxm-141gb": "H200", "b200": "B200", "gb200": "GB200",
               "gb300": "GB300"}
# The attention table's backend names -> our kernel families (software.attention). CUDNN_ATTENTION
# is PyTorch's SDPA cuDNN backend, CUDNN_FRONTEND cuDNN's fused attention called through the cuDNN
# frontend (what Transformer Engine calls), FLASH_ATTENTION PyTorch's FlashAttention-2 build.
BACKENDS = {"CUDNN_ATTENTION": "cudnn", "CUDNN_FRONTEND": "cudnn", "FLASH_ATTENTION": "flash-attention-2",
            "FLASH_ATTENTION_4": "flash-attention-4"}
DTYPE_BYTES = GEMM_DTYPE_BYTES
# The memory-bound ops the tables measure (validation/compute/README.md).
MEMORY_OPS = frozenset({"copy", "rmsnorm_fwd", "rmsnorm_fwd+bwd", "swiglu_fwd", "residual_add"})
# The fused per-tensor FP8 quantization kernels of quantize_compiled.csv (amax, scale, cast; the
# cast-transpose also writes the transposed copy Hopper's FP8 GEMMs need).
QUANTIZE_OPS = frozenset({"pertensor_current", "cast_transpose_current"})
# Rows shorter than this are mostly launch and event latency (README: "< ~30 us"); the fit skips
# them, the report keeps them.
FIT_MIN_S = 20e-6


@dataclass(frozen=True, slots=True)
class KernelCase:
    """One measured row. ``kind``: gemm | attention | memory | optimizer | ssd; ``key``: what the fit
    groups by (the dtype, the attention family and pass, the memory op class)."""

    table: str
    kind: str
    key: str
    label: str
    time_s: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    attention: AttentionShape | None = None
    nbytes: float = 0.0
    source: str = ""               # the table's source column (tables that merge several sources)
    ssd: tuple[int, ...] = ()      # an SSD row: chunks, heads, groups, head_dim, state, chunk length


def _rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV table, each with its line number in the file under ``_line``."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            out = []
            for r in reader:
                r["_line"] = str(reader.line_num)
                out.append(r)
            return out
    except OSError as e:
        raise ConfigError(f"{path}: cannot read kernel table: {e.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{path}: not a UTF-8 CSV table ({e})") from None


def _cell(v: str | None) -> str:
    """A table cell for a message: quoted, cut to 60 characters."""
    return "nothing" if v is None else repr(v if len(v) <= 60 else v[:60] + "...")


def _at(row: dict[str, str], path: Path) -> str:
    """``file:line`` of a row read by ``_rows``."""
    return f"{path}:{row.get('_line', '?')}"


def _num(row: dict[str, str], col: str, path: Path) -> float:
    if row.get(col) is None:
        raise ConfigError(f"{_at(row, path)}: column {col!r} missing; the table needs it "
                          "(validation/compute/README.md lists each table's columns)")
    try:
        v = float(row[col])
    except ValueError:
        raise ConfigError(f"{_at(row, path)}: column {col!r}: expected a plain number in the "
                          f"column's unit, got {_cell(row[col])}") from None
    if not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{_at(row, path)}: column {col!r}: expected a finite number > 0, got {v}")
    return v


def _pick(row: dict[str, str], col: str, valid: frozenset[str] | set[str], path: Path) -> str:
    v = row.get(col)
    if v is None or v not in valid:
        raise ConfigError(f"{_at(row, path)}: column {col!r}: got {_cell(v)}; valid: "
                          f"{', '.join(sorted(valid))}")
    return v


def _grouped_small_cases(path: Path) -> list[KernelCase]:
    """The balanced ``grouped_mm`` rows of ``moe_grouped_small.csv``: the forward and dgrad as
    C[m,n] per expert over its tokens, the wgrad as dW[n,k] contracting over them (m, n, k = n,
    k, tokens). Rows of ``multinomial`` routing (uneven groups) and Python loops are no single
    grouped GEMM of equal groups and are not predicted."""
    out: list[KernelCase] = []
    if not path.exists():
        return out
    for r in _rows(path):
        routing = _pick(r, "routing", {"balanced", "multinomial"}, path)
        if _pick(r, "impl", {"grouped_mm", "loop"}, path) != "grouped_mm" or routing != "balanced":
            continue
        passname = _pick(r, "pass", {"fwd", "dgrad", "wgrad"}, path)
        e, per, n, k = (int(_num(r, c, path)) for c in ("experts_local", "tokens_per_expert", "n", "k"))
        m, n, k = (n, k, per) if passname == "wgrad" else (per, n, k)
        out.append(KernelCase(path.name, "gemm", "bf16", f"{r.get('model')} {r.get('linear')} {passname} {e}x{per}",
                              _num(r, "time_us", path) * 1e-6, m=m, n=n, k=k, batch=e))
    return out


def load_cases(folder: Path) -> list[KernelCase]:
    """Every row of every table in one GPU's folder that the model predicts."""
    out: list[KernelCase] = []
    out += _gemm_cases(folder)
    path = folder / "moe_grouped_gemm.csv"
    if path.exists():
        for r in _rows(path):
            if _pick(r, "impl", {"grouped_mm", "loop"}, path) != "grouped_mm":   # a loop is no kernel
                continue
            e, per, n, k = (int(_num(r, c, path)) for c in ("experts_local", "tokens_per_expert",
                                                              "n", "k"))
            out.append(KernelCase(path.name, "gemm", "bf16", f"{r.get('model')} {r.get('linear')} {e}x{per}",
                                  _num(r, "time_us", path) * 1e-6, m=per, n=n, k=k, batch=e))
    out += _grouped_small_cases(folder / "moe_grouped_small.csv")
    path = folder / "attention.csv"
    if path.exists():
        out += [_attention_case(r, path, "head_dim") for r in _rows(path)]
    path = folder / "memory_bound.csv"
    if path.exists():
        for r in _rows(path):
            op = _pick(r, "op", MEMORY_OPS, path)
            out.append(KernelCase("memory_bound.csv", "memory", op, f"{op} {r.get('shape', '')}",
                                  _num(r, "time_us", path) * 1e-6,
                                  nbytes=_num(r, "bytes_moved", path)))
    path = folder / "quantize_compiled.csv"
    if path.exists():
        # FP8 quantization as a fused kernel (Inductor-compiled: one kernel per cast, as TE's cast
        # kernels are): the per-tensor casts only; the MXFP8 rows emulate on Hopper what Blackwell
        # runs in hardware-aided kernels, and the eager rows are chains of small kernels.
        for r in _rows(path):
            op = _pick(r, "op", QUANTIZE_OPS | {"mxfp8_rowwise", "mxfp8_rowwise_colwise"}, path)
            if op not in QUANTIZE_OPS:
                continue
            out.append(KernelCase(path.name, "memory", "quantize", f"{op} {r.get('tokens')}x{r.get('hidden')}",
                                  _num(r, "time_us", path) * 1e-6,
                                  nbytes=_num(r, "bytes_moved", path)))
    path = folder / "optimizer.csv"
    if path.exists():
        for r in _rows(path):
            opt = _pick(r, "optimizer", {"adamw_fused", "adamw_foreach"}, path)
            out.append(KernelCase("optimizer.csv", "optimizer", opt, opt,
                                  _num(r, "time_ms", path) * 1e-3,
                                  nbytes=_num(r, "params", path) * _num(r, "bytes_per_param_moved", path)))
    return out


def _gemm_cases(folder: Path) -> list[KernelCase]:
    """The GEMM tables of one folder: the layer sweeps and square GEMMs measured for this project
    (H100, H200), and the per-shape tables of published measurements (``gemm_shapes.csv``: bf16 and
    fp8; ``gemm_fp4.csv``: MXFP4 rows, which stand for NVFP4: validation/compute/README.md)."""
    out: list[KernelCase] = []
    gemm_tables = (("gemm_layers_bf16.csv", "bf16"), ("gemm_layers_fp8.csv", "fp8"),
                   ("gemm_layers_fp8_bwd.csv", "fp8"), ("gemm_square.csv", None),
                   ("gemm_shapes.csv", None), ("gemm_fp4.csv", None))
    for name, dtype in gemm_tables:
        path = folder / name
        if not path.exists():
            continue
        for r in _rows(path):
            dt = dtype or _pick(r, "dtype", {"bf16", "fp8", "mxfp4"}, path)
            m, n, k = (int(_num(r, c, path)) for c in ("m", "n", "k"))
            if "model" in r:
                label = f"{r.get('model')} tp{r.get('tp')} {r.get('tokens')} {r.get('linear')} {r.get('pass', 'fwd')}"
            elif name == "gemm_square.csv":
                label = f"square {m}"
            else:
                label = f"{dt} {m}x{n}x{k} {r.get('source', '')}".rstrip()
            out.append(KernelCase(name, "gemm", "nvfp4" if dt == "mxfp4" else dt, label,
                                  _num(r, "time_us", path) * 1e-6, m=m, n=n, k=k,
                                  source=r.get("source", "")))
    return out


def fit_gemm(cases: Sequence[KernelCase], dtype: str, peak_flops: float, sms: int,
             hbm_Bps: float, min_s: float = FIT_MIN_S) -> GemmParams:
    """Least squares in log time of the tile/wave model over one dtype's GEMM rows of at least
    *min_s* (tables timed with CUDA events around one call: 20 us, below which launch and event
    latency dominate; kernel-time tables may go lower)."""
    from scipy.optimize import least_squares

    rows = [c for c in cases if c.kind == "gemm" and c.key == dtype and c.time_s >= min_s
            and c.batch == 1]
    if len(rows) < 4:
        raise ConfigError(f"kernel tables: {len(rows)} {dtype} GEMM rows to fit; need >= 4")
    dtype_bytes = DTYPE_BYTES[dtype]

    def residuals(x: Sequence[float]) -> list[float]:
        p = GemmParams(x[0], x[1] * 1e-6, x[2], x[3] * 1e-6)
        return [math.log(gemm_time_s(c.m, c.n, c.k, dtype_bytes, peak_flops, sms, hbm_Bps, p,
                                     isolated=True) / c.time_s) for c in rows]

    fit = least_squares(residuals, [0.75, 2.0, 100.0, 5.0],
                        bounds=([0.3, 0.0, 0.0, 0.0], [1.0, 100.0, 4096.0, 100.0]))
    e, tile_us, k0, call_us = (float(v) for v in fit.x)
    return GemmParams(round(e, 3), round(tile_us, 2) * 1e-6, round(k0), round(call_us, 1) * 1e-6)


def same_shape_rows(cases: Sequence[KernelCase], min_s: float = FIT_MIN_S) -> list[KernelCase]:
    """The GEMM rows (every dtype) at the shapes whose bf16 row takes at least *min_s*: a table
    that times each shape in several dtypes is fitted on the same shapes in each (a fixed time
    floor would keep only the largest FP8 shapes, which run twice as fast)."""
    big = {(c.m, c.n, c.k, c.batch) for c in cases
           if c.kind == "gemm" and c.key == "bf16" and c.time_s >= min_s}
    return [c for c in cases if c.kind == "gemm" and (c.m, c.n, c.k, c.batch) in big]


def fit_gemm_efficiency(cases: Sequence[KernelCase], dtype: str, peak_flops: float, sms: int,
                        hbm_Bps: float, base: GemmParams, min_s: float = FIT_MIN_S) -> GemmParams:
    """*base* with only its efficiency refitted (least squares in log time) on one dtype's rows of
    at least *min_s*: for a source with too few shapes to pin the tile and call terms."""
    from scipy.optimize import least_squares

    rows = [c for c in cases if c.kind == "gemm" and c.key == dtype and c.time_s >= min_s
            and c.batch == 1]
    if len(rows) < 2:
        raise ConfigError(f"kernel tables: {len(rows)} {dtype} GEMM rows to fit; need >= 2")

    def residuals(x: Sequence[float]) -> list[float]:
        p = GemmParams(x[0], base.tile_s, base.k0, base.call_s)
        return [math.log(gemm_time_s(c.m, c.n, c.k, DTYPE_BYTES[dtype], peak_flops, sms, hbm_Bps, p,
                                     isolated=True) / c.time_s) for c in rows]

    fit = least_squares(residuals, [0.6], bounds=([0.1], [1.0]))
    return GemmParams(round(float(fit.x[0]), 3), base.tile_s, base.k0, base.call_s)


def attention_pass_cases(cases: Sequence[KernelCase], family: str) -> dict[str, list[tuple[AttentionShape, float]]]:
    """(shape, seconds) per pass; the backward is a ``bwd`` row, or the fwd+bwd row less the
    forward row."""
    fwd = {c.attention: c.time_s for c in cases if c.key == f"{family} fwd" and c.attention}
    both = {c.attention: c.time_s for c in cases if c.key == f"{family} fwd+bwd" and c.attention}
    bwd = [(c.attention, c.time_s) for c in cases if c.key == f"{family} bwd" and c.attention]
    return {"fwd": list(fwd.items()),
            "bwd": [(s, t - fwd[s]) for s, t in both.items() if s in fwd and t > fwd[s]] + bwd}


def load_head_dim_cases(folder: Path) -> list[KernelCase]:
    """The plain head-dimension rows of ``attention_extra.csv`` (query, key and value of one
    width, no padding: its ``hd64``, ``hd256`` and control rows), as ``load_cases`` reads
    ``attention.csv``; none where the table is absent."""
    path = folder / "attention_extra.csv"
    if not path.exists():
        return []
    return [_attention_case(r, path, "d_qk") for r in _rows(path)
            if r.get("d_qk") == r.get("d_v") and not r.get("padded_to")]


def _attention_case(r: dict[str, str], path: Path, head_dim_col: str) -> KernelCase:
    """One attention table row (its head dimension in *head_dim_col*) as a case."""
    _pick(r, "backend", set(BACKENDS), path)
    _pick(r, "pass", {"fwd", "fwd+bwd", "bwd"}, path)
    b, s, h, g, d = (int(_num(r, c, path)) for c in ("batch", "seq", "heads", "kv_heads",
                                                       head_dim_col))
    shape = AttentionShape(b, h, g, s, s, d, causal=_pick(r, "causal", {"0", "1"}, path) == "1")
    fam = BACKENDS[r["backend"]]
    mask = "" if shape.causal else " no-mask"
    return KernelCase(path.name, "attention", f"{fam} {r['pass']}",
                      f"{fam} b{b} s{s} h{h}/{g} d{d}{mask} {r['pass']}",
                      _num(r, "time_us", path) * 1e-6, attention=shape, source=r.get("source", ""))


def fit_attention_d64(cases: Sequence[KernelCase], family: str, passname: str, p: AttentionParams,
                      peak_flops: float, sms: int, hbm_Bps: float) -> float:
    """``AttentionParams.d64``: the factor on *p*'s efficiency at head_dim 64 and below that makes
    each such row of *cases* (``load_head_dim_cases``) come out as measured, their median."""
    import statistics

    bwd = passname == "bwd"
    at1 = replace(p, d64=1.0)
    ratios = []
    for shape, t in attention_pass_cases(cases, family)[passname]:
        if shape.head_dim > 64:
            continue
        matmul = attention_flops(shape, bwd) / (peak_flops * p.efficiency)
        rest = attention_time_s(shape, bwd, at1, peak_flops, sms, hbm_Bps) - matmul
        if t > rest:
            ratios.append(matmul / (t - rest))
    if not ratios:
        raise ConfigError(f"kernel tables: no head_dim-64 {family} {passname} attention rows")
    return round(statistics.median(ratios), 3)


def fit_attention(cases: Sequence[KernelCase], family: str, passname: str, peak_flops: float,
                  sms: int, hbm_Bps: float, fixed: Mapping[str, float] | None = None,
                  min_seq: int = 0) -> AttentionParams:
    """Least squares in log time of the flash-attention model over one family and pass, on rows
    of at least *min_seq* keys. *fixed* holds fields (``d256``, ``tail``...) at given values: a
    table with no head_dim-256 row cannot fit ``d256``, one with a single head count cannot
    separate ``tail`` from ``mem`` (both grow with the sequence alone)."""
    from scipy.optimize import least_squares

    rows = [(s, t) for s, t in attention_pass_cases(cases, family)[passname] if s.seq_k >= min_seq]
    if len(rows) < 4:
        raise ConfigError(f"kernel tables: {len(rows)} {family} {passname} attention rows to fit")
    bwd = passname == "bwd"
    fixed = dict(fixed or {})
    names = [n for n in _ATTENTION_FIELDS if n not in fixed]

    def params(x: Sequence[float]) -> AttentionParams:
        return AttentionParams(**fixed, **dict(zip(names, x, strict=True)))

    def residuals(x: Sequence[float]) -> list[float]:
        p = params(x)
        return [math.log(attention_time_s(s, bwd, p, peak_flops, sms, hbm_Bps) / t) for s, t in rows]

    fit = least_squares(residuals, [_ATTENTION_FIELDS[n][0] for n in names],
                        bounds=([_ATTENTION_FIELDS[n][1] for n in names],
                                [_ATTENTION_FIELDS[n][2] for n in names]))
    return params([round(float(v), 3) for v in fit.x])


# AttentionParams' fields in order: (start, lower bound, upper bound) of the fit.
_ATTENTION_FIELDS = {"efficiency": (0.6, 0.1, 1.0), "d256": (1.0, 0.3, 2.0), "tail": (0.5, 0.0, 20.0),
                     "mem": (1.0, 0.0, 50.0)}


def fit_memory_fractions(cases: Sequence[KernelCase], hbm_Bps: float) -> dict[str, float]:
    """Fraction of the HBM spec each memory-bound op class reaches: the median over its rows of
    bytes / time / spec. ``rmsnorm_bwd`` is the fwd+bwd row less the forward row of one shape
    (3 of the 5 tensors: x and dy read, dx written)."""
    import statistics

    rows = [c for c in cases if c.kind == "memory"]
    by: dict[str, list[float]] = {}
    fwd = {c.label.split()[1]: c for c in rows if c.key == "rmsnorm_fwd"}
    for c in rows:
        if c.key == "rmsnorm_fwd+bwd":
            f = fwd.get(c.label.split()[1])
            if f is None or c.time_s <= f.time_s:
                continue
            by.setdefault("rmsnorm_bwd", []).append((c.nbytes - f.nbytes) / (c.time_s - f.time_s) / hbm_Bps)
        else:
            by.setdefault(c.key, []).append(c.nbytes / c.time_s / hbm_Bps)
    return {k: round(statistics.median(v), 3) for k, v in sorted(by.items())}


def fit_gemm_curve(points: Sequence[tuple[float, float]], peak_flops: float) -> tuple[float, float]:
    """Least-squares (e_max, t_ramp_s) of ``eff(F) = e_max (1 - exp(-F / (peak t_ramp)))`` from
    (FLOPs, achieved FLOP/s) points: the TPU GEMM curve (``sim.compute.kernels.gemm_curve_time_s``)."""
    import numpy as np
    from scipy.optimize import least_squares

    F = np.array([p[0] for p in points], float)
    eff = np.array([p[1] for p in points], float) / peak_flops
    res = least_squares(lambda x: x[0] * (1 - np.exp(-F / (peak_flops * x[1]))) - eff,
                        [0.8, 1e-5], bounds=([0.0, 1e-9], [1.0, 1e-2]))
    return round(float(res.x[0]), 2), round(float(res.x[1]), 7)


def fit_optimizer_fractions(cases: Sequence[KernelCase], hbm_Bps: float) -> dict[str, float]:
    """Fraction of the HBM spec an AdamW step reaches, per implementation (``adamw_fused``...)."""
    return {c.key: round(c.nbytes / c.time_s / hbm_Bps, 3) for c in cases if c.kind == "optimizer"}
