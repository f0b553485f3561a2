"""Software stacks as named profiles: every fact about a framework that the simulator uses.

The scenario's ``software:`` section names a ``framework`` (default: ``megatron-te`` on NVIDIA,
``maxtext`` on TPU) and may override its ``attention`` kernel. A profile decides, for the compute
model, the memory model and the step plan:

- ``attention``: the kernel family (``cudnn``, ``flash-attention-2``, ``flash-attention-3``,
  ``flash-attention-4`` (CuTe DSL, Blackwell only), ``xla``
  (XLA's dot-product attention: score matrices through HBM, as eager PyTorch's math path and
  Megatron's fused softmax also do), ``splash`` (Pallas splash attention on TPU), ``triton``
  (the Triton FlashAttention kernel llm-foundry shipped before FlashAttention-2), ``flex``
  (PyTorch FlexAttention under torch.compile: NeMo AutoModel's gpt-oss attention));
- ``elementwise``: ``eager`` (one PyTorch kernel per op, at the bandwidths measured for them),
  ``partial`` (Megatron/Apex fusions: LayerNorm, bias-GeLU, bias-dropout-add; the rest eager) or
  ``fused`` (every norm, activation, RoPE and residual streams its tensors once: Transformer
  Engine, torch.compile, XLA);
- ``low_precision``: the low-precision formats (``sim.precision``: ``fp8``, ``mxfp8``, ``nvfp4``)
  the stack's linear layers run, forward and backward (Transformer Engine's
  Linear/LayerNormLinear/LayerNormMLP; torchao Float8Linear / MXLinear); attention, softmax, norms
  and the output head stay bf16. A profile with none runs no low-precision GEMM (``fp8_linear``:
  whether it runs FP8);
- ``quantized_saves``: a linear layer keeps its quantized input for the backward instead of the
  BF16 one, and caches quantized weights for the step (Transformer Engine); otherwise it keeps the
  BF16 input and quantizes again in the backward (torchao's float8 / MX training);
- ``quantized_params``: the formats whose linear weights the stack holds as quantized parameters,
  with no BF16 model copy beside the optimizer's fp32 master (Megatron ``--fp8-param-gather``);
- ``tp_comm_overlap``: sequence-parallel all-gathers and reduce-scatters pipelined with the GEMMs
  that consume or produce them (Transformer Engine userbuffers, Megatron ``--tp-comm-overlap``);
- ``tp_overlap_forward``: that overlap holds in the forward pass and its recomputation too; without
  it (a stack with no collective matmul) a TP collective there feeds or drains the GEMM beside it
  and waits, and only the backward's hide, behind the weight-gradient GEMMs they do not feed;
- ``param_gather_overlap``: the ZeRO-1/2 weight all-gather after the optimizer overlapped with the
  next step's forward (Megatron ``--overlap-param-gather``);
- ``optimizer``: ``adamw_fused`` (one multi-tensor kernel: Apex/TE FusedAdam, torch fused=True) or
  ``adamw_foreach`` (torch.optim.AdamW's default);
- ``host_kernel_s``: CPU time to issue one kernel; a stretch of compute takes at least that per
  kernel (the host runs ahead of the GPU and only shows when kernels are shorter than it);
- ``runs_on_tpu``: the stack runs on TPUs too (JAX/XLA); every stack runs on NVIDIA GPUs;
- ``eager_autograd``: the activations are eager PyTorch autograd's, which keeps every op's saved
  inputs: SwiGLU's ``silu(w1 x)`` on top of the set the fused stacks keep
  (``sim.workload.activations``);
- ``sdpa_output_copy``: attention runs through SDPA in [b, heads, s, d] layout, so the attention
  output is kept twice (SDPA's ``out`` and the contiguous copy the out-projection saves);
- ``selective_recompute``: what ``training.recompute: selective`` keeps (``SELECTIVE_RECOMPUTE``):
  ``scores`` (Korthikanti et al. 2022's selective recomputation: everything but the attention
  scores), ``op-sac`` (torchtitan's op-level selective activation checkpointing) or
  ``minimal_flash`` (MaxText's remat policy of that name);
- ``offload_overlap``: offloaded activations are copied on their own stream, behind the layer's
  compute; otherwise the copy sits on the compute stream;
- ``optimizer_offload``: the stack can keep the optimizer state in host memory and stream it
  through the chip for the update (``training.optimizer_offload``: MaxText's
  ``optimizer_memory_host_offload``);
- ``moe_capacity_einsum``: a token-dropping MoE (``model.moe.capacity_factor``) dispatches its
  tokens to expert slots and combines them back by einsum with one-hot masks, matmuls rather than a
  permutation (MaxText's ``dense_matmul`` path);
- ``grouped_tile_rows``: on a TPU the dropless experts' grouped GEMM (MaxText's Pallas megablox
  kernel, base.yml ``wi_tile_fwd_batch_seq`` 512 and the other tiles alike) runs whole tiles of
  that many rows, so each group that starts inside a tile costs one more tile
  (``make_group_metadata``: up to m / tm + groups - 1 tiles);
- ``slice_reduce_bytes``: how hybrid sharding's replica all-reduce (across TPU slices over the
  DCN) runs: 0, layer by layer on the data-parallel stream behind the backward pass, in bf16
  (as the GPU stacks' per-bucket reductions); otherwise exposed: once, on the step's whole
  gradient at this many bytes a parameter, after the backward pass and before the optimizer, plus
  each layer's DCN ring steps (``sim.calibration.TPU_DCN_LAYER_STEP_S``).

Sources for each framework fact are next to its profile below. Adding a framework is one entry of
``FRAMEWORKS``; no other module names one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import ConfigError
from .hardware import Chip

__all__ = ["SoftwareProfile", "FRAMEWORKS", "ATTENTION_KERNELS", "MOE_DISPATCHERS", "resolve_software",
           "default_framework"]

ATTENTION_KERNELS = ("cudnn", "flash-attention-2", "flash-attention-3", "flash-attention-4", "xla", "splash",
                     "triton", "flex")
ELEMENTWISE = ("eager", "partial", "fused")
OPTIMIZERS = ("adamw_fused", "adamw_foreach")
SELECTIVE_RECOMPUTE = ("scores", "op-sac", "minimal_flash")


@dataclass(frozen=True, slots=True)
class SoftwareProfile:
    """A framework as the compute model, the memory model and the step plan see it (module
    docstring). ``attention`` is ``auto`` in ``FRAMEWORKS`` where the kernel depends on the chip;
    ``resolve_software`` returns it resolved."""

    framework: str
    attention: str                 # ATTENTION_KERNELS, or "auto"
    elementwise: str               # ELEMENTWISE
    low_precision: tuple[str, ...]
    quantized_saves: bool
    tp_comm_overlap: bool
    param_gather_overlap: bool
    optimizer: str                 # OPTIMIZERS
    host_kernel_s: float
    runs_on_tpu: bool
    eager_autograd: bool
    sdpa_output_copy: bool
    selective_recompute: str       # SELECTIVE_RECOMPUTE
    offload_overlap: bool
    quantized_params: tuple[str, ...] = ()
    moe_dispatcher: str = "alltoall"   # MOE_DISPATCHERS: how tokens reach their experts
    ep_comm_overlap: bool = False      # expert-parallel dispatch/combine hidden behind the other
                                       # micro-batch's compute (Megatron's combined 1F1B)
    kernel_tables: str = ""            # software.kernel_tables: a folder of the user's own kernel
                                       # tables the compute model is fitted on ("": the bundled fits)
    expert_gemm_per_expert: bool = False  # the host issues one GEMM per local expert (Transformer
                                          # Engine's GroupedLinear), not one grouped kernel
    slice_reduce_bytes: int = 0        # 0: replica all-reduce per layer, overlapped; else once
                                       # after the backward, this many bytes a parameter
    tp_overlap_forward: bool = True    # TP overlap in the forward and recomputation too (else:
                                       # the backward's only)
    optimizer_offload: bool = False    # training.optimizer_offload runs: the state in host memory,
                                       # streamed through the chip for the update
    moe_capacity_einsum: bool = False  # a token-dropping MoE (capacity_factor) dispatches and
                                       # combines by einsum with one-hot masks (sim/workload/blocks.py)
    grouped_tile_rows: int = 0         # on TPU, its grouped expert GEMM computes whole tiles of this
                                       # many rows, a partial one where a group starts mid-tile

    def __post_init__(self) -> None:
        for value, valid in ((self.attention, ATTENTION_KERNELS + ("auto",)),
                             (self.elementwise, ELEMENTWISE), (self.optimizer, OPTIMIZERS),
                             (self.selective_recompute, SELECTIVE_RECOMPUTE),
                             (self.moe_dispatcher, MOE_DISPATCHERS)):
            if value not in valid:
                raise ValueError(f"software profile {self.framework}: {value!r} is not one of {valid}")

    @property
    def fp8_linear(self) -> bool:
        """The stack's linear layers run FP8 (per-tensor scaling)."""
        return "fp8" in self.low_precision

    def describe(self) -> dict[str, object]:
        """Plain JSON fields (for ``--json`` and the run table)."""
        return {"framework": self.framework, "attention": self.attention,
                "elementwise": self.elementwise, "fp8_linear": self.fp8_linear,
                "tp_comm_overlap": self.tp_comm_overlap, "optimizer": self.optimizer,
                **({"tp_comm_overlap_passes": "backward"}
                   if self.tp_comm_overlap and not self.tp_overlap_forward else {}),
                **({"kernel_tables": self.kernel_tables} if self.kernel_tables else {})}


