"""The compute model's time for one row of a kernel table, as the table timed it: one isolated
call (the GEMM call latency included), attention forward, backward or forward+backward,
memory-bound ops at their class's bandwidth, the AdamW step per implementation. What
``validate --suite compute`` sets against every measured row, and what ``clustersim bench``
estimates its run with.
"""

from __future__ import annotations

from .. import calibration as cal
from ..hardware import Chip
from .folder_fit import KernelFit
from .kernels import (
    GEMM_DTYPE_BYTES,
    AttentionParams,
    attention_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
    memory_time_s,
)
from .model import flash_params_of, gemm_params_of, grouped_params_of
from .tables import KernelCase

__all__ = ["predict_case"]


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
