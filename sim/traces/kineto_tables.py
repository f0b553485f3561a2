"""Per-op kernel times of PyTorch-profiler (Kineto) traces as kernel tables in the format of
``validation/compute/<gpu>/`` (validation/compute/README.md), so that ``sim.compute.tables.
load_cases`` reads them like the measured microbenchmarks.

A trace recorded with ``record_shapes=True`` gives each CPU op its ``Input Dims`` and
``Input type``; a GPU kernel belongs to the innermost such op that encloses the CUDA call that
launched it (same thread; linked by ``args.correlation`` or the ``ac2g`` flow,
``sim.traces.kineto_events.index_events``). An op's time is the sum of the
durations of its kernels (one call; a split-K GEMM's reduction kernel included). Rows written:
- ``gemm_shapes.csv`` (dtype, m, n, k, time_us, tflops, source): 2-D GEMMs in bf16 from
  ``aten::mm`` ([m,k] x [k,n]), ``aten::addmm`` (bias, [m,k], [k,n]), ``aten::linear`` (x[..., k],
  W[n, k]: m = the product of x's leading dims) and ``aten::matmul`` with a 2-D right operand;
- ``gemm_other.csv`` (same columns, ``dtype`` as the trace names it): the GEMMs of other dtypes
  (fp32, fp16), and batched ``aten::bmm`` / ``aten::matmul`` as m = batch x m, with a ``batch``
  column; ``load_cases`` does not read it (no table of the model holds these kinds);
- ``attention.csv`` (backend, batch, seq, heads, kv_heads, head_dim, causal, pass, time_us,
  tflops, source): bf16 ``aten::_scaled_dot_product_flash_attention`` (FLASH_ATTENTION) and
  ``aten::_scaled_dot_product_cudnn_attention`` (CUDNN_ATTENTION), forward (``fwd``) and their
  ``..._backward`` (``bwd``), where the query and key shapes ([batch, heads, seq, head_dim]) and
  ``is_causal`` (``Concrete Inputs``, PyTorch >= 2.3) are recorded; self-attention only (query
  and key of one length).
FLOPs: 2mnk; attention as ``sim.compute.kernels.attention_flops`` counts them (4 b h s^2 d,
halved when causal, forward; 2.5x that backward: the README's count). Not derived: elementwise,
normalisation and optimizer rows (their bytes moved are not in the trace).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..compute import kernels
from ..compute.folder_fit import GEMM_FILES
from ..errors import ConfigError
from .kineto import is_kineto, kineto_files
from .kineto_events import CpuEvent, Thread, index_events, innermost

__all__ = ["GEMM_OPS", "cached_trace_tables", "is_trace", "write_kernel_tables"]

GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul"})
# op name -> (backend, pass, index of is_causal among the op's inputs) (aten/native_functions.yaml)
ATTENTION_OPS = {
    "aten::_scaled_dot_product_flash_attention": ("FLASH_ATTENTION", "fwd", 4),
    "aten::_scaled_dot_product_flash_attention_backward": ("FLASH_ATTENTION", "bwd", 11),
    "aten::_scaled_dot_product_cudnn_attention": ("CUDNN_ATTENTION", "fwd", 6),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("CUDNN_ATTENTION", "bwd", 14),
}
DTYPES = {"c10::BFloat16": "bf16", "float": "fp32", "c10::Half": "fp16"}
GEMM_COLS = ("dtype", "m", "n", "k", "time_us", "tflops", "source")
ATTN_COLS = ("backend", "batch", "seq", "heads", "kv_heads", "head_dim", "causal", "pass", "time_us", "tflops",
             "source")


def _is_shape_op(cat: str, name: str) -> bool:
    return cat in ("cpu_op", "operator") and (name in GEMM_OPS or name in ATTENTION_OPS)


def _ops_with_kernels(path: Path) -> list[tuple[str, dict[str, Any], float]]:
    """(name, args, kernel time in us) of every recorded GEMM / attention op that launched kernels,
    in the order of their first kernel; a kernel counts toward the innermost such op that holds
    its launch on the launching thread."""
    ix = index_events(path, _is_shape_op)
    ops: dict[Thread, list[CpuEvent]] = {}
    for c in ix.cpu:
        ops.setdefault(c.thread, []).append(c)
    kernels = [(g.launch, g.dur_us) for g in ix.gpu if g.cat == "kernel" and g.launch is not None]
    on: dict[Thread, list[int]] = {}                  # thread -> the kernels it launched
    for j, ((_, th), _) in enumerate(kernels):
        on.setdefault(th, []).append(j)
    op_of = [-1] * len(kernels)
    for th, js in on.items():
        if v := ops.get(th):
            hit = innermost([(o.ts_us, o.ts_us + o.dur_us) for o in v], [kernels[j][0][0] for j in js])
            for j, i in zip(js, hit):
                op_of[j] = i
    time_us: dict[tuple[Thread, int], float] = {}
    for ((_, th), dur), i in zip(kernels, op_of):
        if i >= 0:
            time_us[(th, i)] = time_us.get((th, i), 0.0) + dur
    return [(ops[th][i].name, ops[th][i].args, us) for (th, i), us in time_us.items()]


def _list(args: dict[str, Any], key: str) -> list[Any]:
    """The list at *key* of an op's ``args``; [] where it is absent or not a list."""
    v = args.get(key)
    return v if isinstance(v, list) else []


