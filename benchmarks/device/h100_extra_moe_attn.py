"""MoE routing and attention cases of h100_kernels_extra.py (its docstring states the method)."""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from devbench import S, Table, bench, late, log, rel_err, rnd, short

# ---- 2. MoE routing -----------------------------------------------------------------------------------


def route(x, wr, top_k):
    logits = x @ wr.t()
    probs = torch.softmax(logits.float(), dim=-1)
    p, idx = torch.topk(probs, top_k, dim=-1)
    return p / p.sum(-1, keepdim=True), idx


def permute(x, idx, experts):
    order = torch.argsort(idx.flatten(), stable=True)
    counts = torch.bincount(idx.flatten(), minlength=experts)
    return x.index_select(0, order // idx.shape[1]), order, counts


def unpermute(y, order, probs, tokens):
    out = torch.zeros(tokens, y.shape[1], device=y.device, dtype=y.dtype)
    w = probs.flatten().index_select(0, order).to(y.dtype)
    return out.index_add_(0, order // probs.shape[1], y * w[:, None])


def moe_case(tab: Table, x, experts: int, top_k: int) -> None:
    t, h = x.shape
    wr = rnd(experts, h) / math.sqrt(h)
    probs, idx = route(x, wr, top_k)
    y, order, counts = permute(x, idx, experts)
    rows = t * top_k
    logits = x @ wr.t()
    ref = x.float() * probs.sum(-1, keepdim=True)  # the weighted sum of a token's own rows
    cases = [  # (op, call, flops, bytes_formula, bytes, note)
        ("router_gemm", lambda: x @ wr.t(), 2 * t * h * experts, "2*T*H + 2*E*H + 2*T*E",
         2 * t * h + 2 * experts * h + 2 * t * experts, "bf16 logits"),
        ("softmax_topk", lambda: torch.topk(torch.softmax(logits.float(), -1), top_k), 0,
         "2*T*E + T*k*(4+8)", 2 * t * experts + 12 * rows, "fp32 softmax + topk over the bf16 logits"),
        ("router", lambda: route(x, wr, top_k), 2 * t * h * experts, "2*T*H + 2*E*H + T*k*(4+8)",
         2 * t * h + 2 * experts * h + 12 * rows, "gemm + fp32 softmax + topk + renormalize"),
        ("permute_sort", lambda: permute_sort(idx, experts), 0, "T*k*8 + T*k*8", 16 * rows,
         "argsort(stable) + bincount of the int64 expert ids"),
        ("permute_gather", lambda: x.index_select(0, order // top_k), 0, "2*T*k*H + 2*T*k*H", 4 * rows * h,
         "index_select of T*k rows (a token's row read once per choice)"),
        ("permute", lambda: permute(x, idx, experts), 0, "2*T*k*H + 2*T*k*H", 4 * rows * h,
         "argsort + bincount + index_select"),
        ("unpermute", lambda: unpermute(y, order, probs, t), 0, "2*T*k*H + 2*T*H", 2 * rows * h + 2 * t * h,
         "zeros + weight by probs + index_add_ (bf16 atomics on CUDA)"),
    ]
    err = rel_err(unpermute(y, order, probs, t).float(), ref)
    assert int(counts.sum()) == rows
    for op, fn, flops, formula, nbytes, note in cases:
        try:
            us = bench(fn)
            tab.row(op=op, tokens=t, hidden=h, experts=experts, top_k=top_k, bytes_moved=nbytes,
                    bytes_formula=formula, time_us=round(us, 2), GBps=round(nbytes / us / 1e3, 1),
                    tflops=round(flops / us / 1e6, 2) if flops else "",
                    rel_err=f"{err:.4g}" if op == "unpermute" else "", note=note)
        except Exception as exc:
            tab.row(op=op, tokens=t, hidden=h, experts=experts, top_k=top_k, note=short(exc))
            log(f"  moe {op} {t}x{h} E{experts} k{top_k}: {short(exc)}")


def permute_sort(idx, experts):
    return torch.argsort(idx.flatten(), stable=True), torch.bincount(idx.flatten(), minlength=experts)


def section_moe(tokens, hiddens, experts_list, top_ks) -> None:
    tab = Table("moe_routing.csv", ["op", "tokens", "hidden", "experts", "top_k", "bytes_moved", "bytes_formula",
                                    "time_us", "GBps", "tflops", "rel_err", "note"])
    for t in tokens:
        for h in hiddens:
            x = rnd(t, h)
            for e in experts_list:
                for k in top_ks:
                    if late():
                        log("moe: deadline, skipping the remaining cases")
                        return
                    try:
                        moe_case(tab, x, e, k)
                    except Exception as exc:
                        tab.row(op="setup", tokens=t, hidden=h, experts=e, top_k=k, note=short(exc))
                        log(f"  moe setup {t}x{h} E{e} k{k}: {short(exc)}")
            del x
            log(f"moe {t}x{h} done")


# ---- 3. Attention ------------------------------------------------------------------------------------


def sdpa_case(tab: Table, backend: str, b: int, s: int, heads: int, kv: int, dqk: int, dv: int,
              pad_to: int, model: str) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d_run = pad_to or dqk
    q, k = rnd(b, heads, s, dqk), rnd(b, kv, s, dqk)
    v = rnd(b, kv, s, dv)
    k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)  # GQA: expand first
    if pad_to:
        q, k, v = (F.pad(z, (0, pad_to - z.shape[-1])) for z in (q, k, v))
    q, k, v = (z.detach().requires_grad_() for z in (q, k, v))
    dout = rnd(b, heads, s, v.shape[-1])
    fwd_flops = 2 * b * heads * s * s * (dqk + dv) / 2  # causal half; useful dims, not the padding
    base = dict(backend=backend, model=model, batch=b, seq=s, heads=heads, kv_heads=kv, d_qk=dqk, d_v=dv,
                padded_to=pad_to or "", causal=1)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        return torch.autograd.grad(fwd(), (q, k, v), dout)

    for pas, fn, reps, flops in [("fwd", fwd, 10, fwd_flops), ("fwd+bwd", fwd_bwd, 5, 3.5 * fwd_flops)]:
        try:
            with warnings.catch_warnings(record=True) as caught, sdpa_kernel(getattr(SDPBackend, backend)):
                warnings.simplefilter("always")
                try:
                    us = bench(fn, reps=reps)
                except RuntimeError as exc:
                    why = "; ".join(str(w.message).splitlines()[0][:160] for w in caught[:3])
                    tab.row(**base, **{"pass": pas}, note=f"refused: {short(exc)} {why}".strip())
                    log(f"  sdpa {backend} {model} d{dqk}/{dv} pad{pad_to} {pas}: refused")
                    continue
            tab.row(**base, **{"pass": pas}, time_us=round(us, 2), tflops=round(flops / us / 1e6, 1),
                    note=f"computed at head_dim {d_run}; tflops count d_qk+d_v" if pad_to else "")
        except Exception as exc:
            tab.row(**base, **{"pass": pas}, note=short(exc))
            log(f"  sdpa {backend} {model} {pas}: {short(exc)}")


def section_attention(backends, shapes) -> None:
    cols = ["backend", "model", "batch", "seq", "heads", "kv_heads", "d_qk", "d_v", "padded_to", "causal",
            "pass", "time_us", "tflops", "note"]
    tab = Table("attention_extra.csv", cols)
    for model, b, s, heads, kv, dqk, dv, pad in shapes:
        for backend in backends:
            if late():
                log("attention: deadline, skipping the remaining cases")
                return
            sdpa_case(tab, backend, b, s, heads, kv, dqk, dv, pad, model)
            if S.dev.type == "cuda":
                torch.cuda.empty_cache()
        log(f"attention {model} b{b} s{s} h{heads} d{dqk}/{dv} pad{pad} done")
