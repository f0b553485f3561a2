"""Training precisions: what each ``training.precision`` runs on which chip, under which stack.

``bf16`` is mixed precision with BF16 tensor-core GEMMs everywhere. The low-precision formats run
only the linear layers' GEMMs (forward ``fprop``, backward ``dgrad`` and ``wgrad``) in the low
precision; attention, softmax, norms, the router and the output head stay BF16 (Transformer
Engine's ``te.Linear`` family; torchao's ``Float8Linear`` / ``MXLinear``; NVIDIA, "Pretraining
Large Language Models with NVFP4", arXiv 2509.25149, section 4: "only the GEMMs inside linear
layers ... Fprop, Wgrad, Dgrad"):

- ``fp8``: Hopper-style FP8 with one scale per tensor (TE ``DelayedScaling`` /
  ``Float8CurrentScaling``; e4m3 forward, e5m2 gradients). Hopper's FP8 tensor cores take only
  K-major (TN) operands, so each quantized operand is also written transposed for the GEMM that
  reduces over the other dimension (TE's fused cast-transpose); Blackwell's take either layout
  and need one copy (TE skips the transpose on sm100).
- ``mxfp8``: OCP microscaling FP8, e4m3 elements with one e8m0 scale per 32 elements along the
  reduction dimension (TE ``MXFP8BlockScaling``). The blocks run along K, which differs between
  the forward/dgrad and the wgrad GEMM, so every operand is quantized twice (row-wise and
  column-wise), each with its scales: 1 + 1/32 bytes per element. Blackwell tensor cores only
  (block-scaled MMA, ``tcgen05.mma ... block_scale``).
- ``nvfp4``: e2m1 elements with one e4m3 scale per 16 elements plus an fp32 scale per tensor
  (TE ``NVFP4BlockScaling``): 0.5 + 1/16 bytes per element, row-wise and column-wise copies, a
  16x16 random Hadamard transform fused into the wgrad operands' quantization and stochastic
  rounding of gradients (arXiv 2509.25149 section 4; pytorch/ao#3293 lists the same kernels).
  The paper keeps about 16% of the linear layers in BF16 ("selective high-precision layers");
  Megatron does so only with ``--first-last-layers-bf16`` (off by default) and MLPerf Training
  v5.1's NVFP4 configs set none, so every linear layer runs NVFP4 here. Blackwell only, at the
  FP4 peak.

- ``int8``: TPU int8 matmuls as MaxText runs them (Qwix, or legacy AQT: ``quantization: int8``,
  dynamic-range quantization of weights, activations and gradients alike: ``weight_qtype``,
  ``act_qtype`` and ``bwd_qtype`` int8; MaxText docs/reference/core_concepts/quantization.md,
  AI-Hypercomputer/maxtext @e591f30), at the chip's int8 peak; XLA fuses each scale's reduction
  and the cast into one pass. Dynamic-range quantization scales each operand along the dot's own
  contraction axis, so every int8 dot quantizes both its operands when it runs (``per_dot``): the
  weight again in the forward, in its recompute and in the dgrad (scaled along the output axis
  there), nothing cached between passes. Under FSDP the weight is the gathered full matrix, the
  larger operand at a few thousand tokens per chip. TPUs only (the recipe MaxText names for v6e
  and earlier).

Each recipe also says what the stack keeps: the quantized copy of each linear layer's input saved
for the backward in place of the BF16 tensor (TE saves the quantized input its wgrad reads; torchao
saves the high-precision input and quantizes again in the backward), and the quantized weight
copies cached for the step (TE caches them across micro-batches: ``is_first_microbatch``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError
from .hardware import Chip
from .software import FRAMEWORKS, SoftwareProfile

__all__ = ["PRECISIONS", "Recipe", "RECIPES", "active_recipe",
           "check_chip", "check_stack", "precisions_of"]

PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4", "int8")


@dataclass(frozen=True, slots=True)
class Recipe:
    """One low-precision format as a GEMM sees it and as memory holds it.

    ``element_B``: bytes per element of one quantized copy, its scales included; ``copies``: the
    quantized copies of each operand a quantization writes (row-wise, and column-wise or
    transposed where the other GEMM needs it). Its GEMMs run at the chip's peak for its name
    (``Chip.peak_flops``)."""

    name: str
    element_B: float
    copies_hopper: int
    copies_blackwell: int
    per_tensor: bool = False     # one scale per tensor (its amax over the whole tensor first)
    per_dot: bool = False        # every dot quantizes both operands itself (no cached weight copy)

    def copies(self, chip: Chip) -> int:
        """Quantized copies of one operand on *chip* (Hopper needs a transposed one for fp8)."""
        return self.copies_hopper if chip.arch == "hopper" else self.copies_blackwell

    def quantize_B(self, chip: Chip) -> float:
        """HBM bytes one quantization kernel moves per element: the BF16 read and every copy
        written. No separate amax read, even under per-tensor current scaling: Transformer
        Engine takes a tensor's amax in the kernel that produces it (its norm and activation
        kernels and GEMM epilogues), and a block's max in the casting pass. (Charging a full
        read for it made the validation's FP8-CS H100 runs 3 points slower than measured.)"""
        return 2.0 + self.copies(chip) * self.element_B


