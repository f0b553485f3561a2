"""The compute model: each op of a rank's work -> seconds on one chip, under one software stack.

``ComputeModel(chip, precision, profile)`` turns a workload ``Op`` into a kernel time with the
formulas of ``sim.compute.kernels`` and the constants of ``sim.calibration``; the profile
(``sim.software``) decides which attention kernel runs, which GEMMs run in FP8, how elementwise
ops are fused and which optimizer step runs. Times are memoised per op (the same shapes repeat in
every layer and micro-batch).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .. import calibration as cal
from ..errors import ConfigError
from ..hardware import Chip
from ..precision import active_recipe
from ..software import SoftwareProfile
from ..workload.transformer import Op
from .kernels import (
    GEMM_DTYPE_BYTES,
    AttentionParams,
    AttentionShape,
    GemmParams,
    GroupedGemmParams,
    attention_time_s,
    fixed_memory_time_s,
    gemm_curve_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
    memory_time_s,
    mxu_fill,
    splash_time_s,
)

if TYPE_CHECKING:
    from .folder_fit import KernelFit

__all__ = ["ComputeModel", "stack_key", "memory_class", "gemm_params_of", "grouped_params_of",
           "flash_params_of"]

# The GEMM input dtypes the model runs: bf16, per-tensor-scaled FP8 (Hopper-style), and the
# Blackwell block-scaled formats MXFP8 (1x32, e8m0 scales) and NVFP4 (1x16, e4m3 scales).

# Memory-bound op class (sim.workload.transformer) -> the measured class it runs as, per
# elementwise mode of the profile. Eager PyTorch runs each op as its own kernel(s) at the
# bandwidth measured for it; RoPE's rotate-half, like SwiGLU, is a chain of small elementwise
# kernels; a row-wise softmax or cross-entropy is a reduction like RMSNorm. Megatron/Apex
# ("partial") has one-kernel bias-GeLU and bias-dropout-add. A fused stack streams each tensor once.
# MoE routing (both unfused modes run PyTorch's own ops there): the router's softmax + top-k and the
# permute and unpermute as measured (sim.calibration.MOE_MEMORY_HOPPER); the backward of a permute
# (index_select) is an index_add_ of the row gradients onto their tokens, the unpermute's kernel;
# the backward of an unpermute (index_add_) gathers the output gradient by the saved order, a
# gather; the top-k's backward (softmax backward, zeros + scatter) is taken as its forward.
_MOE_CLASSES = {"moe-topk": "moe_topk", "moe-topk-bwd": "moe_topk", "moe-permute": "moe_permute",
                "moe-permute-bwd": "moe_unpermute", "moe-unpermute": "moe_unpermute",
                "moe-unpermute-bwd": "moe_gather"}
_CLASSES: dict[str, dict[str, str]] = {
    "eager": {"norm": "rmsnorm_fwd", "norm-bwd": "rmsnorm_bwd", "act": "swiglu_fwd",
              "act-bwd": "swiglu_fwd", "rope": "swiglu_fwd", "rope-bwd": "swiglu_fwd",
              "residual": "residual_add", "residual-bwd": "residual_add",
              "softmax": "rmsnorm_fwd", "softmax-bwd": "rmsnorm_bwd", "cross-entropy": "rmsnorm_fwd",
              "embedding": "copy", "cast": "copy", **_MOE_CLASSES},
    "partial": {"norm": "rmsnorm_fwd", "norm-bwd": "rmsnorm_bwd", "act": "residual_add",
                "act-bwd": "residual_add", "rope": "swiglu_fwd", "rope-bwd": "swiglu_fwd",
                "residual": "residual_add", "residual-bwd": "residual_add",
                "softmax": "rmsnorm_fwd", "softmax-bwd": "rmsnorm_bwd",
                "cross-entropy": "rmsnorm_fwd", "embedding": "copy", "cast": "copy", **_MOE_CLASSES},
}


def memory_class(op_class: str, elementwise: str) -> str:
    """The measured class an op class runs as: a ``sim.calibration.MEMORY_FRACTION`` or
    ``MOE_MEMORY_HOPPER`` key (a fused stack runs every class as a copy)."""
    if elementwise == "fused":
        return "copy"
    return _CLASSES[elementwise].get(op_class, "copy")


def stack_key(profile: SoftwareProfile, chip: Chip, precision: str) -> tuple[str, str, str]:
    """Key of ``sim.calibration.STACK_EFFICIENCY``: (framework, GPU family or TPU generation,
    precision)."""
    return profile.framework, (chip.arch if chip.is_tpu else chip.family), precision


def stack_efficiency_of(table: dict[tuple[str, str, str], float],
                        key: tuple[str, str, str]) -> float:
    """The factor of *key*'s (framework, hardware, precision) group in *table*.

    A group with no calibration fit borrows, in order: the same framework's groups on the same
    hardware (another precision of one stack: the nearest in element width,
    ``sim.compute.kernels.GEMM_DTYPE_BYTES``, so BF16
    and MXFP8 take FP8's before NVFP4's; the median of ties), else every group fitted on that
    hardware (their median). Every stack loses something against the kernel tables' best case,
    and the typical loss on that chip is a better estimate of an unmeasured stack's than none. On
    hardware with no fitted group at all, its predecessor's factor where
    ``sim.calibration.STACK_PREDECESSOR`` names one (chips new to the catalogue), else 1.0.
    """
    if key in table:
        return table[key]
    same_stack = {k: v for k, v in table.items() if k[:2] == key[:2]}
    if same_stack:
        def width_gap(k: tuple[str, str, str]) -> float:
            return abs(GEMM_DTYPE_BYTES.get(k[2], 2.0) - GEMM_DTYPE_BYTES.get(key[2], 2.0))
        nearest = min(width_gap(k) for k in same_stack)
        return statistics.median(v for k, v in same_stack.items() if width_gap(k) == nearest)
    values = [v for k, v in table.items() if k[1] == key[1]]
    if values:
        return statistics.median(values)
    predecessor = cal.STACK_PREDECESSOR.get(key[1])
    if predecessor is not None and predecessor != key[1]:
        return stack_efficiency_of(table, (key[0], predecessor, key[2]))
    return 1.0


def gemm_params_of(chip: Chip) -> dict[str, GemmParams]:
    """The GEMM constants per input dtype on an NVIDIA *chip*: Blackwell's own fit
    (``sim.calibration.GEMM_BLACKWELL``, scaled for a Blackwell chip other than the B200 by the
    ratio of the two chips' best-shape matmul rates), else the H100 fit scaled by the ratio of the
    chip's best-shape rate to the H100's (``MAMF_RATIO_VS_HOPPER``)."""
    if chip.arch == "blackwell":
        mamf = cal.MAMF_BLACKWELL.get(chip.name)
        fitted = cal.MAMF_BLACKWELL["B200"]

        def scale(dtype: str) -> float:
            key = "bf16" if dtype == "bf16" else "fp8"       # the block-scaled formats: fp8's
            return mamf[key] / fitted[key] if mamf else 1.0

        return {dt: GemmParams(p.efficiency * scale(dt), p.tile_s, p.k0, p.call_s)
                for dt, p in cal.GEMM_BLACKWELL.items()}
    ratio = cal.MAMF_RATIO_VS_HOPPER.get(chip.arch, {})
    return {dt: GemmParams(p.efficiency * ratio.get(dt, 1.0), p.tile_s, p.k0, p.call_s)
            for dt, p in cal.GEMM_HOPPER.items()}


def grouped_params_of(chip: Chip) -> GroupedGemmParams:
    """The grouped expert GEMM's constants on an NVIDIA *chip*: the Hopper fit on Hopper; elsewhere
    the chip's own tile time, no streaming limit below HBM, and Hopper's time per group (assumed:
    ``sim.calibration.GROUPED_GEMM_HOPPER``)."""
    g = cal.GROUPED_GEMM_HOPPER
    return g if chip.arch == "hopper" else GroupedGemmParams(g.group_s, None, None)


def flash_params_of(chip: Chip, family: str, passname: str) -> AttentionParams:
    """The constants of one fused attention kernel family and pass (``fwd``, ``bwd``) on an NVIDIA
    *chip* (``sim.calibration``: the Hopper, Ampere, Blackwell and Blackwell Ultra entries)."""
    if family == "triton":
        p = flash_params_of(chip, "flash-attention-2", passname)
        return AttentionParams(p.efficiency / cal.FA2_VS_TRITON, p.d256, p.tail, p.mem, p.d64)
    if family == "flex":
        # cuDNN's kernel (FlashAttention-2 on Ampere) with its matmul rate divided by
        # FlexAttention's measured time ratio (the HBM traffic the same)
        p = flash_params_of(chip, "flash-attention-2" if chip.arch == "ampere" else "cudnn", passname)
        return AttentionParams(p.efficiency / cal.FLEX_VS_CUDNN, p.d256, p.tail, p.mem, p.d64)
    if chip.arch == "ampere":
        p = cal.ATTENTION_HOPPER[("flash-attention-2", passname)]
        return AttentionParams(cal.ATTENTION_AMPERE_EFFICIENCY[passname], p.d256, p.tail, p.mem,
                               p.d64)
    if family == "flash-attention-3":
        p = cal.ATTENTION_HOPPER[("cudnn", passname)]
        return AttentionParams(p.efficiency * cal.FA3_SPEEDUP_VS_CUDNN[passname], p.d256,
                               p.tail, p.mem, p.d64)
    if chip.arch == "blackwell":
        table = cal.ATTENTION_BLACKWELL_ULTRA if chip.blackwell_ultra else cal.ATTENTION_BLACKWELL
        if family == "flash-attention-4":
            p = table[("cudnn", passname)]
            return AttentionParams(p.efficiency * cal.FA4_SPEEDUP_VS_CUDNN[passname], p.d256,
                                   p.tail, p.mem)
        return table[(family, passname)]
    if family == "flash-attention-4":
        raise ConfigError(f"software.attention: flash-attention-4 is a Blackwell kernel; "
                          f"{chip.name} is {chip.arch.capitalize()}")
    p = cal.ATTENTION_HOPPER[(family, passname)]
    # Architectures without their own attention table: the Hopper fit scaled as their GEMMs
    # are, by the best-shape matmul rates (assumed: attention is matmul-bound alike).
    ratio = cal.MAMF_RATIO_VS_HOPPER.get(chip.arch, {}).get("bf16", 1.0)
    return AttentionParams(p.efficiency * ratio, p.d256, p.tail, p.mem, p.d64)


class ComputeModel:
    """Kernel times of one chip under one precision and software profile."""

    def __init__(self, chip: Chip, precision: str, profile: SoftwareProfile,
                 stack_efficiency: dict[tuple[str, str, str], float] | None = None) -> None:
        self.chip = chip
        self.profile = profile
        self.gpu = not chip.is_tpu
        self.bf16_peak = chip.bf16_flops
        self.recipe = active_recipe(precision, chip, profile)   # None: every GEMM in BF16
        self.hbm_Bps = chip.hbm_Bps
        table = cal.STACK_EFFICIENCY if stack_efficiency is None else stack_efficiency
        self.stack_efficiency = stack_efficiency_of(table, stack_key(profile, chip, precision))
        self._memo: dict[Op, float] = {}
        # PERF: (op, time, launches) by the op's identity (interned layers' ops), held alive
        self._by_id: dict[int, tuple[Op, float, int]] = {}
        self.sms = chip.sms or 1
        # software.kernel_tables: constants fitted on the user's own tables (sim.compute.folder_fit),
        # each kind the folder cannot fit kept at the bundled constant
        self.fit: KernelFit | None = None
        if self.gpu:
            assert chip.sms, chip.name
            self.gemm = gemm_params_of(chip)
            if profile.kernel_tables:
                from .folder_fit import fit_folder

                self.fit = fit_folder(profile.kernel_tables, chip, flash_params_of)
                self.gemm = {**self.gemm, **self.fit.gemm}

    # ------------------------------------------------------------------ kernels
    def gemm_s(self, m: int, n: int, k: int, dtype: str = "bf16", batch: int = 1, *,
               fp8: bool = False, grouped: bool = False, uneven: bool = False) -> float:
        """``batch`` GEMMs C[m,n] = A[m,k] B[k,n] with inputs in *dtype* (a training precision,
        ``sim.precision.PRECISIONS``) at the chip's peak for it (``Chip.peak_flops``);
        ``fp8=True`` is the older spelling of ``dtype="fp8"``. *grouped* (with ``batch > 1``):
        one grouped kernel over the batch (MoE experts: ``sim.compute.kernels.grouped_gemm_time_s``)
        rather than a batched cuBLAS call, *uneven* its groups' rows a router's draws around *m*.
        A TPU runs every GEMM on its bf16 curve. One line naming
        the dtype where the chip cannot run it."""
        if not self.gpu:
            # the MXU's padded work at the dtype's peak (int8 at the int8 peak, its operands 1 B)
            peak = self.bf16_peak if dtype == "bf16" else self.chip.peak_flops(dtype)
            flops = 2.0 * m * n * k * batch / mxu_fill(n, k, self.chip.mxu_dim)
            elem = GEMM_DTYPE_BYTES.get(dtype, 2.0)
            nbytes = batch * (elem * (m * k + k * n) + 2.0 * m * n)
            return gemm_curve_time_s(flops, nbytes, peak, cal.TPU_GEMM_E_MAX,
                                     cal.TPU_GEMM_T_RAMP_S, self.hbm_Bps * cal.TPU_MEMORY_FRACTION)
        if fp8:
            dtype = "fp8"
        if dtype not in GEMM_DTYPE_BYTES:
            raise ConfigError(f"GEMM dtype: got {dtype!r}; valid: {', '.join(GEMM_DTYPE_BYTES)}")
        try:
            peak = self.chip.peak_flops(dtype)
        except ConfigError:
            raise ConfigError(f"GEMM dtype: {dtype} has no tensor-core path on {self.chip.name}") from None
        params = self.gemm.get(dtype)
        if params is None:
            raise ConfigError(f"GEMM dtype: {dtype} does not run on {self.chip.name} "
                              f"({self.chip.arch.capitalize()}); valid there: {', '.join(self.gemm)}")
        if grouped and batch > 1:
            return grouped_gemm_time_s(m, n, k, GEMM_DTYPE_BYTES[dtype], peak, self.sms,
                                       self.hbm_Bps, params, batch, self._grouped_params(),
                                       uneven=uneven)
        return gemm_time_s(m, n, k, GEMM_DTYPE_BYTES[dtype], peak, self.sms, self.hbm_Bps, params,
                           batch)

    def memory_s(self, nbytes: float, op_class: str) -> float:
        """A memory-bound op of *op_class* moving *nbytes*, at the rate of the measured class the
        profile's elementwise mode runs it as (``memory_class``)."""
        if not self.gpu:
            return memory_time_s(nbytes, self.hbm_Bps, cal.TPU_MEMORY_FRACTION)
        measured = memory_class(op_class, self.profile.elementwise)
        moe = self.fit.moe_memory.get(measured) if self.fit else None
        moe = moe or cal.moe_memory_params(measured, self.chip)
        if moe is not None:
            return fixed_memory_time_s(nbytes, self.hbm_Bps, moe)
        return memory_time_s(nbytes, self.hbm_Bps, self._memory_fraction(measured))

    def _memory_fraction(self, measured: str) -> float:
        fitted = self.fit.memory_fraction.get(measured) if self.fit else None
        return cal.MEMORY_FRACTION[measured] if fitted is None else fitted

    def _grouped_params(self) -> GroupedGemmParams:
        fitted = self.fit.grouped if self.fit else None
        return grouped_params_of(self.chip) if fitted is None else fitted

    def _flash_params(self, family: str, passname: str) -> AttentionParams:
        fitted = self.fit.attention_params(family, passname) if self.fit else None
        return flash_params_of(self.chip, family, passname) if fitted is None else fitted

    def attention_s(self, s: AttentionShape, passname: str) -> float:
        """One attention pass (``fwd``, ``bwd``, or ``recompute``: the forward a backward repeats
        when the kernel keeps no scores, i.e. only for the unfused ``xla`` path)."""
        family = self.profile.attention
        if family == "xla":
            return self._unfused_attention_s(s, passname)
        if passname == "recompute":
            return 0.0                     # a flash backward recomputes its scores itself
        bwd = passname == "bwd"
        if family == "splash":
            return splash_time_s(s, bwd, self.bf16_peak, self.chip.mxu_dim, cal.TPU_SPLASH_VS_GEMM,
                                 cal.TPU_GEMM_E_MAX, cal.TPU_GEMM_T_RAMP_S)
        t = attention_time_s(s, bwd, self._flash_params(family, passname), self.bf16_peak,
                             self.sms, self.hbm_Bps)
        if family == "flex" and s.sinks:
            # the sink rescale around the kernel, eager (sim.calibration.FLEX_SINK_BYTES_PER_ELEMENT)
            out = s.batch * s.heads * s.seq_q * s.head_dim
            t += self.memory_s(cal.FLEX_SINK_BYTES_PER_ELEMENT[passname] * out,
                               "act-bwd" if bwd else "act")
        return t

    def _unfused_attention_s(self, s: AttentionShape, passname: str) -> float:
        """Scores through HBM: batched GEMMs over every (query, key) pair (a causal mask saves no
        matmul work here) and a softmax that reads and writes the b h s_q s_k scores in bf16."""
        bh, q, k, d = s.batch * s.heads, s.seq_q, s.seq_k, s.head_dim
        scores = 2.0 * bh * q * k
        if passname in ("fwd", "recompute"):
            return (self.gemm_s(q, k, d, batch=bh) + self.gemm_s(q, d, k, batch=bh)
                    + self.memory_s(2 * scores, "softmax"))
        return (self.gemm_s(k, d, q, batch=bh) + self.gemm_s(q, k, d, batch=bh)
                + self.gemm_s(q, d, k, batch=bh) + self.gemm_s(k, d, q, batch=bh)
                + self.memory_s(3 * scores, "softmax-bwd"))

    # ------------------------------------------------------------------ ops
    def op_time_s(self, op: Op) -> float:
        """GPU (or TPU) time of one op, memoised; the stack's efficiency applied."""
        t = self._memo.get(op)
        if t is None:
            t = self._memo[op] = self._op_time_s(op) / self.stack_efficiency
        return t

    def _op_time_s(self, op: Op) -> float:
        if op.kind == "memory":
            return self.memory_s(op.bytes, op.cls)
        if op.kind == "attention":
            assert op.attn is not None, op
            return self.attention_s(op.attn, op.cls)
        m, n, k = op.shape
        recipe = self.recipe
        grouped = op.batch > 1 and op.cls == "linear"   # experts: one grouped kernel (Op.batch)
        if recipe is None or op.cls != "linear":
            return self.gemm_s(m, n, k, batch=op.batch, grouped=grouped, uneven=op.uneven)
        low = self.gemm_s(m, n, k, batch=op.batch, dtype=recipe.name, grouped=grouped, uneven=op.uneven)
        quantized = self._quantized_elements(op)
        if quantized:               # a fused quantize kernel, whatever the stack's elementwise mode
            per_element = recipe.quantize_B(self.chip)
            if grouped and recipe.per_tensor:
                # Per-tensor current scaling of each expert's rows apart: TE quantizes a grouped
                # input one split at a time (no multi-tensor kernel but for delayed scaling:
                # transformer_engine/pytorch/csrc/extensions/cast.cpp, split quantize), each an
                # amax pass over the BF16 rows before the cast (csrc/quantizer.cpp, current
                # scaling), which no producing kernel fused for the split (TE d0067d0).
                per_element += 2.0
            fraction = self._memory_fraction("quantize") if self.gpu else cal.TPU_MEMORY_FRACTION
            low += memory_time_s(per_element * quantized, self.hbm_Bps, fraction)
        return low

    def _quantized_elements(self, op: Op) -> float:
        """Elements a low-precision linear GEMM quantizes first (``sim.precision``): the forward
        its input (m x k), the dgrad the output gradient (m x k: tokens x outputs); the wgrad reads
        the copies those wrote, unless the stack kept the BF16 input (torchao), which the wgrad
        quantizes again (its m x k: inputs x tokens). Weights are quantized once a step and
        cached across micro-batches (not charged: a few milliseconds a step), except under a
        ``per_dot`` recipe (int8), where each dot quantizes its second operand too (k x n: the
        weight in the forward and dgrad, the output gradient in the wgrad)."""
        m, n, k = op.shape
        if self.recipe is not None and self.recipe.per_dot:
            return float(m * k + k * n) * op.batch
        if op.name.endswith("-wgrad") and self.profile.quantized_saves:
            return 0.0
        return float(m) * k * op.batch

    def stream_time_s(self, ops: Iterable[Op]) -> float:
        """A stretch of kernels on one stream: the sum of their times, or the host's time to issue
        them when that is longer (kernels shorter than the launch cost)."""
        by_id, seen = self._by_id, []
        for o in ops:
            e = by_id.get(id(o))
            if e is None or e[0] is not o:
                if len(by_id) >= 200_000:                 # each entry holds its op alive
                    by_id.clear()
                e = by_id[id(o)] = (o, self.op_time_s(o), self.kernels(o))
            seen.append(e)
        return max(sum(e[1] for e in seen), sum(e[2] for e in seen) * self.profile.host_kernel_s)

    def kernels(self, op: Op) -> int:
        """Kernel launches one op takes: an unfused attention pass is its GEMMs and a softmax
        (3 forward, 5 backward), a flash kernel's recompute none, a low-precision linear its
        quantization (where it has one) and GEMM, MoE experts one such set per expert where the
        stack issues them apart (``SoftwareProfile.expert_gemm_per_expert``)."""
        if op.kind == "attention":
            if self.profile.attention == "xla":
                return 5 if op.cls == "bwd" else 3
            return 0 if op.cls == "recompute" else 1
        if op.kind != "gemm" or op.cls != "linear":
            return 1
        launches = 1
        if self.recipe is not None and self._quantized_elements(op):
            # the quantization, and per-tensor scaling's amax of each expert's split apart
            launches = 3 if op.batch > 1 and self.recipe.per_tensor else 2
        if op.batch > 1 and self.profile.expert_gemm_per_expert:
            # Transformer Engine's GroupedLinear: one cuBLAS GEMM per local expert, issued by the
            # host round-robin over 4 streams (nvte_multi_stream_cublas_gemm, TE common/gemm/
            # cublaslt_gemm.cu), each expert's split quantized apart
            launches *= op.batch
        return launches

    def optimizer_s(self, nbytes: float) -> float:
        """The optimizer step over *nbytes* of parameter state at its implementation's rate."""
        if not self.gpu:
            return memory_time_s(nbytes, self.hbm_Bps, cal.TPU_MEMORY_FRACTION)
        fitted = self.fit.optimizer_fraction.get(self.profile.optimizer) if self.fit else None
        fraction = cal.OPTIMIZER_FRACTION[self.profile.optimizer] if fitted is None else fitted
        return memory_time_s(nbytes, self.hbm_Bps, fraction)
