"""FlexAttention as NeMo AutoModel runs gpt-oss (issue 28): the attention the H100 tables lack for its
gpt-oss rows (their stack column says "TE + DeepEP + FlexAttn").

AutoModel's FlexAttention module (nemo_automodel/components/attention/flex_attention.py @b3711ff) calls
torch.compile(flex_attention) with a block mask made once per (window, S_q, S_kv): causal, or a sliding
window (kv <= q and q - kv < window); with sink weights it asks for the log-sum-exp and scales the output
by sigmoid(lse - sink[h]) (the sink as one extra logit column), then casts to bf16. This script times
that call at gpt-oss shapes (64 query heads, 8 KV heads, head dim 64, window 128: the gpt-oss model card,
arXiv 2508.10925), beside cuDNN's SDPA at the same shapes (causal, no window, no sinks: the kernel the
model's attention fit knows) and a Llama-shape control where both exist.

Run once on one whole H100 (about three minutes with compilation; stops at a 5-minute deadline):
    PYTHONUNBUFFERED=1 python benchmarks/device/h100_flex_attention.py --out $OUT
Check on a CPU with tiny shapes (numbers meaningless):
    python benchmarks/device/h100_flex_attention.py --dry-run

Method, as validation/compute/README.md states it: CUDA events around one call, 3 warm-ups (compilation
happens before them, untimed), the median of 10 timed calls (5 for fwd+bwd); random bf16 inputs N(0,1).
torch.compile in its default mode with static shapes, compiled afresh for each case (AutoModel asks for
max-autotune-no-cudagraphs, whose autotuning would not fit the device time here: the times are those of
the default kernel configuration). One row per case, written as soon as it is timed; a case that
fails writes its error in `note`.

Files under --out: flex_attention.csv, env.json, log.txt.
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F
from devbench import S, Table, bench, late, log, rnd, run_sections, short, start, sync
from h100_kernels_extra import write_env

COLUMNS = ["impl", "model", "mask", "window", "sinks", "batch", "seq", "heads", "kv_heads", "head_dim",
           "pass", "time_us", "tflops", "compile_s", "note"]


def _flex():
    """A fresh compile for each case, static shapes: after a first shape torch.compile would
    otherwise recompile the next shape with dynamic dimensions (a slower, general kernel that a
    training run, one fixed shape, never runs)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if S.dev.type != "cuda":
        return create_block_mask, flex_attention
    torch._dynamo.reset()
    return create_block_mask, torch.compile(flex_attention, dynamic=False)


def useful_flops(b: int, s: int, heads: int, d: int, window: int) -> float:
    """Forward FLOPs of the unmasked score and value products: 4 b heads d per (query, key) pair kept."""
    pairs = s * (s + 1) / 2 if not window else sum(min(q + 1, window) for q in range(s))
    return 4.0 * b * heads * d * pairs