RECIPES: dict[str, Recipe] = {
    "fp8": Recipe("fp8", element_B=1.0, copies_hopper=2, copies_blackwell=1, per_tensor=True),
    "mxfp8": Recipe("mxfp8", element_B=1.0 + 1.0 / 32, copies_hopper=2, copies_blackwell=2),
    "nvfp4": Recipe("nvfp4", element_B=0.5 + 1.0 / 16, copies_hopper=2, copies_blackwell=2),
    "int8": Recipe("int8", element_B=1.0, copies_hopper=1, copies_blackwell=1, per_dot=True),
}


def active_recipe(precision: str, chip: Chip, software: SoftwareProfile) -> Recipe | None:
    """The recipe a run's linear layers really run: *precision*'s where the stack runs the format
    and the chip's tensor cores run it faster than BF16; None otherwise (an FP8 run on a chip
    whose FP8 peak equals its BF16 one, TPU v5p say, is a BF16 run)."""
    recipe = RECIPES.get(precision)
    if recipe is None or precision not in software.low_precision:
        return None
    if precision not in precisions_of(chip) or chip.peak_flops(precision) <= chip.bf16_flops:
        return None
    return recipe


def precisions_of(chip: Chip) -> tuple[str, ...]:
    """The precisions *chip*'s tensor cores run: FP8 where it has an FP8 peak; the block-scaled
    formats on Blackwell only (Hopper has no block-scaled MMA: MXFP8 there is an emulation, not a
    tensor-core path); NVFP4 where it also has an FP4 peak; int8 on TPUs with an int8 peak."""
    out = ["bf16"]
    if chip.is_tpu and chip.int8_flops is not None:
        out.append("int8")
    if chip.fp8_flops is not None:
        out.append("fp8")
    if chip.arch == "blackwell" and chip.fp8_flops is not None:
        out.append("mxfp8")
    if chip.arch == "blackwell" and chip.fp4_flops is not None:
        out.append("nvfp4")
    return tuple(out)


def check_chip(precision: str, chip: Chip, where: str = "training.precision") -> None:
    """ConfigError (one line: the field, the value, what is valid) for a precision *chip*'s
    tensor cores cannot run."""
    if precision not in PRECISIONS:
        raise ConfigError(f"{where}: unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    valid = precisions_of(chip)
    if precision not in valid:
        why = ("block-scaled formats need Blackwell tensor cores" if precision in ("mxfp8", "nvfp4")
               else "int8 training is a TPU path (MaxText's int8 quantization)"
               if precision == "int8" else "no FP8 tensor-core path")
        raise ConfigError(f"{where}: {precision} is not supported on {chip.name} ({why}); "
                          f"valid on {chip.name}: {', '.join(valid)}")


def check_stack(precision: str, chip: Chip, software: SoftwareProfile,
                where: str = "training.precision") -> None:
    """ConfigError for a low precision the stack's linear layers do not run."""
    if precision == "bf16" or precision in software.low_precision:
        return
    able = [n for n, p in FRAMEWORKS.items() if precision in p.low_precision
            and (p.runs_on_tpu or not chip.is_tpu)]
    names = f"{', '.join(able[:-1])} or {able[-1]}" if len(able) > 1 else "".join(able)
    raise ConfigError(f"{where}: {precision} needs a framework with {precision.upper()} linear "
                      f"layers; {software.framework} has none; use bf16, or "
                      f"software.framework: {names}")
