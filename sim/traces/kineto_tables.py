"""Per-op kernel times of PyTorch-profiler (Kineto) traces as kernel tables in the format of
``validation/compute/<gpu>/`` (validation/compute/README.md), so that ``sim.compute.tables.
load_cases`` reads them like the measured microbenchmarks.

A trace recorded with ``record_shapes=True`` gives each CPU op its ``Input Dims`` and
``Input type``; a GPU kernel belongs to the innermost such op that encloses the CUDA call that
launched it (same thread, linked by ``args.correlation``). An op's time is the sum of the
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
FLOPs: 2mnk; attention 4 b h s^2 d (halved when causal) forward, 2.5x that backward (the
README's count). Not derived: elementwise, normalisation and optimizer rows (their bytes moved
are not in the trace).
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .kineto import kineto_files
from .kineto_events import GPU_CATS, LAUNCH_CATS, read_trace_json

__all__ = ["GEMM_OPS", "write_kernel_tables"]

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


def _ops_with_kernels(path: Path) -> list[tuple[str, dict[str, Any], float]]:
    """(name, args, kernel time in us) of every recorded GEMM / attention op that launched kernels."""
    doc = read_trace_json(path)
    ops: dict[tuple[Any, Any], list[tuple[float, float, str, dict[str, Any]]]] = {}
    launches: dict[Any, tuple[float, tuple[Any, Any]]] = {}
    kernels: list[tuple[Any, float]] = []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat, args = str(e.get("cat", "")).lower(), e.get("args")
        args = args if isinstance(args, dict) else {}
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            continue
        name = str(e.get("name"))
        if cat in GPU_CATS and cat.endswith("kernel"):
            kernels.append((args.get("correlation"), float(dur)))
        elif cat in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = (float(ts), (e.get("pid"), e.get("tid")))
        elif cat in ("cpu_op", "operator") and (name in GEMM_OPS or name in ATTENTION_OPS):
            ops.setdefault((e.get("pid"), e.get("tid")), []).append((float(ts), float(ts + dur), name, args))
    for v in ops.values():
        v.sort(key=lambda o: (o[0], -o[1]))
    starts = {th: [o[0] for o in v] for th, v in ops.items()}
    time_us: dict[tuple[tuple[Any, Any], int], float] = {}
    for corr, dur in kernels:
        if corr not in launches:
            continue
        t, th = launches[corr]
        if not (v := ops.get(th, [])):
            continue
        # the innermost enclosing op: the latest-starting op whose span holds the launch
        i = bisect_right(starts[th], t) - 1
        while i >= 0 and not v[i][0] <= t <= v[i][1]:
            i -= 1
        if i >= 0:
            time_us[(th, i)] = time_us.get((th, i), 0.0) + dur
    return [(ops[th][i][2], ops[th][i][3], us) for (th, i), us in time_us.items()]


def _dims(args: dict[str, Any]) -> list[list[int]]:
    d = args.get("Input Dims")
    if not isinstance(d, list):
        return []
    return [x if isinstance(x, list) and all(isinstance(v, int) for v in x) else [] for x in d]


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
    types = args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    off = 1 if pas == "bwd" else 0                        # grad_out comes first
    if len(dims) < off + 2 or len(dims[off]) != 4 or len(dims[off + 1]) != 4 or len(concrete) <= ci:
        return None
    if DTYPES.get(str(types[off]) if len(types) > off else "") != "bf16":
        return None
    (b, h, s, d), (_, hk, sk, _) = dims[off], dims[off + 1]
    causal = {"True": 1, "False": 0}.get(str(concrete[ci]))
    if causal is None or s != sk or min(b, h, hk, s, d) <= 0:
        return None
    flops = 4 * b * h * s * s * d / (2 if causal else 1) * (2.5 if pas == "bwd" else 1.0)
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
            types = args.get("Input type") or [""]
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
