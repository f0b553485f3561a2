"""Kernel timings the H100 tables in validation/compute/h100-sxm-80gb/ lack: FP8 quantize, MoE routing, attention.

Run once on one whole H100 (about two minutes; every section stops at a 5.5-minute deadline):
    PYTHONUNBUFFERED=1 python benchmarks/device/h100_kernels_extra.py --out $OUT
Check on a CPU with tiny shapes (every code path, numbers meaningless):
    python benchmarks/device/h100_kernels_extra.py --dry-run

Method, as validation/compute/README.md states it for the existing tables: CUDA events around one call,
3 warm-up calls, the median of 10 timed calls (5 for attention fwd+bwd); random bf16 inputs N(0,1);
`time_us` is per call (a chain of eager kernels counts as one call, launch gaps included); GB = 1e9
bytes, TFLOP = 1e12 FLOP. `GBps` divides the fewest bytes the operation must move (each input read
once, each output written once; `bytes_formula` states it, T = tokens, H = hidden) by the time, so an
unfused eager chain shows as a low rate against the fused kernel's traffic. Each case is one row,
written as soon as it is timed; a failing case writes its error in `note` and the rest go on.

Files under --out: quantize.csv (FP8 casts in eager PyTorch: per-tensor current scaling, cast+transpose
for the wgrad operand, an MXFP8 block quantization EMULATED on Hopper; Transformer Engine's own ops if
it imports), quantize_compiled.csv (the same casts fused by torch.compile, a stand-in for a stack's fused
kernels, on three shapes, run last), fp8_gemm.csv (torch._scaled_mm on a few of
the shapes, for the cast-to-GEMM ratio; also a control against gemm_layers_fp8.csv), moe_routing.csv
(router GEMM + softmax + top-k, token permute and unpermute), attention_extra.csv (SDPA with one backend
forced, as attention.csv: MLA head dims 192/128, head_dim 64 and 256), env.json, log.txt.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
from devbench import S, Table, bench, late, log, rel_err, rnd, run_sections, short, start
from h100_extra_moe_attn import section_attention, section_moe

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0

# ---- 1. FP8 quantization ------------------------------------------------------------------------------


def amax_of(x):
    return x.abs().amax().float()


def cast(x, scale):
    return (x * scale).to(E4M3)


def pertensor_current(x):
    scale = E4M3_MAX / amax_of(x).clamp_min(1e-12)
    return cast(x, scale), scale


def cast_transpose(x, scale):
    q = cast(x, scale)
    return q, q.t().contiguous()


def cast_transpose_current(x):
    q, scale = pertensor_current(x)
    return q, q.t().contiguous(), scale


def mx_quant(x, along_rows: bool):
    """MXFP8 block quantization emulated in eager PyTorch: blocks of 32 along the last dim (or along
    dim 0 for the columnwise copy), a power-of-two (e8m0) scale per block chosen so the block's amax maps
    at or under 448 (2^ceil(log2(amax/448))), elements cast to e4m3. Returns the fp8 data and the
    uint8 biased exponents (e8m0)."""
    t, h = x.shape
    blocks = x.view(t, h // 32, 32) if along_rows else x.view(t // 32, 32, h)
    dim = -1 if along_rows else 1
    amax = blocks.abs().amax(dim=dim, keepdim=True).float().clamp_min(2.0**-126)
    exp = torch.ceil(torch.log2(amax / E4M3_MAX))
    q = (blocks.float() / torch.exp2(exp)).to(E4M3)
    return q.view(t, h), (exp + 127).to(torch.uint8)


def mx_rowwise_colwise(x):
    return mx_quant(x, True), mx_quant(x, False)


def mx_dequant(q, e8m0, t, h, along_rows: bool):
    blocks = q.float().view(t, h // 32, 32) if along_rows else q.float().view(t // 32, 32, h)
    return (blocks * torch.exp2(e8m0.float() - 127)).view(t, h)


def quant_ops(x):
    """(op, callable, bytes_formula, bytes, check) for one activation x [T, H]."""
    t, h = x.shape
    n = t * h
    scale = E4M3_MAX / amax_of(x)
    deq = lambda q: q.float() / scale  # noqa: E731
    mx_chk = lambda r: rel_err(mx_dequant(*r, t, h, True), x)  # noqa: E731
    return [
        ("amax", lambda: amax_of(x), "2*T*H", 2 * n, None),
        ("cast", lambda: cast(x, scale), "2*T*H + T*H", 3 * n, lambda r: rel_err(deq(r), x)),
        ("pertensor_current", lambda: pertensor_current(x), "2*T*H (amax) + 2*T*H + T*H", 5 * n,
         lambda r: rel_err(r[0].float() / r[1], x)),
        ("transpose_fp8", None, "T*H + T*H", 2 * n, None),
        ("cast_transpose", lambda: cast_transpose(x, scale), "2*T*H + 2*T*H", 4 * n,
         lambda r: rel_err(deq(r[1]).t(), x)),
        ("cast_transpose_current", lambda: cast_transpose_current(x), "2*T*H (amax) + 2*T*H + 2*T*H", 6 * n,
         lambda r: rel_err(r[1].float().t() / r[2], x)),
        ("mxfp8_rowwise", lambda: mx_quant(x, True), "2*T*H + T*H + T*H/32", 3 * n + n // 32, mx_chk),
        ("mxfp8_rowwise_colwise", lambda: mx_rowwise_colwise(x), "2*T*H + 2*(T*H + T*H/32)",
         4 * n + 2 * (n // 32), lambda r: mx_chk(r[0])),
    ]


def time_quant(tab: Table, impl: str, x, op: str, fn, formula: str, nbytes: int, check, note: str = "") -> None:
    t, h = x.shape
    try:
        err = "" if check is None else f"{check(fn()):.4g}"
        us = bench(fn)
        tab.row(op=op, impl=impl, tokens=t, hidden=h, bytes_moved=nbytes, bytes_formula=formula,
                time_us=round(us, 2), GBps=round(nbytes / us / 1e3, 1), rel_err=err, note=note)
    except Exception as exc:  # one failing case must not lose the others
        tab.row(op=op, impl=impl, tokens=t, hidden=h, bytes_formula=formula, note=short(exc))
        log(f"  {impl} {op} {t}x{h}: {short(exc)}")


def te_ops(x):
    """Transformer Engine's own cast ops, best effort across TE 2.x APIs; [] when TE does not import."""
    try:
        import transformer_engine.pytorch  # noqa: F401
        import transformer_engine_torch as tex
        from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer
    except Exception:
        return []
    n = x.numel()
    ops = []
    for op, rowwise, colwise, formula, nbytes in [
        ("pertensor_current", True, False, "2*T*H (amax) + 2*T*H + T*H", 5 * n),
        ("cast_transpose_current", True, True, "2*T*H (amax) + 2*T*H + 2*T*H", 6 * n),
    ]:
        q = Float8CurrentScalingQuantizer(tex.DType.kFloat8E4M3, device=x.device)
        q.set_usage(rowwise=rowwise, columnwise=colwise)
        ops.append((op, (lambda q=q: q(x)), formula, nbytes, lambda r: rel_err(r.dequantize(), x)))
    return ops