# Token dispatchers (Megatron-Core --moe-token-dispatcher-type alltoall | allgather | flex, the
# last with DeepEP's fused kernels): sim/workload/blocks.py.
MOE_DISPATCHERS = ("alltoall", "allgather", "deepep")

# Host time per kernel launch (assumed, order of magnitude): a PyTorch eager op goes through Python
# and the dispatcher (~10 us); Megatron/TE and torch.compile'd graphs issue fewer, larger launches
# (~5 us, ~3 us); XLA runs one compiled program per step (no per-kernel host work).
_EAGER_HOST_S, _TE_HOST_S, _COMPILED_HOST_S = 10e-6, 5e-6, 3e-6

# Facts shared by several profiles below, with their sources:
# - Activations without eager autograd: Korthikanti et al. 2022 (section 4.1) without dropout;
#   Megatron's fusions keep that set, and so does torch.compile: Inductor's min-cut partitioner
#   recomputes pointwise ops in the backward instead of saving them
#   (torch/_functorch/partitioners.py ``min_cut_rematerialization_partition``).
# - selective_recompute "op-sac": torchtitan's ``activation_checkpoint.mode: selective``,
#   ``selective_ac_option: op`` (torchtitan parallelize_llama.py ``_custom_policy``), the selective
#   recomputation of the PyTorch-native stacks.
# - offload_overlap: XLA schedules the device <-> pinned_host copies of
#   jax.checkpoint_policies.save_and_offload_* as asynchronous transfers (MaxText, Paxml);
#   Transformer Engine's CPU offload context (transformer_engine.pytorch.get_cpu_offload_context,
#   Megatron --cpu-offloading) copies on a side stream; elsewhere
#   (torch.autograd.graph.save_on_cpu) the copy sits on the compute stream.
FRAMEWORKS: dict[str, SoftwareProfile] = {p.framework: p for p in (
    # Megatron-LM / NeMo with Transformer Engine (EP overlap: Megatron-Core's
    # --overlap-moe-expert-parallel-comm, the combined-1F1B schedule that runs one micro-batch's
    # dispatch and combine under another's compute, which its MoE performance recipes turn on):
    # TE DotProductAttention picks cuDNN's fused
    # attention on Hopper and newer, FlashAttention on Ampere (TE docs/envvars.rst); fused norms,
    # SwiGLU, RoPE and bias-dropout-add; FP8 in te.Linear-family modules only (the output layer is
    # Megatron's own ColumnParallelLinear, megatron/core/models/gpt/gpt_model.py; FP8 attention is
    # off by default, TE recipe fp8_dpa=False); --tp-comm-overlap and --overlap-param-gather in
    # NeMo's recipes; TE/Apex FusedAdam (megatron/core/optimizer); TE's CPU offload context.
    # Low precision: TE's recipes DelayedScaling / Float8CurrentScaling (fp8), MXFP8BlockScaling
    # and NVFP4BlockScaling (TE 2.x API docs, transformer_engine.common.recipe); te.Linear saves
    # its quantized input for the wgrad and caches quantized weights across micro-batches.
    # Megatron-Bridge's FP8 (delayed, current scaling) and MXFP8 recipes set fp8_param_gather:
    # the weights are FP8 parameters, no BF16 copy; its NVFP4 recipe has no FP4 parameters
    # ("fp4_param ... not supported for now", src/megatron/bridge/training/mixed_precision.py).
    SoftwareProfile(framework="megatron-te", attention="auto", elementwise="fused",
                    low_precision=("fp8", "mxfp8", "nvfp4"), quantized_saves=True,
                    tp_comm_overlap=True, param_gather_overlap=True,
                    optimizer="adamw_fused", host_kernel_s=_TE_HOST_S, runs_on_tpu=False,
                    eager_autograd=False, sdpa_output_copy=False, selective_recompute="scores",
                    offload_overlap=True, quantized_params=("fp8", "mxfp8"),
                    ep_comm_overlap=True, expert_gemm_per_expert=True),
    # Megatron-LM before Transformer Engine (2020-2022 papers): attention through Megatron's fused
    # scale-mask-softmax between two batched GEMMs (--use-flash-attn came later and is off by
    # default); Apex fused LayerNorm, bias-GeLU and bias-dropout-add fusions; Apex FusedAdam.
    SoftwareProfile(framework="megatron", attention="xla", elementwise="partial",
                    low_precision=(), quantized_saves=False,
                    tp_comm_overlap=False, param_gather_overlap=False,
                    optimizer="adamw_fused", host_kernel_s=_TE_HOST_S, runs_on_tpu=False,
                    eager_autograd=False, sdpa_output_copy=False, selective_recompute="scores",
                    offload_overlap=False),
    # Megatron-DeepSpeed (BLOOM, vTrain's runs): Megatron's kernels as above, DeepSpeed's
    # pipeline and ZeRO; --use-flash-attn is off by default (megatron/arguments.py).
    SoftwareProfile(framework="deepspeed", attention="xla", elementwise="partial",
                    low_precision=(), quantized_saves=False,
                    tp_comm_overlap=False, param_gather_overlap=False,
                    optimizer="adamw_fused", host_kernel_s=_TE_HOST_S, runs_on_tpu=False,
                    eager_autograd=False, sdpa_output_copy=False, selective_recompute="scores",
                    offload_overlap=False),
    # Plain PyTorch: torch.nn.functional.scaled_dot_product_attention prefers cuDNN on sm90/sm100
    # when cuDNN > 9.15 (PyTorch >= 2.9, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    # check_prefer_cudnn_attention), FlashAttention-2 first otherwise (Ampere); one kernel per
    # elementwise op; torch.optim.AdamW defaults to foreach (pytorch/pytorch#95415); torchao
    # Float8Linear for FP8 linears. Eager autograd; SDPA in [b, heads, s, d] layout as torchtitan
    # writes it (torchtitan/models/llama/model.py ``Attention.forward``: SDPA's output, then its
    # ``transpose(1, 2).contiguous()`` copy for the out-projection).
    # Low precision through torchao: Float8Linear (fp8) and MX training (mxfp8, torchtitan's
    # ``mx`` model converter); NVFP4 training is not released there (pytorch/ao#3293 tracks it).
    # torchao's autograd functions save the high-precision input and quantize it again in the
    # backward, so no quantized copy is kept (the same for the two profiles below).
    SoftwareProfile(framework="pytorch-eager", attention="auto", elementwise="eager",
                    low_precision=("fp8", "mxfp8"), quantized_saves=False,
                    tp_comm_overlap=False, param_gather_overlap=False,
                    optimizer="adamw_foreach", host_kernel_s=_EAGER_HOST_S, runs_on_tpu=False,
                    eager_autograd=True, sdpa_output_copy=True, selective_recompute="op-sac",
                    offload_overlap=False),
    # torch.compile: Inductor fuses the elementwise ops around the GEMMs and SDPA; same kernels
    # for matmuls and attention; its min-cut partitioner leaves the fused stacks' activations.
    SoftwareProfile(framework="torch-compile", attention="auto", elementwise="fused",
                    low_precision=("fp8", "mxfp8"), quantized_saves=False,
                    tp_comm_overlap=False, param_gather_overlap=False,
                    optimizer="adamw_foreach", host_kernel_s=_COMPILED_HOST_S, runs_on_tpu=False,
                    eager_autograd=False, sdpa_output_copy=False, selective_recompute="op-sac",
                    offload_overlap=False),
    # FSDP2 as torchtitan runs it: eager modules, SDPA attention (its output copied as in
    # pytorch-eager), fused AdamW by default (pytorch/torchtitan#881), Float8Linear for FP8;
    # prefetching of the next layer's weights is in the engine for every ZeRO-3 run.
    SoftwareProfile(framework="pytorch-fsdp", attention="auto", elementwise="eager",
                    low_precision=("fp8", "mxfp8"), quantized_saves=False,
                    tp_comm_overlap=False, param_gather_overlap=False,
                    optimizer="adamw_fused", host_kernel_s=_EAGER_HOST_S, runs_on_tpu=False,
                    eager_autograd=True, sdpa_output_copy=True, selective_recompute="op-sac",
                    offload_overlap=False),
    # MosaicML llm-foundry (MPT): eager elementwise ops, FSDP, Transformer Engine linears under
    # amp_fp8. Its published benchmark tables (scripts/train/benchmarking/README.md, "TODO: Update
    # tables with torch 2.0") predate FlashAttention-2: the MPT yamls ran attn_impl: triton. The
    # current default is attn_impl "flash" (llmfoundry/models/utils/config_defaults.py):
    # software.attention: flash-attention-2 for a run on today's llm-foundry. Eager autograd; its
    # flash kernels return [b, s, heads, d], whose reshape to [b, s, h] is a view
    # (llmfoundry/models/layers/attention.py), so no copy of the attention output.
    SoftwareProfile(framework="llm-foundry", attention="triton", elementwise="eager",
                    low_precision=("fp8",), quantized_saves=True,
                    tp_comm_overlap=False, param_gather_overlap=False,
                    optimizer="adamw_foreach", host_kernel_s=_EAGER_HOST_S, runs_on_tpu=False,
                    eager_autograd=True, sdpa_output_copy=False, selective_recompute="op-sac",
                    offload_overlap=False),
    # MaxText (JAX/XLA): attention "flash" = Pallas splash attention on TPU, "cudnn_flash_te" on
    # GPU (MaxText attention docs; layers/attention_op.py); XLA fuses elementwise work. Its TPU
    # recipes run XLA's asynchronous collectives overlapped with compute (LIBTPU_INIT_ARGS
    # --xla_tpu_enable_async_collective_fusion=true --xla_tpu_overlap_compute_collective_tc=true
    # --xla_enable_async_all_gather=true in MaxText's configs/v5p/*.sh and the tpu-recipes), but
    # no collective matmul (no windowed-einsum flag there): an asynchronous collective hides only
    # behind compute that does not wait for it. A tensor-parallel all-gather feeds the matmul
    # after it and a reduce-scatter drains the one before it ("we can't begin computing the matrix
    # multiplication while the all-gather is running", JAX's collective matmul guide), so in the
    # forward and its recomputation they wait; in the backward the data-gradient collectives run
    # beside the weight-gradient matmuls, which do not need them (tp_overlap_forward=False;
    # sim/tp_overlap.py). Its activations are sharded over the tensor axis between layers
    # (base.yml @e64f681 logical_axis_rules: activation_embed -> tensor), so each layer gathers
    # and scatters them.
    # Selective recomputation is its minimal_flash remat policy, the one its GPU configs run.
    # Multislice (DCN data parallelism across slices): the replica all-reduce runs on the step's
    # gradients, which carry the weights' dtype (base.yml weight_dtype: float32 at e64f681: 4
    # bytes a parameter), after the backward pass. Not hidden: at the DCN's per-chip rate that
    # all-reduce takes well under the backward pass (0.3-0.6 s against ~10 s on MaxText's v5e
    # 64B runs), yet the measured step grows with the slice count at fixed work per chip
    # (configs/v5e/README.md: 13.5 s on 1 slice, 14.2, 14.5, 14.7, 15.1, 16.1 s on 2-32),
    # which a reduction overlapped with the backward pass cannot do. Its growth follows the layer
    # count (MaxText reduces layer by layer in the scanned backward), hence a per-layer ring-step
    # term beside the bytes (sim.calibration.TPU_DCN_LAYER_STEP_S).
    SoftwareProfile(framework="maxtext", attention="auto", elementwise="fused",
                    low_precision=("fp8", "int8"), quantized_saves=False,
                    tp_comm_overlap=True, param_gather_overlap=False,
                    optimizer="adamw_fused", host_kernel_s=0.0, runs_on_tpu=True,
                    eager_autograd=False, sdpa_output_copy=False,
                    selective_recompute="minimal_flash", offload_overlap=True,
                    slice_reduce_bytes=4, tp_overlap_forward=False, optimizer_offload=True,
                    moe_capacity_einsum=True, grouped_tile_rows=512),
    # Paxml/Praxis (JAX/XLA): dot-product attention compiled by XLA (scores through HBM).
    SoftwareProfile(framework="paxml", attention="xla", elementwise="fused",
                    low_precision=("fp8",), quantized_saves=False,
                    tp_comm_overlap=False, param_gather_overlap=False,
                    optimizer="adamw_fused", host_kernel_s=0.0, runs_on_tpu=True,
                    eager_autograd=False, sdpa_output_copy=False, selective_recompute="scores",
                    offload_overlap=True),
)}