def flex_case(tab: Table, model: str, b: int, s: int, heads: int, kv: int, d: int, window: int,
              sinks: bool) -> None:
    create_block_mask, flex = _flex()
    if window:
        def mask_mod(bi, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (q_idx - kv_idx < window)
    else:
        def mask_mod(bi, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    base = dict(impl="flex", model=model, mask="sliding" if window else "causal", window=window or "",
                sinks=int(sinks), batch=b, seq=s, heads=heads, kv_heads=kv, head_dim=d)
    t0 = time.monotonic()
    block = create_block_mask(mask_mod, b, heads, s, s, device=S.dev)
    q = rnd(b, heads, s, d).requires_grad_()
    k, v = rnd(b, kv, s, d).requires_grad_(), rnd(b, kv, s, d).requires_grad_()
    w = torch.randn(heads, device=S.dev, dtype=torch.float32, requires_grad=True)
    dout = rnd(b, heads, s, d)

    def fwd():
        if not sinks:
            return flex(q, k, v, block_mask=block, enable_gqa=True)
        out, lse = flex(q, k, v, block_mask=block, enable_gqa=True, return_lse=True)
        return (out * torch.sigmoid(lse - w.view(1, -1, 1)).unsqueeze(-1)).to(q.dtype)

    def fwd_bwd():
        return torch.autograd.grad(fwd(), (q, k, v, w) if sinks else (q, k, v), dout)

    fwd_bwd()  # compiles the forward and the backward kernels, untimed
    sync()
    compile_s = time.monotonic() - t0
    flops = useful_flops(b, s, heads, d, window)
    for pas, fn, reps, f in (("fwd", fwd, 10, flops), ("fwd+bwd", fwd_bwd, 5, 3.5 * flops)):
        us = bench(fn, reps=reps)
        tab.row(**base, **{"pass": pas}, time_us=round(us, 2), tflops=round(f / us / 1e6, 1),
                compile_s=round(compile_s, 1))
    log(f"  flex {model} {base['mask']} sinks={int(sinks)} b{b} s{s}: compiled in {compile_s:.0f}s")


def sdpa_case(tab: Table, model: str, b: int, s: int, heads: int, kv: int, d: int) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = "CUDNN_ATTENTION" if S.dev.type == "cuda" else "MATH"
    q = rnd(b, heads, s, d).requires_grad_()
    k = rnd(b, kv, s, d).repeat_interleave(heads // kv, 1).detach().requires_grad_()  # GQA expanded first
    v = rnd(b, kv, s, d).repeat_interleave(heads // kv, 1).detach().requires_grad_()
    dout = rnd(b, heads, s, d)
    base = dict(impl=backend.lower(), model=model, mask="causal", window="", sinks=0, batch=b, seq=s,
                heads=heads, kv_heads=kv, head_dim=d)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        return torch.autograd.grad(fwd(), (q, k, v), dout)

    flops = useful_flops(b, s, heads, d, 0)
    with sdpa_kernel(getattr(SDPBackend, backend)):
        for pas, fn, reps, f in (("fwd", fwd, 10, flops), ("fwd+bwd", fwd_bwd, 5, 3.5 * flops)):
            us = bench(fn, reps=reps)
            tab.row(**base, **{"pass": pas}, time_us=round(us, 2), tflops=round(f / us / 1e6, 1))


def section(cases) -> None:
    tab = Table("flex_attention.csv", COLUMNS)
    for case in cases:
        if late():
            log("flex: deadline, skipping the remaining cases")
            return
        kind, model, b, s, heads, kv, d, window, sinks = case
        try:
            if kind == "flex":
                flex_case(tab, model, b, s, heads, kv, d, window, sinks)
            else:
                sdpa_case(tab, model, b, s, heads, kv, d)
        except Exception as exc:
            tab.row(impl=kind, model=model, mask="sliding" if window else "causal", window=window or "",
                    sinks=int(sinks), batch=b, seq=s, heads=heads, kv_heads=kv, head_dim=d, note=short(exc))
            log(f"  {kind} {model} w{window} sinks={sinks}: {short(exc)}")
        if S.dev.type == "cuda":
            torch.cuda.empty_cache()


def plan(dry: bool):
    if dry:
        return [("flex", "tiny", 1, 256, 4, 2, 16, 0, True), ("flex", "tiny", 1, 256, 4, 2, 16, 64, True),
                ("sdpa", "tiny", 1, 256, 4, 2, 16, 0, False)]
    oss = ("gpt-oss", 2, 4096, 64, 8, 64)           # AutoModel's micro-batch 2 at 4,096 tokens
    llama = ("control-llama", 2, 8192, 32, 8, 128)  # the attention_extra.csv control shape
    return [("sdpa", *oss, 0, False),
            ("flex", *oss, 128, True), ("flex", *oss, 0, True), ("flex", *oss, 0, False),
            ("sdpa", *llama, 0, False), ("flex", *llama, 0, False),
            ("sdpa", "llama-4k", 2, 4096, 32, 8, 128, 0, False), ("flex", "llama-4k", 2, 4096, 32, 8, 128, 0, False),
            ("flex", "gpt-oss", 1, 4096, 64, 8, 64, 128, True), ("sdpa", "gpt-oss", 1, 4096, 64, 8, 64, 0, False),
            ("flex", "gpt-oss", 1, 4096, 64, 8, 64, 0, False)]


def main() -> int:
    args = start(__doc__, "h100_flex_", 300.0)
    if args is None:
        return 2
    run_sections([("env", lambda: write_env(args.dry_run)), ("flex", lambda: section(plan(args.dry_run)))])
    return 0


if __name__ == "__main__":
    sys.exit(main())