def section_quantize(shapes) -> None:
    cols = ["op", "impl", "tokens", "hidden", "bytes_moved", "bytes_formula", "time_us", "GBps", "rel_err", "note"]
    tab = Table("quantize.csv", cols)
    te_checked = False
    for t, h in shapes:
        if late():
            log("quantize: deadline, skipping the remaining shapes")
            break
        x = rnd(t, h)
        for op, fn, formula, nbytes, check in quant_ops(x):
            if op == "transpose_fp8":
                q = cast(x, E4M3_MAX / amax_of(x))
                fn, check = (lambda q=q: q.t().contiguous()), (lambda r, q=q: float(r.t().ne(q).sum()))
            note = "EMULATION on Hopper (eager PyTorch; Blackwell runs this in hardware-aided kernels)" \
                if op.startswith("mxfp8") else ""
            time_quant(tab, "torch_eager", x, op, fn, formula, nbytes, check, note)
        try:
            ops = te_ops(x)
        except Exception as exc:
            ops = []
            log(f"  transformer_engine ops failed to build: {short(exc)}")
        if not te_checked:
            log(f"quantize: transformer_engine ops {'found' if ops else 'not importable, skipped'}")
            te_checked = True
        for op, fn, formula, nbytes, check in ops:
            time_quant(tab, "transformer_engine", x, op, fn, formula, nbytes, check)
        del x
        log(f"quantize {t}x{h} done")