def default_framework(chip: Chip) -> str:
    """``megatron-te`` on NVIDIA GPUs, ``maxtext`` on TPUs."""
    return "maxtext" if chip.is_tpu else "megatron-te"


def _auto_attention(chip: Chip) -> str:
    if chip.is_tpu:
        return "splash"
    return "flash-attention-2" if chip.arch == "ampere" else "cudnn"


# Kernels only some chips run: the TPU's own, and CUDA kernels written for one architecture.
_TPU_ATTENTION = ("splash", "xla")
_ARCH_ONLY = {"flash-attention-3": "hopper", "flash-attention-4": "blackwell"}


def _runnable(chip: Chip) -> str:
    """The attention kernels *chip* runs, as a message lists them."""
    if chip.is_tpu:
        return ", ".join(_TPU_ATTENTION)
    return ", ".join(k for k in ATTENTION_KERNELS
                     if k != "splash" and _ARCH_ONLY.get(k, chip.arch) == chip.arch)


def _check_attention(attention: str, chip: Chip, where: str) -> None:
    gpu = not chip.is_tpu
    if gpu and attention == "splash":
        raise ConfigError(f"{where}: 'splash' is a TPU (Pallas) kernel, not one {chip.name} can run; "
                          f"valid on GPUs: {_runnable(chip)}")
    if not gpu and attention not in _TPU_ATTENTION:
        raise ConfigError(f"{where}: {attention!r} is a CUDA kernel, not one {chip.name} can run; "
                          f"valid on TPUs: {_runnable(chip)}")
    if attention == "flash-attention-3" and chip.arch != "hopper":
        raise ConfigError(f"{where}: flash-attention-3 is a Hopper kernel (wgmma, TMA; Shah et al. "
                          f"2024); {chip.name} is {chip.arch.capitalize()}; valid: {_runnable(chip)}")
    if attention == "flash-attention-4" and chip.arch != "blackwell":
        raise ConfigError(f"{where}: flash-attention-4 is a Blackwell kernel (tcgen05, TMEM; the "
                          f"CuTe DSL FlashAttention); {chip.name} is {chip.arch.capitalize()}; valid: "
                          f"{_runnable(chip)}")


