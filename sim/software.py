"""Software stacks as named profiles: which kernels a framework runs and what it overlaps.

The scenario's ``software:`` section names a ``framework`` (default: ``megatron-te`` on NVIDIA,
``maxtext`` on TPU) and may override its ``attention`` kernel. A profile decides, for the compute
model and the step plan:

- ``attention``: the kernel family (``cudnn``, ``flash-attention-2``, ``flash-attention-3``, ``xla``
  (XLA's dot-product attention: score matrices through HBM, as eager PyTorch's math path and
  Megatron's fused softmax also do), ``splash`` (Pallas splash attention on TPU), ``triton``
  (the Triton FlashAttention kernel llm-foundry shipped before FlashAttention-2));
- ``elementwise``: ``eager`` (one PyTorch kernel per op, at the bandwidths measured for them),
  ``partial`` (Megatron/Apex fusions: LayerNorm, bias-GeLU, bias-dropout-add; the rest eager) or
  ``fused`` (every norm, activation, RoPE and residual streams its tensors once: Transformer
  Engine, torch.compile, XLA);
- ``fp8_linear``: under ``precision: fp8`` only the linear layers' GEMMs run in FP8, forward and
  backward (Transformer Engine's Linear/LayerNormLinear/LayerNormMLP; torchao Float8Linear);
  attention, softmax, norms and the output head stay bf16. A profile without it runs no FP8 GEMM.
- ``tp_comm_overlap``: sequence-parallel all-gathers and reduce-scatters pipelined with the GEMMs
  that consume or produce them (Transformer Engine userbuffers, Megatron ``--tp-comm-overlap``);
- ``param_gather_overlap``: the ZeRO-1/2 weight all-gather after the optimizer overlapped with the
  next step's forward (Megatron ``--overlap-param-gather``);
- ``optimizer``: ``adamw_fused`` (one multi-tensor kernel: Apex/TE FusedAdam, torch fused=True) or
  ``adamw_foreach`` (torch.optim.AdamW's default);
- ``host_kernel_s``: CPU time to issue one kernel; a stretch of compute takes at least that per
  kernel (the host runs ahead of the GPU and only shows when kernels are shorter than it).

Sources for each framework fact are next to its profile below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import ConfigError
from .hardware import Chip

__all__ = ["SoftwareProfile", "FRAMEWORKS", "ATTENTION_KERNELS", "resolve_software", "default_framework"]

ATTENTION_KERNELS = ("cudnn", "flash-attention-2", "flash-attention-3", "xla", "splash", "triton")
ELEMENTWISE = ("eager", "partial", "fused")


@dataclass(frozen=True, slots=True)
class SoftwareProfile:
    """A framework as the compute model and the step plan see it (module docstring)."""

    framework: str
    attention: str
    elementwise: str
    fp8_linear: bool
    tp_comm_overlap: bool
    param_gather_overlap: bool
    optimizer: str
    host_kernel_s: float

    def describe(self) -> dict[str, object]:
        """Plain JSON fields (for ``--json`` and the run table)."""
        return {"framework": self.framework, "attention": self.attention,
                "elementwise": self.elementwise, "fp8_linear": self.fp8_linear,
                "tp_comm_overlap": self.tp_comm_overlap, "optimizer": self.optimizer}


# Host time per kernel launch (assumed, order of magnitude): a PyTorch eager op goes through Python
# and the dispatcher (~10 us); Megatron/TE and torch.compile'd graphs issue fewer, larger launches
# (~5 us, ~3 us); XLA runs one compiled program per step (no per-kernel host work).
_EAGER_HOST_S, _TE_HOST_S, _COMPILED_HOST_S = 10e-6, 5e-6, 3e-6

# "auto" attention: resolved per chip by _auto_attention.
FRAMEWORKS: dict[str, SoftwareProfile] = {p.framework: p for p in (
    # Megatron-LM / NeMo with Transformer Engine: TE DotProductAttention picks cuDNN's fused
    # attention on Hopper and newer, FlashAttention on Ampere (TE docs/envvars.rst); fused norms,
    # SwiGLU, RoPE and bias-dropout-add; FP8 in te.Linear-family modules only (the output layer is
    # Megatron's own ColumnParallelLinear, megatron/core/models/gpt/gpt_model.py; FP8 attention is
    # off by default, TE recipe fp8_dpa=False); --tp-comm-overlap and --overlap-param-gather in
    # NeMo's recipes; TE/Apex FusedAdam (megatron/core/optimizer).
    SoftwareProfile("megatron-te", "auto", "fused", True, True, True, "adamw_fused", _TE_HOST_S),
    # Megatron-LM before Transformer Engine (2020-2022 papers): attention through Megatron's fused
    # scale-mask-softmax between two batched GEMMs (--use-flash-attn came later and is off by
    # default); Apex fused LayerNorm, bias-GeLU and bias-dropout-add fusions; Apex FusedAdam.
    SoftwareProfile("megatron", "xla", "partial", False, False, False, "adamw_fused", _TE_HOST_S),
    # Megatron-DeepSpeed (BLOOM, vTrain's runs): Megatron's kernels as above, DeepSpeed's
    # pipeline and ZeRO; --use-flash-attn is off by default (megatron/arguments.py).
    SoftwareProfile("deepspeed", "xla", "partial", False, False, False, "adamw_fused", _TE_HOST_S),
    # Plain PyTorch: torch.nn.functional.scaled_dot_product_attention prefers cuDNN on sm90/sm100
    # when cuDNN > 9.15 (PyTorch >= 2.9, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    # check_prefer_cudnn_attention), FlashAttention-2 first otherwise (Ampere); one kernel per
    # elementwise op; torch.optim.AdamW defaults to foreach (pytorch/pytorch#95415); torchao
    # Float8Linear for FP8 linears.
    SoftwareProfile("pytorch-eager", "auto", "eager", True, False, False, "adamw_foreach",
                    _EAGER_HOST_S),
    # torch.compile: Inductor fuses the elementwise ops around the GEMMs and SDPA; same kernels
    # for matmuls and attention.
    SoftwareProfile("torch-compile", "auto", "fused", True, False, False, "adamw_foreach",
                    _COMPILED_HOST_S),
    # FSDP2 as torchtitan runs it: eager modules, SDPA attention, fused AdamW by default
    # (pytorch/torchtitan#881), Float8Linear for FP8; prefetching of the next layer's weights is
    # in the engine for every ZeRO-3 run.
    SoftwareProfile("pytorch-fsdp", "auto", "eager", True, False, False, "adamw_fused",
                    _EAGER_HOST_S),
    # MosaicML llm-foundry (MPT): eager elementwise ops, FSDP, Transformer Engine linears under
    # amp_fp8. Its published benchmark tables (scripts/train/benchmarking/README.md, "TODO: Update
    # tables with torch 2.0") predate FlashAttention-2: the MPT yamls ran attn_impl: triton. The
    # current default is attn_impl "flash" (llmfoundry/models/utils/config_defaults.py):
    # software.attention: flash-attention-2 for a run on today's llm-foundry.
    SoftwareProfile("llm-foundry", "triton", "eager", True, False, False,
                    "adamw_foreach", _EAGER_HOST_S),
    # MaxText (JAX/XLA): attention "flash" = Pallas splash attention on TPU, "cudnn_flash_te" on
    # GPU (MaxText attention docs; layers/attention_op.py); XLA fuses elementwise work. Its TPU
    # recipes run XLA's asynchronous collectives overlapped with compute (LIBTPU_INIT_ARGS
    # --xla_tpu_enable_async_collective_fusion=true --xla_tpu_overlap_compute_collective_tc=true
    # --xla_enable_async_all_gather=true in MaxText's configs/v5p/*.sh and the tpu-recipes), so
    # tensor-parallel all-gathers and reduce-scatters hide behind the matmuls next to them.
    SoftwareProfile("maxtext", "auto", "fused", True, True, False, "adamw_fused", 0.0),
    # Paxml/Praxis (JAX/XLA): dot-product attention compiled by XLA (scores through HBM).
    SoftwareProfile("paxml", "xla", "fused", True, False, False, "adamw_fused", 0.0),
)}


def default_framework(chip: Chip) -> str:
    """``megatron-te`` on NVIDIA GPUs, ``maxtext`` on TPUs."""
    return "megatron-te" if chip.vendor == "nvidia" else "maxtext"


def _auto_attention(framework: str, chip: Chip) -> str:
    if chip.vendor != "nvidia":
        return "splash"
    return "flash-attention-2" if chip.arch == "ampere" else "cudnn"


def _check_attention(attention: str, chip: Chip, where: str) -> None:
    gpu = chip.vendor == "nvidia"
    if gpu and attention == "splash":
        raise ConfigError(f"{where}: 'splash' is a TPU (Pallas) kernel, not one {chip.name} can run; "
                          "valid on GPUs: cudnn, flash-attention-2, flash-attention-3, xla, triton")
    if not gpu and attention in ("cudnn", "flash-attention-2", "flash-attention-3", "triton"):
        raise ConfigError(f"{where}: {attention!r} is a CUDA kernel, not one {chip.name} can run; "
                          "valid on TPUs: splash, xla")
    if attention == "flash-attention-3" and chip.arch != "hopper":
        raise ConfigError(f"{where}: flash-attention-3 is a Hopper kernel (wgmma, TMA; Shah et al. "
                          f"2024); {chip.name} is {chip.arch.capitalize()}; valid: cudnn, "
                          "flash-attention-2, xla, triton")


def resolve_software(framework: str | None, attention: str | None, chip: Chip,
                     where: str = "software") -> SoftwareProfile:
    """The profile of *framework* on *chip*, with an *attention* override; ``ConfigError`` naming
    the field, the value and the valid choices for anything the chip cannot run."""
    name = default_framework(chip) if framework is None else framework
    if name not in FRAMEWORKS:
        raise ConfigError(f"{where}.framework: unknown framework {name!r}; valid: "
                          f"{', '.join(FRAMEWORKS)}")
    profile = FRAMEWORKS[name]
    if name in ("megatron-te", "megatron", "deepspeed", "pytorch-eager", "torch-compile",
                "pytorch-fsdp", "llm-foundry") and chip.vendor != "nvidia":
        raise ConfigError(f"{where}.framework: {name!r} runs on NVIDIA GPUs, not {chip.name}; "
                          "valid on TPUs: maxtext, paxml")
    if attention is not None:
        if attention not in ATTENTION_KERNELS:
            raise ConfigError(f"{where}.attention: unknown attention kernel {attention!r}; valid: "
                              f"{', '.join(ATTENTION_KERNELS)}")
        _check_attention(attention, chip, f"{where}.attention")
        return replace(profile, attention=attention)
    if profile.attention == "auto":
        return replace(profile, attention=_auto_attention(name, chip))
    _check_attention(profile.attention, chip, f"{where}.framework ({name})")
    return profile