def section_quantize_compiled(shapes) -> None:
    """The same casts fused by torch.compile (Inductor/Triton): a stand-in for a stack's fused kernels."""
    if time.monotonic() - S.start > S.deadline_s - 150:  # compiling may take a minute: start only with room
        log("quantize_compiled: skipped, too close to the deadline to compile")
        return
    tab = Table("quantize_compiled.csv", ["op", "impl", "tokens", "hidden", "bytes_moved", "bytes_formula",
                                          "time_us", "GBps", "rel_err", "note"])
    fns = {op: torch.compile(f, dynamic=False) for op, f in [
        ("pertensor_current", pertensor_current), ("cast_transpose_current", cast_transpose_current),
        ("mxfp8_rowwise", lambda x: mx_quant(x, True)), ("mxfp8_rowwise_colwise", mx_rowwise_colwise)]}
    for t, h in shapes:
        if late():
            log("quantize_compiled: deadline, skipping the remaining shapes")
            break
        compiled_shape(tab, fns, rnd(t, h))


def compiled_shape(tab: Table, fns, x) -> None:
    t, h = x.shape
    for op, _fn, formula, nbytes, check in quant_ops(x):
        if op in fns and not late():
            t0 = time.monotonic()
            note = "EMULATION on Hopper (Inductor-fused)" if op.startswith("mxfp8") else ""
            time_quant(tab, "torch_compile", x, op, (lambda f=fns[op]: f(x)), formula, nbytes, check, note)
            log(f"  compiled {op} {t}x{h}: {time.monotonic() - t0:.1f}s incl. compile")


def gemm_case(tab: Table, m: int, n: int, k: int) -> None:
    a, w = rnd(m, k), rnd(n, k)
    sa, sw = (amax_of(a) / E4M3_MAX), (amax_of(w) / E4M3_MAX)
    aq, wq = cast(a, 1 / sa), cast(w, 1 / sw)

    def fn():
        return torch._scaled_mm(aq, wq.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)

    err = rel_err(fn().float(), a.float() @ w.float().t())
    us = bench(fn)
    tab.row(m=m, n=n, k=k, a_dtype="e4m3", b_dtype="e4m3", time_us=round(us, 2),
            tflops=round(2 * m * n * k / us / 1e6, 1), rel_err=f"{err:.4g}")


def section_fp8_gemm(shapes) -> None:
    tab = Table("fp8_gemm.csv", ["m", "n", "k", "a_dtype", "b_dtype", "time_us", "tflops", "rel_err", "note"])
    for m, n, k in shapes:
        if late():
            break
        try:
            gemm_case(tab, m, n, k)
        except Exception as exc:
            tab.row(m=m, n=n, k=k, note=short(exc))
            log(f"  fp8 gemm {m}x{n}x{k}: {short(exc)}")
    log("fp8_gemm done")


# ---- setup ------------------------------------------------------------------------------------------