def resolve_software(framework: str | None, attention: str | None, chip: Chip,
                     where: str = "software") -> SoftwareProfile:
    """The profile of *framework* on *chip*, with an *attention* override; ``ConfigError`` naming
    the field, the value and the valid choices for anything the chip cannot run."""
    name = default_framework(chip) if framework is None else framework
    if name not in FRAMEWORKS:
        raise ConfigError(f"{where}.framework: unknown framework {name!r}; valid: "
                          f"{', '.join(FRAMEWORKS)}")
    profile = FRAMEWORKS[name]
    if chip.is_tpu and not profile.runs_on_tpu:
        on_tpu = [n for n, p in FRAMEWORKS.items() if p.runs_on_tpu]
        raise ConfigError(f"{where}.framework: {name!r} runs on NVIDIA GPUs, not {chip.name}; "
                          f"valid on TPUs: {', '.join(on_tpu)}")
    if attention is not None:
        if attention not in ATTENTION_KERNELS:
            raise ConfigError(f"{where}.attention: unknown attention kernel {attention!r}; valid: "
                              f"{', '.join(ATTENTION_KERNELS)}")
        _check_attention(attention, chip, f"{where}.attention")
        return replace(profile, attention=attention)
    if profile.attention == "auto":
        return replace(profile, attention=_auto_attention(chip))
    _check_attention(profile.attention, chip, f"{where}.framework ({name})")
    return profile
