"""Mamba-2's SSD scan as Megatron-Core runs it: the kernel the tables lacked for the hybrid models
(Nemotron-H, Nemotron 3 Nano), whose SSD the compute model builds kernel by kernel
(sim/workload/blocks.py: ssd_forward, ssd_backward).

Megatron-Core's MambaMixer calls mamba_ssm's `mamba_chunk_scan_combined` (the Triton SSD kernels of
Dao & Gu 2024, section 7) with D, dt_bias, dt_softplus and z=None (its gated RMSNorm runs after, as
mamba_ssm's `rmsnorm_fn` with z). This script times both at the per-rank shapes of the hybrid models
the validation set holds: heads and groups divided by the tensor-parallel width, one or two 8,192-token
sequences per micro-batch, and a chunk-length control.

mamba_ssm is not installed on the device machine (and not a dependency of this project): the run
imports its Triton kernels from a folder given by --mamba-src, a copy of state-spaces/mamba @e9594ce's
mamba_ssm/ops/triton/{ssd_*,layernorm_gated,k_activations,softplus}.py and mamba_ssm/utils/
{determinism,torch}.py with empty package __init__ files, beside einops 0.8.2.

Run once on one whole GPU (about two minutes, most of it Triton's autotuning; stops at a 4-minute
deadline):
    PYTHONUNBUFFERED=1 python benchmarks/device/mamba_ssd.py --mamba-src .devsrc --out $OUT

Method, as validation/compute/README.md states it: CUDA events around one call, 3 warm-ups (the
autotuning happens in the first, untimed), the median of 10 timed calls (5 for fwd+bwd): `time_us`;
besides it `stream_us` (the calls queued back to back between two events) and `kernel_us` (the GPU
time of the call's kernels, torch.profiler's sum over 3 calls), since the host's Python around the
Triton launches outlasts the kernels at small shapes (`three_ways`). Random inputs: x, B, C bf16
N(0,1); dt fp32 N(0,1) before dt_bias (+ softplus in the kernel); A = -exp(U(0, log 16)) fp32 (within
Megatron's A_init_range of 1-16); D fp32 ones; dt_bias fp32 U(0, 1). `fwd+bwd` runs the backward with
a random bf16 output gradient. A small case is checked against mamba_ssm's PyTorch reference first
(`rel_err`). One row per case, written as soon as it is timed; a failing case writes its error in
`note`.

Files under --out: mamba_ssd.csv, env.json, log.txt.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
from devbench import S, Table, bench, log, rel_err, run_sections, setup, short, sync

COLUMNS = ["model", "op", "pass", "batch", "seq", "heads", "head_dim", "state", "groups", "chunk", "tp",
           "time_us", "stream_us", "kernel_us", "tflops", "note"]

# (model, heads, head_dim, state, groups, chunk, tp, batch, seq): per-rank heads = heads / tp
CASES = [
    ("nemotron-3-nano", 64, 64, 128, 8, 128, 1, 1, 8192),
    ("nemotron-3-nano", 64, 64, 128, 8, 128, 1, 2, 8192),
    ("nemotron-3-nano", 64, 64, 128, 8, 128, 1, 1, 4096),
    ("nemotron-3-nano", 64, 64, 128, 8, 256, 1, 1, 8192),
    ("nemotron-h-56b", 256, 64, 256, 8, 128, 1, 1, 8192),
    ("nemotron-h-56b", 256, 64, 256, 8, 128, 2, 1, 8192),
    ("nemotron-h-56b", 256, 64, 256, 8, 128, 4, 1, 8192),
    ("nemotron-h-56b", 256, 64, 256, 8, 128, 8, 1, 8192),
    ("nemotron-h-8b", 128, 64, 128, 8, 128, 1, 1, 8192),
    ("nemotron-h-8b", 128, 64, 128, 8, 128, 2, 1, 8192),
    ("mamba2-2.7b", 80, 64, 128, 1, 256, 1, 1, 4096),
]


def ssd_flops(b: int, s: int, h: int, p: int, n: int, g: int, q: int) -> float:
    """The SSD's matmul FLOPs in the forward (Dao & Gu 2024, section 6), counted once: per chunk the
    C B^T scores (q x q x n per group), the intra-chunk output (q x q x p per head), the chunk states
    (n x p x q per head) and the state-to-output term (q x p x n per head)."""
    chunks = b * math.ceil(s / q)
    return 2.0 * chunks * (g * q * q * n + h * (q * q * p + n * p * q + q * p * n))


def inputs(b: int, s: int, h: int, p: int, n: int, g: int, grad: bool):
    dev = S.dev
    x = torch.randn(b, s, h, p, device=dev, dtype=torch.bfloat16, requires_grad=grad)
    dt = torch.randn(b, s, h, device=dev, dtype=torch.float32, requires_grad=grad)
    a = -torch.exp(torch.rand(h, device=dev) * math.log(16.0)).requires_grad_(grad)
    bb = torch.randn(b, s, g, n, device=dev, dtype=torch.bfloat16, requires_grad=grad)
    cc = torch.randn(b, s, g, n, device=dev, dtype=torch.bfloat16, requires_grad=grad)
    d = torch.ones(h, device=dev, requires_grad=grad)
    dt_bias = torch.rand(h, device=dev).requires_grad_(grad)
    return x, dt, a, bb, cc, d, dt_bias


def check(ssd, ref) -> None:
    """The Triton kernel against mamba_ssm's PyTorch reference on one small case."""
    x, dt, a, bb, cc, d, dt_bias = inputs(1, 512, 8, 64, 64, 2, False)
    y = ssd(x, dt, a, bb, cc, 128, D=d, dt_bias=dt_bias, dt_softplus=True)
    y_ref = ref(x, dt, a, bb, cc, 128, D=d, dt_bias=dt_bias, dt_softplus=True)
    log(f"check: SSD vs reference rel_err {rel_err(y.float(), y_ref.float()):.2e}")


