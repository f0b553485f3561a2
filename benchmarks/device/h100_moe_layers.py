"""MoE timings the H100 tables lack (issue 28): grouped GEMMs at few tokens per expert (forward, dgrad,
wgrad; balanced and randomly routed), FP8 expert GEMMs (one grouped kernel, and a per-expert loop as
Transformer Engine's GroupedLinear runs it), and whole MoE MLP layers forward and backward.

Run once on one whole H100 (about two minutes; every section stops at a 4-minute deadline):
    PYTHONUNBUFFERED=1 python benchmarks/device/h100_moe_layers.py --out $OUT
Check on a CPU with tiny shapes (every code path that runs on a CPU; numbers meaningless):
    python benchmarks/device/h100_moe_layers.py --dry-run

Method, as validation/compute/README.md states it: CUDA events around one call, 3 warm-ups, the median
of 10 timed calls (5 for whole layers); random bf16 inputs N(0,1); `time_us` per call, a chain of eager
kernels one call (launch gaps and host syncs included). Each case is one row written as soon as it is
timed; a case that fails writes its error in `note` and the rest go on.

Files under --out:
- moe_grouped_small.csv: torch._grouped_mm (bf16) over a rank's experts at 8-1,024 tokens per expert,
  for the forward (x W), dgrad (dy W^T) and wgrad (x^T dy, the experts split along the contraction)
  GEMMs of the up (gate+up fused) and down projections. `routing` = balanced (every expert the same
  tokens) or multinomial (each routed row to a uniformly drawn expert, so counts vary as a learned
  router's do at balance; each expert's rows padded up to a multiple of 16 as torchtitan pads them);
  `impl` = grouped_mm or loop (a Python loop of per-expert F.linear, forward only).
- moe_fp8_experts.csv: the forward GEMMs in FP8 e4m3 -> bf16: `scaled_grouped_mm` (one grouped kernel,
  row-wise scales: torch._scaled_grouped_mm), `loop_scaled_mm` (per-expert torch._scaled_mm with
  tensor-wise scales, inputs quantized beforehand) and `loop_quantize_scaled_mm` (the same with each
  expert's rows quantized in the loop: amax, scale, cast; eager PyTorch, not TE's fused casts).
- moe_layer.csv: one MoE MLP layer on one GPU in eager PyTorch (router GEMM, fp32 softmax, top-k,
  renormalize, stable argsort + bincount, rows padded per expert to 16 and gathered, grouped up GEMM,
  SiLU(gate) * up, grouped down GEMM, weighted index_add back to token order), `fwd` and `fwd+bwd`
  (autograd through all of it; router and expert weights trainable, no optimizer step).
- env.json (versions, nvidia-smi, a GEMM and copy control), log.txt.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from devbench import S, Table, bench, late, log, rnd, run_sections, short, start
from h100_kernels_extra import write_env

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
ALIGN = 16  # rows per expert padded to this (fp8 needs 16, bf16 8: torchtitan's TOKEN_GROUP_ALIGN_SIZE_M)

# (model, hidden, expert width, [experts per rank]) from the presets' cited configs (sim/models.py)
EXPERT_SHAPES = [
    ("qwen3-30b-a3b", 2048, 768, [128, 16, 8]),
    ("gpt-oss-120b", 2880, 2880, [32, 16]),
    ("deepseek-v3", 7168, 2048, [32, 8]),
    ("llama4-maverick", 5120, 8192, [16]),
    ("qwen3-235b-a22b", 4096, 1536, [16]),
]


def offsets(counts: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(counts, 0).to(torch.int32)


def routed_counts(experts: int, rows: int) -> torch.Tensor:
    """Rows per expert when each of *rows* goes to a uniformly drawn expert, padded up to ALIGN."""
    draw = torch.randint(0, experts, (rows,), device=S.dev)
    c = torch.bincount(draw, minlength=experts)
    return (c + ALIGN - 1) // ALIGN * ALIGN


def grouped(a, w_t, offs):
    return torch._grouped_mm(a, w_t, offs=offs, out_dtype=torch.bfloat16)


def wgrad_call(dy, x, offs):
    """dW[e] = dy_e^T x_e with the experts split along the rows (the contraction): 2-D x 2-D grouped
    GEMM. The layout the kernel takes is found by trying; copies are made outside the timed call."""
    tries = [("dyT-view", dy.t(), x), ("dyT-contig", dy.t().contiguous(), x),
             ("dyT-contig,x-colmajor", dy.t().contiguous(), x.t().contiguous().t())]
    errors = []
    for name, a, b in tries:
        try:
            grouped(a, b, offs)
            return (lambda a=a, b=b: grouped(a, b, offs)), name
        except Exception as exc:
            errors.append(f"{name}: {short(exc)}")
    raise RuntimeError(" | ".join(errors)[:400])


def section_grouped(shapes, tpes) -> None:
    tab = Table("moe_grouped_small.csv", ["model", "experts_local", "tokens_per_expert", "routing", "linear",
                                          "pass", "impl", "m_total", "max_rows", "n", "k", "time_us", "tflops",
                                          "note"])
    for model, h, f, el, tpe in expert_grid("grouped", shapes, tpes):
        for routing in ("balanced", "multinomial"):
            counts = (torch.full((el,), tpe, device=S.dev, dtype=torch.int64) if routing == "balanced"
                      else routed_counts(el, el * tpe))
            offs, rows, mx = offsets(counts), int(counts.sum()), int(counts.max())
            for linear, n, k in (("up", 2 * f, h), ("down", h, f)):
                base = dict(model=model, experts_local=el, tokens_per_expert=tpe, routing=routing,
                            linear=linear, m_total=rows, max_rows=mx)
                grouped_case(tab, base, el, rows, n, k, offs, counts, routing)


def expert_grid(name: str, shapes, tpes):
    """Each (model, hidden, expert width, experts per rank, tokens per expert) of *shapes* x *tpes* until
    the deadline; the GPU's cache freed after each, each model's experts logged when done."""
    for model, h, f, locals_ in shapes:
        for el in locals_:
            for tpe in tpes:
                if late():
                    log(f"{name}: deadline, skipping the remaining cases")
                    return
                yield model, h, f, el, tpe
                if S.dev.type == "cuda":
                    torch.cuda.empty_cache()
            log(f"{name} {model} x{el} done")


def grouped_case(tab, base, el, rows, n, k, offs, counts, routing) -> None:
    try:
        a, w = rnd(rows, k), rnd(el, n, k)
        dy = rnd(rows, n)
    except Exception as exc:
        tab.row(**base, note=f"setup {short(exc)}")
        return
    flops = 2.0 * rows * n * k
    cases = [("fwd", "grouped_mm", n, k, lambda: (lambda: grouped(a, w.transpose(-2, -1), offs), "")),
             ("dgrad", "grouped_mm", k, n, lambda: (lambda: grouped(dy, w, offs), "")),
             ("wgrad", "grouped_mm", n, k, lambda: wgrad_call(dy, a, offs))]
    if routing == "balanced":
        splits = counts.tolist()

        def loop():
            outs, s = [], 0
            for e, c in enumerate(splits):
                outs.append(F.linear(a[s:s + c], w[e]))
                s += c
            return outs
        cases.append(("fwd", "loop", n, k, lambda: (loop, "")))
    for pas, impl, nn, kk, make in cases:
        row = dict(base, **{"pass": pas}, impl=impl, n=nn, k=kk)
        try:
            fn, note = make()
            us = bench(fn)
            tab.row(**row, time_us=round(us, 2), tflops=round(flops / us / 1e6, 1), note=note)
        except Exception as exc:
            tab.row(**row, note=short(exc))
            log(f"  grouped {base['model']} x{el} {base['linear']} {pas} {impl}: {short(exc)}")


def quantize_rows(x):
    """Per-tensor current scaling: amax, scale, cast (eager)."""
    scale = E4M3_MAX / x.abs().amax().float().clamp_min(1e-12)
    return (x * scale).to(E4M3), scale.reciprocal()


def section_fp8(shapes, tpes) -> None:
    tab = Table("moe_fp8_experts.csv", ["model", "experts_local", "tokens_per_expert", "linear", "impl", "m_total",
                                        "n", "k", "time_us", "tflops", "note"])
    for model, h, f, el, tpe in expert_grid("fp8", shapes, tpes):
        for linear, n, k in (("up", 2 * f, h), ("down", h, f)):
            fp8_case(tab, dict(model=model, experts_local=el, tokens_per_expert=tpe, linear=linear,
                               m_total=el * tpe, n=n, k=k), el, tpe, n, k)


def fp8_case(tab, base, el, tpe, n, k) -> None:
    rows = el * tpe
    try:
        a, w = rnd(rows, k), rnd(el, n, k)
        aq = (a * (E4M3_MAX / a.abs().amax(dim=1, keepdim=True).float().clamp_min(1e-12))).to(E4M3)
        sa = (a.abs().amax(dim=1).float() / E4M3_MAX).clamp_min(1e-12)
        wq = (w * (E4M3_MAX / w.abs().amax(dim=2, keepdim=True).float().clamp_min(1e-12))).to(E4M3)
        sw = (w.abs().amax(dim=2).float() / E4M3_MAX).clamp_min(1e-12)  # [experts, n]
        offs = offsets(torch.full((el,), tpe, device=S.dev, dtype=torch.int64))
        one = torch.ones((), device=S.dev, dtype=torch.float32)
        aq_t = [(a[e * tpe:(e + 1) * tpe] * (E4M3_MAX / a.abs().amax().float())).to(E4M3) for e in range(el)]
    except Exception as exc:
        tab.row(**base, note=f"setup {short(exc)}")
        return

    def sgm():
        return torch._scaled_grouped_mm(aq, wq.transpose(-2, -1), sa, sw, offs=offs, out_dtype=torch.bfloat16)

    def loop_gemm():
        return [torch._scaled_mm(aq_t[e], wq[e].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                for e in range(el)]

    def loop_quant():
        outs = []
        for e in range(el):
            q, s = quantize_rows(a[e * tpe:(e + 1) * tpe])
            outs.append(torch._scaled_mm(q, wq[e].t(), scale_a=s, scale_b=one, out_dtype=torch.bfloat16))
        return outs

    flops = 2.0 * rows * n * k
    for impl, fn in (("scaled_grouped_mm", sgm), ("loop_scaled_mm", loop_gemm),
                     ("loop_quantize_scaled_mm", loop_quant)):
        try:
            us = bench(fn)
            tab.row(**base, impl=impl, time_us=round(us, 2), tflops=round(flops / us / 1e6, 1))
        except Exception as exc:
            tab.row(**base, impl=impl, note=short(exc))
            log(f"  fp8 {base['model']} x{el} {base['linear']} t{tpe} {impl}: {short(exc)}")


class MoELayer:
    """One MoE MLP in eager PyTorch, the steps the docstring lists."""

    def __init__(self, h: int, f: int, experts: int, top_k: int) -> None:
        def param(*shape: int, fan_in: int):
            return (rnd(*shape) / fan_in ** 0.5).requires_grad_()
        self.experts, self.top_k = experts, top_k
        self.wr = param(experts, h, fan_in=h)
        self.w_up = param(experts, 2 * f, h, fan_in=h)    # [E, N, K]: column-major B per expert
        self.w_down = param(experts, h, f, fan_in=f)
        self.stats: dict[str, int] = {}

    def __call__(self, x):
        t, k, e = x.shape[0], self.top_k, self.experts
        probs = torch.softmax((x @ self.wr.t()).float(), dim=-1)
        p, idx = torch.topk(probs, k, dim=-1)
        p = p / p.sum(-1, keepdim=True)
        flat = idx.flatten()
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=e)
        padded = (counts + ALIGN - 1) // ALIGN * ALIGN
        start = torch.cumsum(counts, 0) - counts
        pstart = torch.cumsum(padded, 0) - padded
        expert_of = flat.index_select(0, order)
        rank = torch.arange(t * k, device=x.device) - start.index_select(0, expert_of)
        dest = pstart.index_select(0, expert_of) + rank
        total = int(padded.sum())
        self.stats = dict(rows=t * k, padded_rows=total, max_rows=int(counts.max()))
        xs = x.new_zeros(total, x.shape[1]).index_copy(0, dest, x.index_select(0, order // k))
        hid = torch._grouped_mm(xs, self.w_up.transpose(-2, -1), offs=offsets(padded), out_dtype=torch.bfloat16)
        gate, up = hid.chunk(2, dim=-1)
        y = torch._grouped_mm(F.silu(gate) * up, self.w_down.transpose(-2, -1), offs=offsets(padded),
                              out_dtype=torch.bfloat16).index_select(0, dest)
        w = p.flatten().index_select(0, order).to(y.dtype)
        return x.new_zeros(x.shape).index_add(0, order // k, y * w[:, None])


def section_layer(cases) -> None:
    tab = Table("moe_layer.csv", ["model", "tokens", "hidden", "expert_width", "experts", "top_k", "pass",
                                  "rows", "padded_rows", "max_rows", "time_us", "note"])
    for model, h, f, e, k, tokens_list in cases:
        try:
            layer = MoELayer(h, f, e, k)
        except Exception as exc:
            tab.row(model=model, hidden=h, expert_width=f, experts=e, top_k=k, note=f"setup {short(exc)}")
            continue
        for t in tokens_list:
            if late():
                log("layer: deadline, skipping the remaining cases")
                return
            x = rnd(t, h).requires_grad_()
            dy = rnd(t, h)
            params = (x, layer.wr, layer.w_up, layer.w_down)

            def fwd(layer=layer, x=x):
                with torch.no_grad():
                    return layer(x)

            def fwd_bwd(layer=layer, x=x, params=params, dy=dy):
                return torch.autograd.grad(layer(x), params, dy)
            for pas, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                base = dict(model=model, tokens=t, hidden=h, expert_width=f, experts=e, top_k=k, **{"pass": pas})
                try:
                    us = bench(fn, reps=5)
                    tab.row(**base, **layer.stats, time_us=round(us, 2))
                except Exception as exc:
                    tab.row(**base, note=short(exc))
                    log(f"  layer {model} t{t} {pas}: {short(exc)}")
        if S.dev.type == "cuda":
            torch.cuda.empty_cache()
        log(f"layer {model} done")


def plan(dry: bool):
    if dry:
        return dict(shapes=[("tiny", 64, 32, [4])], tpes=[16, 32], fp8_tpes=[16],
                    layers=[("tiny", 64, 32, 8, 2, [64, 128])])
    return dict(shapes=EXPERT_SHAPES, tpes=[8, 16, 32, 64, 128, 256, 512, 1024], fp8_tpes=[16, 64, 256, 1024],
                layers=[("qwen3-30b-a3b", 2048, 768, 128, 8, [512, 1024, 2048, 4096, 16384]),
                        ("gpt-oss-120b", 2880, 2880, 128, 4, [2048, 8192]),
                        ("mixtral-8x7b", 4096, 14336, 8, 2, [4096, 16384]),
                        ("deepseek-v3-shape-e32", 7168, 2048, 32, 2, [4096, 16384])])


def main() -> int:
    args = start(__doc__, "h100_moe_", 240.0)
    if args is None:
        return 2
    p = plan(args.dry_run)
    sections = [("env", lambda: write_env(args.dry_run)), ("layer", lambda: section_layer(p["layers"])),
                ("grouped", lambda: section_grouped(p["shapes"], p["tpes"])),
                ("fp8", lambda: section_fp8(p["shapes"], p["fp8_tpes"]))]
    run_sections(sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
