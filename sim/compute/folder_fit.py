"""Kernel tables as input (issue 33): the compute model fitted on a folder of measured tables
instead of the bundled fits.

A folder in the format of ``validation/compute/<gpu>/`` (what ``clustersim bench --out DIR``
writes; the tables and their columns are described in ``validation/compute/README.md``) is fitted
by the same functions ``sim.calibration``'s constants come from (``sim.compute.tables``,
``sim.compute.moe_tables``), at the peaks of the chip the scenario runs on, so a folder measured on
the chip the bundled constants were fitted on gives those constants back
(``tests/test_kernel_tables.py``). Each kind of constant is fitted where the folder has the rows
that fit needs and keeps the bundled constant otherwise, said in ``KernelFit.kept``:

- GEMMs per input dtype (bf16, fp8, nvfp4): the tile/wave model on the rows of at least 20 us
  (``fit_gemm``; >= 4 rows); the bf16 GEMM fit is required, everything else is optional;
- fused attention per family and pass (cuDNN, FlashAttention-2, FlashAttention-4): all four
  fields where the rows allow, ``d256`` held at the bundled value without a head_dim-256 row and
  ``tail`` without two head counts; ``d64`` from ``attention_extra.csv`` when present.
  FlashAttention-3 and Triton are derived from the fitted cuDNN and FlashAttention-2 as the bundled
  ones are (``sim.compute.model.flash_params_of``);
- memory-bound op classes, the AdamW step, the MoE routing kernels and the grouped GEMM's time per
  group, per tile and streaming rate per SM, each where its table is in the folder.

Fits are cached per process by folder contents (file names, sizes and modification times) and chip.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .. import calibration as cal
from ..errors import ConfigError
from ..hardware import Chip
from .kernels import AttentionParams, GemmParams, GroupedGemmParams, MemoryParams
from .tables import (
    BACKENDS,
    FIT_MIN_S,
    KernelCase,
    attention_pass_cases,
    fit_attention,
    fit_attention_d64,
    fit_gemm,
    fit_memory_fractions,
    fit_optimizer_fractions,
    load_cases,
    load_head_dim_cases,
)

__all__ = ["GEMM_FILES", "KernelFit", "fit_folder", "check_tables_folder"]

# The GEMM tables a folder may hold (validation/compute/README.md); it needs one of them.
GEMM_FILES = ("gemm_layers_bf16.csv", "gemm_square.csv", "gemm_layers_fp8.csv",
              "gemm_layers_fp8_bwd.csv", "gemm_shapes.csv", "gemm_fp4.csv")
_MIN_ROWS = 4


@dataclass(frozen=True)
class KernelFit:
    """The constants fitted on one folder of tables for one chip (absent: the bundled ones)."""

    folder: str
    chip: str
    gemm: Mapping[str, GemmParams]
    attention: Mapping[tuple[str, str], AttentionParams]
    memory_fraction: Mapping[str, float]
    optimizer_fraction: Mapping[str, float]
    moe_memory: Mapping[str, MemoryParams]
    grouped: GroupedGemmParams | None
    fitted: tuple[str, ...]        # what was fitted, e.g. "gemm bf16 (40 rows)"
    kept: tuple[str, ...]          # what keeps the bundled constant, and why

    def attention_params(self, family: str, passname: str) -> AttentionParams | None:
        """The fitted constants of an attention family and pass, FlashAttention-3 and Triton
        derived as the bundled ones are; None where the folder fits neither it nor its base."""
        if family == "flash-attention-3":
            p = self.attention.get(("cudnn", passname))
            return None if p is None else replace(
                p, efficiency=p.efficiency * cal.FA3_SPEEDUP_VS_CUDNN[passname])
        if family == "triton":
            p = self.attention.get(("flash-attention-2", passname))
            return None if p is None else replace(p, efficiency=p.efficiency / cal.FA2_VS_TRITON)
        return self.attention.get((family, passname))


def check_tables_folder(folder: Path, where: str) -> Path:
    """*folder* resolved, or one line naming *where* when it is no folder of kernel tables."""
    if not folder.is_dir():
        raise ConfigError(f"{where}: {str(folder)!r} is not a folder; give a folder of kernel tables "
                          "(clustersim bench --out DIR writes one)")
    if not any((folder / f).is_file() for f in GEMM_FILES):
        raise ConfigError(f"{where}: {str(folder)!r} holds no GEMM table; it needs one of "
                          f"{', '.join(GEMM_FILES[:2])} (clustersim bench --out DIR measures them)")
    return folder.resolve()


BundledAttention = Callable[[Chip, str, str], AttentionParams]


def fit_folder(folder: str | Path, chip: Chip, bundled_attention: BundledAttention) -> KernelFit:
    """The compute constants fitted on *folder*'s tables at *chip*'s peaks (cached).
    *bundled_attention* (``sim.compute.model.flash_params_of``) gives the bundled constants of an
    attention family and pass: the fields a folder cannot pin are held at them."""
    path = Path(folder).resolve()
    if chip.is_tpu or chip.sms is None:
        raise ConfigError(f"software.kernel_tables: the tables are CUDA kernel timings; {chip.name} "
                          "is a TPU, whose kernels are not fitted from tables")
    files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                         for p in path.glob("*.csv") if p.is_file())) if path.is_dir() else ()
    return _fit(str(path), files, chip, bundled_attention)


@functools.lru_cache(maxsize=16)
def _fit(folder: str, files: tuple[tuple[str, int, int], ...], chip: Chip,
         bundled_attention: BundledAttention) -> KernelFit:
    path = check_tables_folder(Path(folder), "software.kernel_tables")
    cases = load_cases(path)
    assert chip.sms is not None
    sms, hbm = chip.sms, chip.hbm_Bps
    fitted: list[str] = []
    kept: list[str] = []

    gemm: dict[str, GemmParams] = {}
    for dtype in ("bf16", "fp8", "nvfp4"):
        n = _gemm_rows(cases, dtype)
        if n < _MIN_ROWS:
            if dtype == "bf16":
                raise ConfigError(f"{path}: {n} bf16 GEMM rows of at least {FIT_MIN_S * 1e6:.0f} us; "
                                  f"the fit needs >= {_MIN_ROWS} ({', '.join(GEMM_FILES[:2])})")
            if n:
                kept.append(f"gemm {dtype} ({n} rows, fewer than {_MIN_ROWS})")
            continue
        try:
            peak = chip.peak_flops(dtype)
        except ConfigError:
            kept.append(f"gemm {dtype} ({chip.name} has no {dtype} peak)")
            continue
        gemm[dtype] = fit_gemm(cases, dtype, peak, sms, hbm)
        fitted.append(f"gemm {dtype} ({n} rows)")

    attention = _fit_attention(path, cases, chip, bundled_attention, fitted, kept)
    memory = fit_memory_fractions(cases, hbm)
    if memory:
        fitted.append(f"memory-bound classes {', '.join(memory)}")
    optimizer = fit_optimizer_fractions(cases, hbm)
    if optimizer:
        fitted.append(f"optimizer {', '.join(optimizer)}")
    moe_memory, grouped = _fit_moe(path, cases, chip, gemm["bf16"], fitted, kept)
    return KernelFit(str(path), chip.name, gemm, attention, memory, optimizer, moe_memory, grouped,
                     tuple(fitted), tuple(kept))


def _gemm_rows(cases: list[KernelCase], dtype: str) -> int:
    return sum(1 for c in cases if c.kind == "gemm" and c.key == dtype and c.batch == 1
               and c.time_s >= FIT_MIN_S)


def _fit_attention(path: Path, cases: list[KernelCase], chip: Chip, bundled_attention: BundledAttention,
                   fitted: list[str], kept: list[str]) -> dict[tuple[str, str], AttentionParams]:
    out: dict[tuple[str, str], AttentionParams] = {}
    head_dim_cases = load_head_dim_cases(path)
    assert chip.sms is not None
    for family in sorted(set(BACKENDS.values())):
        for passname in ("fwd", "bwd"):
            rows = attention_pass_cases(cases, family)[passname]
            if len(rows) < _MIN_ROWS:
                if rows:
                    kept.append(f"attention {family} {passname} ({len(rows)} rows, fewer than {_MIN_ROWS})")
                continue
            try:
                bundled = bundled_attention(chip, family, passname)
            except ConfigError:
                kept.append(f"attention {family} {passname} (no such kernel on {chip.name})")
                continue
            fixed = {}
            if not any(s.head_dim >= 256 for s, _ in rows):
                fixed["d256"] = bundled.d256
            if len({s.heads for s, _ in rows}) < 2:
                fixed["tail"] = bundled.tail
            p = fit_attention(cases, family, passname, chip.bf16_flops, chip.sms, chip.hbm_Bps,
                              fixed=fixed)
            d64 = bundled.d64
            if any(c.key.startswith(family) and c.attention and c.attention.head_dim <= 64
                   for c in head_dim_cases):
                d64 = fit_attention_d64(head_dim_cases, family, passname, p, chip.bf16_flops,
                                        chip.sms, chip.hbm_Bps)
            out[(family, passname)] = replace(p, d64=d64)
            held = f", {'/'.join(fixed)} held" if fixed else ""
            fitted.append(f"attention {family} {passname} ({len(rows)} rows{held})")
    return out


def _fit_moe(path: Path, cases: list[KernelCase], chip: Chip, bf16: GemmParams, fitted: list[str],
             kept: list[str]) -> tuple[dict[str, MemoryParams], GroupedGemmParams | None]:
    from .moe_tables import GROUPED_TABLES, fit_grouped, fit_moe_memory, routing_cases

    assert chip.sms is not None
    moe: dict[str, MemoryParams] = {}
    routing = routing_cases(path)
    if routing:
        try:
            moe = fit_moe_memory(routing, chip.hbm_Bps, bf16.call_s)
            fitted.append(f"MoE routing {', '.join(moe)}")
        except ConfigError as e:
            kept.append(f"MoE routing ({e})")
    grouped = [c for c in cases if c.table in GROUPED_TABLES]
    params = None
    if len(grouped) >= _MIN_ROWS:
        params = fit_grouped(grouped, chip.bf16_flops, chip.sms, chip.hbm_Bps, bf16)
        fitted.append(f"grouped GEMM ({len(grouped)} rows)")
    elif grouped:
        kept.append(f"grouped GEMM ({len(grouped)} rows, fewer than {_MIN_ROWS})")
    return moe, params