def ssd_case(tab: Table, ssd, case: tuple) -> None:
    model, heads, p, n, groups, q, tp, b, s = case
    h, g = heads // tp, max(1, groups // tp)
    base = dict(model=model, op="ssd", batch=b, seq=s, heads=h, head_dim=p, state=n, groups=g, chunk=q, tp=tp)
    flops = ssd_flops(b, s, h, p, n, g, q)
    for pas in ("fwd", "fwd+bwd"):
        try:
            us, stream, kern = _ssd_time(ssd, (b, s, h, p, n, g), q, pas != "fwd")
            f = flops * (3 if pas != "fwd" else 1)
            tab.row(**base, **{"pass": pas}, time_us=round(us, 2), stream_us=round(stream, 2),
                    kernel_us=round(kern, 2), tflops=round(f / kern / 1e6, 2))
        except Exception as exc:  # one failing case must not lose the others
            tab.row(**base, **{"pass": pas}, note=short(exc))
            log(f"{model} tp{tp} {pas}: {short(exc)}")


def _ssd_time(ssd, shape: tuple, q: int, grad: bool) -> tuple[float, float, float]:
    b, s, h, p, n, g = shape
    leaves = inputs(b, s, h, p, n, g, grad)
    x, dt, a, bb, cc, d, dt_bias = leaves
    dy = torch.randn(b, s, h, p, device=S.dev, dtype=torch.bfloat16) if grad else None

    def run():
        y = ssd(x, dt, a, bb, cc, q, D=d, dt_bias=dt_bias, dt_softplus=True)
        if grad:       # the gradients returned, not accumulated into .grad (no add kernels a step lacks)
            torch.autograd.grad(y, leaves, dy)
    return three_ways(run, 5 if grad else 10)