def write_env(dry: bool) -> None:
    env: dict[str, object] = {"torch": torch.__version__, "cuda": torch.version.cuda, "dry_run": dry}
    if S.dev.type == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sms=p.multi_processor_count, mem_GiB=p.total_memory / 2**30,
                   cudnn=torch.backends.cudnn.version())
        try:
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,clocks.max.sm,clocks.max.memory,power.limit,driver_version",
                 "--format=csv"], capture_output=True, text=True, timeout=30).stdout
        except Exception as exc:
            env["nvidia_smi"] = short(exc)
    for mod in ("triton", "transformer_engine"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:
            env[mod] = None
    env["controls"] = controls(dry)
    with open(os.path.join(S.out_dir, "env.json"), "w") as f:
        json.dump(env, f, indent=1)
    log(f"env: {json.dumps(env)}")


def controls(dry: bool) -> dict[str, float]:
    """A square bf16 GEMM and a copy, to compare this card with the one behind the existing tables
    (gemm_square.csv: 8192^3 bf16; memory_bound.csv: copy of 2 GiB at 2945.5 GB/s)."""
    n, elems = (128, 2**16) if dry else (8192, 2**29)
    a, b = rnd(n, n), rnd(n, n)
    src = torch.empty(elems, device=S.dev, dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    gemm_us, copy_us = bench(lambda: a @ b), bench(lambda: dst.copy_(src))
    return {"gemm_bf16_n": n, "gemm_bf16_tflops": round(2 * n**3 / gemm_us / 1e6, 1),
            "copy_bytes": 8 * elems, "copy_GBps": round(8 * elems / copy_us / 1e3, 1)}


def plan(dry: bool):
    if dry:
        return dict(quant=[(64, 64), (64, 128)], gemm=[(64, 64, 64)], moe=([64], [64], [8, 16], [2, 8]),
                    attn_backends=["MATH", "CUDNN_ATTENTION"],
                    attn=[("mla", 1, 64, 4, 4, 192, 128, 0), ("mla", 1, 64, 4, 4, 192, 128, 192),
                          ("hd64", 1, 64, 4, 2, 64, 64, 0)], compiled=[(64, 64)])
    quant = [(t, h) for t in (8192, 16384) for h in (4096, 8192, 16384)] + [(8192, 28672), (8192, 53248)]
    attn = []
    for s, b in ((4096, 4), (8192, 2)):  # batch x seq = 16,384 tokens, as attention.csv
        for heads in (16, 128):  # DeepSeek-V3 MLA: 128 heads (16 per rank at tensor-parallel 8)
            attn += [("mla-deepseek-v3", b, s, heads, heads, 192, 128, 0),
                     ("mla-deepseek-v3", b, s, heads, heads, 192, 128, 192)]
        attn += [("hd64", b, s, 32, 8, 64, 64, 0), ("hd256", b, s, 16, 8, 256, 256, 0),
                 ("hd256-mha", b, s, 16, 16, 256, 256, 0)]
    attn.append(("control-llama", 2, 8192, 32, 8, 128, 128, 0))  # a row attention.csv has, as a control
    return dict(quant=quant, gemm=[(8192, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192),
                                   (8192, 8192, 28672)],
                moe=([8192, 16384], [4096, 7168], [8, 64, 128, 256], [2, 8]),
                attn_backends=["CUDNN_ATTENTION", "FLASH_ATTENTION"], attn=attn,
                compiled=[(8192, 8192), (16384, 16384)])


def main() -> int:
    args = start(__doc__, "h100_extra_")
    if args is None:
        return 2
    p = plan(args.dry_run)
    sections = [("env", lambda: write_env(args.dry_run)), ("quantize", lambda: section_quantize(p["quant"])),
                ("fp8_gemm", lambda: section_fp8_gemm(p["gemm"])), ("moe", lambda: section_moe(*p["moe"])),
                ("attention", lambda: section_attention(p["attn_backends"], p["attn"])),
                ("quantize_compiled", lambda: section_quantize_compiled(p["compiled"]))]
    run_sections(sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
