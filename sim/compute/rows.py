"""The compute model's time for one row of a kernel table, as the table timed it: one isolated
call (the GEMM call latency included), attention forward, backward or forward+backward,
memory-bound ops at their class's bandwidth, the AdamW step per implementation, the MoE routing
kernels (``sim.calibration.moe_memory_params``), Mamba-2's SSD scan as its kernels
(``sim.workload.blocks.ssd_forward``). What ``validate --suite compute`` sets
against every measured row, and what ``clustersim bench`` estimates its run with.
"""

from __future__ import annotations

import math
from pathlib import Path

from .. import calibration as cal
from ..hardware import Chip
from ..software import resolve_software
from ..workload.blocks import ssd_backward, ssd_forward
from .folder_fit import KernelFit
from .kernels import (
    GEMM_DTYPE_BYTES,
    AttentionParams,
    attention_time_s,
    fixed_memory_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
    memory_time_s,
)
from .model import ComputeModel, flash_params_of, gemm_params_of, grouped_params_of
from .moe_tables import MOE_MEMORY_OPS, routing_bytes, routing_cases
from .tables import KernelCase, _num, _pick, _rows

__all__ = ["predict_case", "ssd_cases", "routing_kernel_cases"]


def predict_case(c: KernelCase, chip: Chip, fit: KernelFit | None = None) -> float:
    """The model's time for one measured row on *chip*, as the table timed it (with *fit*: the
    constants fitted on a folder of the user's tables, the bundled ones where it has none)."""
    assert chip.sms is not None, chip.name
    if c.kind == "gemm":
        gemm = (fit.gemm if fit else {}).get(c.key) or gemm_params_of(chip)[c.key]
        if c.batch > 1:                # a grouped GEMM (the MoE tables: one grouped kernel)
            grouped = fit.grouped if fit and fit.grouped is not None else grouped_params_of(chip)
            return grouped_gemm_time_s(c.m, c.n, c.k, GEMM_DTYPE_BYTES[c.key], chip.peak_flops(c.key),
                                       chip.sms, chip.hbm_Bps, gemm, c.batch, grouped, isolated=True)
        return gemm_time_s(c.m, c.n, c.k, GEMM_DTYPE_BYTES[c.key], chip.peak_flops(c.key),
                           chip.sms, chip.hbm_Bps, gemm, c.batch, isolated=True)
    if c.kind == "attention":
        assert c.attention is not None
        family, passname = c.key.split(" ")

        def params(p: str) -> AttentionParams:
            fitted = fit.attention_params(family, p) if fit else None
            return fitted or flash_params_of(chip, family, p)

        fwd, bwd = (attention_time_s(c.attention, backward, params(p), chip.bf16_flops, chip.sms,
                                     chip.hbm_Bps)
                    for backward, p in ((False, "fwd"), (True, "bwd")))
        return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[passname]
    if c.kind == "ssd":
        return _ssd_time_s(c, chip)
    if c.kind == "routing":                # one eager call: the bf16 GEMM fit's call latency added
        p = (fit.moe_memory.get(c.key) if fit else None) or cal.moe_memory_params(c.key, chip)
        assert p is not None, c.key
        gemm = (fit.gemm if fit else {}).get("bf16") or gemm_params_of(chip)["bf16"]
        return gemm.call_s + fixed_memory_time_s(c.nbytes, chip.hbm_Bps, p)
    if c.kind == "memory":
        fractions = {**cal.MEMORY_FRACTION, **(fit.memory_fraction if fit else {})}
        if c.key == "rmsnorm_fwd+bwd":
            # 2 of the 5 tensors in the forward, 3 in the backward (validation/compute/README.md)
            return (memory_time_s(0.4 * c.nbytes, chip.hbm_Bps, fractions["rmsnorm_fwd"])
                    + memory_time_s(0.6 * c.nbytes, chip.hbm_Bps, fractions["rmsnorm_bwd"]))
        return memory_time_s(c.nbytes, chip.hbm_Bps, fractions[c.key])
    assert c.kind == "optimizer", c.kind
    fractions = {**cal.OPTIMIZER_FRACTION, **(fit.optimizer_fraction if fit else {})}
    return memory_time_s(c.nbytes, chip.hbm_Bps, fractions[c.key])


def ssd_cases(folder: Path) -> list[KernelCase]:
    """The SSD rows of *folder*'s ``mamba_ssd.csv`` (benchmarks/device/mamba_ssd.py): mamba_ssm's
    scan forward or forward+backward, at its kernels' GPU time (``kernel_us``, the profiler's sum:
    the other columns hold the host's launch gaps, which a training step hides while the host runs
    ahead). The gated-norm rows are not predicted (data only)."""
    path = folder / "mamba_ssd.csv"
    out: list[KernelCase] = []
    for r in _rows(path) if path.exists() else []:
        if _pick(r, "op", {"ssd", "gated_rmsnorm"}, path) != "ssd":
            continue
        passname = _pick(r, "pass", {"fwd", "fwd+bwd"}, path)
        b, s, h, g, p, n, q = (int(_num(r, k, path)) for k in ("batch", "seq", "heads", "groups", "head_dim",
                                                                 "state", "chunk"))
        label = f"{r.get('model')} tp{r.get('tp')} {b}x{s} q{q} {passname}"
        out.append(KernelCase(path.name, "ssd", passname, label, _num(r, "kernel_us", path) * 1e-6,
                              ssd=(b * math.ceil(s / q), h, g, p, n, q)))
    return out


def _ssd_time_s(c: KernelCase, chip: Chip) -> float:
    """The SSD ops of one row (``ssd_forward``, with ``ssd_backward`` of each for fwd+bwd) at the
    kernel rates the chip's default profile (Megatron-Core's on a GPU) gives them, without a stack
    efficiency."""
    cm = ComputeModel(chip, "bf16", resolve_software(None, None, chip))
    fwd = ssd_forward(*c.ssd)
    ops = fwd + ([b for op in reversed(fwd) for b in ssd_backward(op)] if c.key == "fwd+bwd" else [])
    return sum(cm.gemm_s(*op.shape, batch=op.batch) if op.kind == "gemm" else cm.memory_s(op.bytes, op.cls)
               for op in ops)


def routing_kernel_cases(folder: Path) -> list[KernelCase]:
    """The rows of *folder*'s ``moe_routing.csv`` that a routing class was fitted on (softmax + top-k,
    the eager permute, the gather, the unpermute), but for cases timed while the GPU was disturbed
    (``sim.compute.moe_tables.DISTURBED_FACTOR``)."""
    measured = {op: m for m, op in MOE_MEMORY_OPS.items()}
    return [KernelCase("moe_routing.csv", "routing", measured[c.op],
                       f"{c.op} T{c.tokens} H{c.hidden} E{c.experts} k{c.top_k}", c.time_s,
                       nbytes=routing_bytes(measured[c.op], c))
            for c in routing_cases(folder) if c.op in measured and not c.disturbed]