def three_ways(run, reps: int) -> tuple[float, float, float]:
    """Microseconds of one call three ways: `time_us` as every table here (events around each call,
    the host waiting between calls, so its launch time shows), `stream_us` (reps calls queued back to
    back between two events: the host runs ahead, as in a training step, unless it is the slower),
    `kernel_us` (the GPU time of the call's kernels alone, summed by the profiler over 3 calls)."""
    from torch.profiler import ProfilerActivity, profile
    us = bench(run, reps=reps)
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    run()
    sync()
    start_ev.record()
    for _ in range(reps):
        run()
    end_ev.record()
    end_ev.synchronize()
    stream = start_ev.elapsed_time(end_ev) * 1e3 / reps
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            run()
        sync()
    kern = sum(e.self_device_time_total for e in prof.key_averages()) / 3
    return us, stream, kern


def norm_case(tab: Table, rmsnorm_fn, case: tuple) -> None:
    """The gated RMSNorm after the scan (norm_before_gate False, group size d_inner / groups), as
    Megatron's mixer runs it: bf16 y and z of [tokens, d_inner / tp]."""
    model, heads, p, n, groups, q, tp, b, s = case
    h, g = heads // tp, max(1, groups // tp)
    d_in = h * p
    base = dict(model=model, op="gated_rmsnorm", batch=b, seq=s, heads=h, head_dim=p, state=n, groups=g,
                chunk=q, tp=tp)
    for pas in ("fwd", "fwd+bwd"):
        try:
            us, stream, kern = _norm_time(rmsnorm_fn, b * s, d_in, g, pas != "fwd")
            tab.row(**base, **{"pass": pas}, time_us=round(us, 2), stream_us=round(stream, 2),
                    kernel_us=round(kern, 2))
        except Exception as exc:
            tab.row(**base, **{"pass": pas}, note=short(exc))
            log(f"gated norm {model} tp{tp} {pas}: {short(exc)}")


def _norm_time(rmsnorm_fn, tokens: int, d_in: int, g: int, grad: bool) -> tuple[float, float, float]:
    y = torch.randn(tokens, d_in, device=S.dev, dtype=torch.bfloat16, requires_grad=grad)
    z = torch.randn(tokens, d_in, device=S.dev, dtype=torch.bfloat16, requires_grad=grad)
    w = torch.ones(d_in, device=S.dev, requires_grad=grad)
    dy = torch.randn(tokens, d_in, device=S.dev, dtype=torch.bfloat16) if grad else None

    def run():
        o = rmsnorm_fn(y, w, None, z=z, eps=1e-5, group_size=d_in // g, norm_before_gate=False)
        if grad:
            torch.autograd.grad(o, (y, z, w), dy)
    return three_ways(run, 5 if grad else 10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--mamba-src", required=True,
                    help="folder holding the mamba_ssm Triton sources and einops")
    args = ap.parse_args()
    S.deadline_s = 245.0
    if not setup(args.out, False, "mamba_ssd_"):
        return 2
    sys.path.insert(0, os.path.abspath(args.mamba_src))
    try:
        import triton
        from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined, ssd_chunk_scan_combined_ref
    except ImportError as exc:
        print(f"--mamba-src {args.mamba_src}: cannot import mamba_ssm's Triton kernels ({exc}); valid: a "
              "folder holding mamba_ssm/ops/triton and einops (module docstring)", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
           "gpu": props.name, "sms": props.multi_processor_count, "mem_GiB": props.total_memory / 2**30,
           "mamba_ssm": "state-spaces/mamba @e9594ce (Triton sources only)"}
    with open(os.path.join(S.out_dir, "env.json"), "w") as f:
        json.dump(env, f, indent=1)
    log(f"env: {json.dumps(env)}")
    tab = Table("mamba_ssd.csv", COLUMNS)
    sections = [("check", lambda: check(mamba_chunk_scan_combined, ssd_chunk_scan_combined_ref))]
    for c in CASES:
        name = f"ssd {c[0]} tp{c[6]} {c[7]}x{c[8]} q{c[5]}"
        sections.append((name, lambda c=c: ssd_case(tab, mamba_chunk_scan_combined, c)))
    for c in CASES[:1] + CASES[4:5]:
        sections.append((f"norm {c[0]}", lambda c=c: norm_case(tab, rmsnorm_fn, c)))
    t0 = time.monotonic()
    run_sections(sections)
    log(f"mamba_ssd: {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