def _dims(args: dict[str, Any]) -> list[list[int]]:
    return [x if isinstance(x, list) and all(isinstance(v, int) for v in x) else [] for x in _list(args, "Input Dims")]


def gemm_shape(name: str, dims: list[list[int]]) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of a GEMM op from its input dims, or None when they do not say."""
    if name == "aten::mm" and len(dims) >= 2 and len(dims[0]) == 2 and len(dims[1]) == 2:
        return 1, dims[0][0], dims[1][1], dims[0][1]
    if name == "aten::addmm" and len(dims) >= 3 and len(dims[1]) == 2 and len(dims[2]) == 2:
        return 1, dims[1][0], dims[2][1], dims[1][1]
    if name == "aten::bmm" and len(dims) >= 2 and len(dims[0]) == 3 and len(dims[1]) == 3:
        return dims[0][0], dims[0][1], dims[1][2], dims[0][2]
    if name == "aten::linear" and len(dims) >= 2 and dims[0] and len(dims[1]) == 2:
        return 1, math.prod(dims[0][:-1]), dims[1][0], dims[1][1]
    if name == "aten::matmul" and len(dims) >= 2 and len(dims[0]) >= 2 and len(dims[1]) == 2:
        return 1, math.prod(dims[0][:-1]), dims[1][1], dims[1][0]
    if name == "aten::matmul" and len(dims) >= 2 and len(dims[0]) == len(dims[1]) >= 3:
        return math.prod(dims[0][:-2]), dims[0][-2], dims[1][-1], dims[0][-1]
    return None


def _attention_row(name: str, args: dict[str, Any], us: float, src: str) -> dict[str, object] | None:
    backend, pas, ci = ATTENTION_OPS[name]
    dims = _dims(args)
    types = _list(args, "Input type")
    concrete = _list(args, "Concrete Inputs")
    off = 1 if pas == "bwd" else 0                        # grad_out comes first
    if len(dims) < off + 2 or len(dims[off]) != 4 or len(dims[off + 1]) != 4 or len(concrete) <= ci:
        return None
    if DTYPES.get(str(types[off]) if len(types) > off else "") != "bf16":
        return None
    (b, h, s, d), (_, hk, sk, _) = dims[off], dims[off + 1]
    causal = {"True": 1, "False": 0}.get(str(concrete[ci]))
    if causal is None or s != sk or min(b, h, hk, s, d) <= 0:
        return None
    shape = kernels.AttentionShape(batch=b, heads=h, kv_heads=hk, seq_q=s, seq_k=s, head_dim=d, causal=bool(causal))
    flops = kernels.attention_flops(shape, backward=pas == "bwd")
    return {"backend": backend, "batch": b, "seq": s, "heads": h, "kv_heads": hk, "head_dim": d, "causal": causal,
            "pass": pas, "time_us": round(us, 3), "tflops": round(flops / us / 1e6, 3), "source": src}


def _write(path: Path, cols: Sequence[str], rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(cols))
        w.writeheader()
        w.writerows(rows)


def write_kernel_tables(trace_paths: Sequence[str | Path], out_dir: str | Path) -> dict[str, int]:
    """Writes the kernel tables of the Kineto traces at *trace_paths* (files or folders) into
    *out_dir* (created); returns the rows written per file name. ConfigError for bad input, or
    when the traces hold no GEMM or attention op with recorded shapes."""
    out = Path(out_dir)
    gemm: list[dict[str, object]] = []
    other: list[dict[str, object]] = []
    attn: list[dict[str, object]] = []
    files = [f for p in trace_paths for f in kineto_files(Path(p))]
    for f in files:
        src = f"kineto:{f.name}"
        for name, args, us in _ops_with_kernels(f):
            if us <= 0:
                continue
            if name in ATTENTION_OPS:
                if arow := _attention_row(name, args, us, src):
                    attn.append(arow)
                continue
            shape = gemm_shape(name, _dims(args))
            types = _list(args, "Input type") or [""]
            dt = str(types[1] if name == "aten::addmm" and len(types) > 1 else types[0])
            if shape is None or min(shape) <= 0:
                continue
            bt, m, n, k = shape
            row: dict[str, object] = {"dtype": DTYPES.get(dt, dt), "m": m, "n": n, "k": k, "time_us": round(us, 3),
                                      "tflops": round(2 * bt * m * n * k / us / 1e6, 4), "source": src}
            if bt == 1 and row["dtype"] == "bf16":
                gemm.append(row)
            else:
                other.append({**row, "m": bt * m, "batch": bt})
    if not (gemm or other or attn):
        raise ConfigError(f"{', '.join(str(p) for p in trace_paths)}: no GEMM or attention op with recorded shapes "
                          "and kernels; profile with record_shapes=True")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{out}: cannot create the table folder: {e.strerror}") from None
    written = {}
    for name, cols, rows in (("gemm_shapes.csv", GEMM_COLS, gemm), ("gemm_other.csv", (*GEMM_COLS, "batch"), other),
                             ("attention.csv", ATTN_COLS, attn)):
        if rows:
            _write(out / name, cols, rows)
            written[name] = len(rows)
    return written


def is_trace(p: Path) -> bool:
    """A Kineto trace file, or a folder of them that holds no kernel table."""
    if p.is_file():
        return is_kineto(p)
    if not p.is_dir() or any((p / f).is_file() for f in GEMM_FILES):
        return False
    try:
        return bool(kineto_files(p))
    except ConfigError:                          # no trace file in it: a tables folder's error
        return False


def cached_trace_tables(trace: Path, note: Callable[[str], None]) -> Path:
    """The kernel tables of a Kineto trace (a file, or a folder with one file per rank), written
    once into the user's cache folder, named by the trace files' names, sizes and modification
    times (``run --kernel-tables TRACE``); *note* says where the first time."""
    import hashlib
    import json
    import os

    digest = hashlib.sha256()
    try:
        for f in kineto_files(trace):
            st = f.stat()
            digest.update(f"{f.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except (OSError, RuntimeError) as e:          # RuntimeError: no home folder to cache in
        raise ConfigError(f"--kernel-tables: {trace}: {getattr(e, 'strerror', None) or e}") from None
    out = cache / "clustersim" / "trace-tables" / digest.hexdigest()[:16]
    if not (out / "done").is_file():
        try:
            rows = write_kernel_tables([trace], out)
            (out / "done").write_text(json.dumps(rows))
        except OSError as e:
            raise ConfigError(f"--kernel-tables: cannot write the trace's tables to {out} "
                              f"({e.strerror or e}); set XDG_CACHE_HOME to a writable folder") from None
        note(f"clustersim: kernel tables of {trace} ({', '.join(f'{n} {k}' for k, n in rows.items())} "
             f"rows) written to {out}")
    return out
