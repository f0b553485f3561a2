"""Memory per device: weights, gradients, optimizer state, activations, logits, with the source of
each term. Every figure is a model estimate, and refusals say so.

Mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", section 3.1): 2 bytes of bf16 weights and 2
of gradients per parameter, plus the optimizer state: 4 bytes of fp32 master weights
(``training.master_weights``, default true) and two Adam moments of 4 bytes each
(``training.optimizer_state: fp32``) or 2 (``bf16``: e.g. NeMo's ``optim.dtype: bf16``,
Megatron's precision-aware optimizer); the default is ZeRO's 12. ZeRO-1 shards the optimizer
state, ZeRO-2 also the gradients, ZeRO-3 / FSDP also the weights, over the data-parallel ranks;
a routed expert's over the expert-data-parallel ranks that hold it (Megatron-Core's distributed
optimizer shards expert parameters over the expert data-parallel group:
megatron/core/optimizer/__init__.py, the expert parameters' optimizer built on the
intra_expt_dp_group, Megatron-LM d98e8a6).
Activations per layer and micro-batch depend on the software stack and the recompute policy
(sim/workload/activations.py); tensors a remat policy offloads live in host memory (checked
against the catalogue's host memory per chip), not HBM. How many micro-batches' activations a
stage holds at once is its schedule's own peak (``schedules.stage_activation_peak_B``: 1F1B stage
s holds pp - s, interleaving Megatron's warm-up depth, each chunk with its real layers).
The output head's logits (4 b s V / t bytes in fp32, 2 under ``training.logits_dtype: bf16``) are
divided by ``training.vocab_tiling``
(MaxText ``num_vocab_tiling``: the loss computed in that many chunks of the logits).
Under a low-precision recipe a stack that keeps quantized copies (Transformer Engine) also holds
the quantized weights of its linear layers for the step (``weights_quantized``: the recipe's
copies per weight, sim/precision.py; TE caches them across micro-batches), and keeps quantized
linear inputs as activations (sim/workload/activations.py). Where the stack holds those weights
as quantized parameters (``software.quantized_params``: Megatron's fp8_param_gather), their BF16
copy is gone from ``weights``.
``training.optimizer_offload`` (MaxText ``optimizer_memory_host_offload``, maxtext 9e7d1a3 "Optimizer
memory offload": the optimizer state and the fp32 parameters sharded to ``pinned_host``, copied
to the device for the update, the forward and backward running on their bf16 cast) moves the
optimizer state to host memory: ``optimizer`` is 0 on the device and the state counts in
``offloaded_host``. The update brings it back once the activations are freed, so that moment's
peak is weights, gradients and the whole state (``update_peak_B``), checked beside the step's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Scenario
from ..config.remat import LOGIT_BYTES
from ..config.schema import ParallelismConfig
from ..errors import InfeasibleError
from ..units import GiB
from .activations import stage_activation_bytes
from .schedules import stage_activation_peak_B
from .transformer import Workload

__all__ = ["optimizer_step_bytes_per_param", "MemoryBreakdown", "memory_per_chip",
           "optimizer_bytes_per_param"]

# CUDA/XLA context (~0.5 GiB), library workspaces and communication buffers: assumed, not measured.
RUNTIME_RESERVED_B = 2 * GiB


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """The busiest stage's memory per chip, by term (bytes). ``activations_B`` is every layer's
    activations over the micro-batches in flight (``activations_per_microbatch_B`` each);
    ``offloaded_B`` lives in host memory and is not part of ``total_B``."""

    weights_B: float
    gradients_B: float
    optimizer_B: float
    activations_B: float
    reserved_B: float
    logits_B: float = 0.0
    activations_per_microbatch_B: float = 0.0
    in_flight: float = 1.0
    offloaded_B: float = 0.0
    weights_quantized_B: float = 0.0
    optimizer_host_B: float = 0.0          # of offloaded_B, the optimizer state (optimizer_offload)

    @property
    def total_B(self) -> float:
        """HBM per chip: every term but what is offloaded to host memory."""
        return (self.weights_B + self.weights_quantized_B + self.gradients_B + self.optimizer_B
                + self.activations_B + self.logits_B + self.reserved_B)

    @property
    def update_peak_B(self) -> float:
        """HBM while the optimizer state is on the device for the update (activations freed)."""
        return (self.weights_B + self.weights_quantized_B + self.gradients_B + self.optimizer_B
                + self.optimizer_host_B + self.reserved_B)

    def as_GiB(self) -> dict[str, float]:
        """Every term in GiB, named for ``memory_breakdown_GiB`` (``run --json``); ``total`` is the
        HBM estimate (offloaded_host excluded), activations = activations_per_microbatch x the
        micro-batches in flight."""
        return {"weights": self.weights_B / GiB,
                "weights_quantized": self.weights_quantized_B / GiB,
                "gradients": self.gradients_B / GiB,
                "optimizer": self.optimizer_B / GiB, "activations": self.activations_B / GiB,
                "activations_per_microbatch": self.activations_per_microbatch_B / GiB,
                "logits": self.logits_B / GiB, "reserved": self.reserved_B / GiB,
                "offloaded_host": self.offloaded_B / GiB, "total": self.total_B / GiB}


def optimizer_bytes_per_param(optimizer_state: str, master_weights: bool) -> float:
    """Adam's state per parameter: two moments (4 or 2 bytes each) and the fp32 master weights."""
    moment = {"fp32": 4.0, "bf16": 2.0}[optimizer_state]
    return 2 * moment + (4.0 if master_weights else 0.0)


def optimizer_step_bytes_per_param(optimizer_state: str, master_weights: bool) -> float:
    """HBM bytes Adam's update moves per parameter, from the same state ``optimizer_bytes_per_param``
    holds: it reads the weights, the gradient and both moments and writes the weights and both
    moments back. With fp32 master weights the weights and gradients are fp32 and the bf16 model
    copy is written too: 4 + 4 + 2m read, 4 + 2m written, + 2 = 14 + 4m bytes (30 with fp32
    moments: the 28 the measured optimizer tables count, validation/compute/*/optimizer.csv, plus
    the copy); without them, bf16 weights and gradients: 2 + 2 + 2m read, 2 + 2m written."""
    moment = {"fp32": 4.0, "bf16": 2.0}[optimizer_state]
    weights = 4.0 if master_weights else 2.0
    return 3 * weights + 4 * moment + (2.0 if master_weights else 0.0)


def memory_per_chip(wl: Workload) -> MemoryBreakdown:
    """The busiest stage's memory: the first (most micro-batches in flight, plus the embedding)
    or, where the layers differ by stage (dense-first MoE layers, MTP modules on the last), the
    stage whose estimate is largest."""
    return max((_stage_memory(wl, st) for st in _busiest_stages(wl)), key=lambda x: x.total_B)


def _busiest_stages(wl: Workload) -> list[int]:
    """The stages whose memory can be the largest: the first, and the last where layers differ."""
    par = wl.scenario.parallelism
    return sorted({0, par.pp - 1} if len(wl.kinds) > 1 or wl.mtp_layers else {0})


def _stage_memory(wl: Workload, stage: int) -> MemoryBreakdown:
    scn: Scenario = wl.scenario
    m, tr, par = scn.model, scn.training, scn.parallelism
    t, pp = par.tp, par.pp
    shard = par.shard_ranks            # ZeRO shards over the shard group (zero_group), not replicas
    layers = par.layers_per_stage
    uniform = len(wl.kinds) == 1 and not wl.mtp_layers
    # A uniform stack: the most layers any stage holds (uneven stages), as every stage's bound.
    layer_params = layers * wl.layer.params if uniform else wl.stage_params(stage)
    embeds = 2 if pp == 1 else (stage == 0) + (stage == pp - 1)
    params = layer_params + wl.embed_params * embeds
    quantized = _quantized_params(wl, layer_params)
    # Routed experts' state is sharded over the expert-data-parallel ranks that hold the same
    # experts (expert_shard_ranks), the rest over the shard group.
    experts = layers * wl.layer.expert_params if uniform else wl.stage_expert_params(stage)
    eshard = par.expert_shard_ranks

    def sharded(n: float, level: int) -> float:
        if par.zero < level:
            return n
        return (n - experts) / shard + experts / eshard

    weights = 2.0 * sharded(params - quantized, 3)
    grads = 2.0 * sharded(params, 2)
    per_param = optimizer_bytes_per_param(tr.optimizer_state, tr.master_weights)
    optim = per_param * sharded(params, 1)
    b, s = tr.micro_batch, par.local_seq_len
    per_layer = stage_activation_bytes(scn, wl.stage_layers(stage))
    layer_act = per_layer.device_B
    head = LOGIT_BYTES[tr.logits_dtype] * b * s * m.vocab / t / tr.vocab_tiling   # the head's logits
    # The schedule's own peak per stage, each in-flight chunk with its real layers, the last stage
    # with its logits (pp == 1: counted apart below): sim/workload/schedules.py.
    acts = stage_activation_peak_B(par, layer_act, head if pp > 1 else 0.0)
    held = stage_activation_peak_B(par, 1.0)            # layer-activations held at that peak
    in_flight = held / layers if layers else 1.0
    optim_host = optim if tr.optimizer_offload else 0.0
    host = per_layer.host_B * held + optim_host
    logits = head if pp == 1 else 0.0
    return MemoryBreakdown(weights, grads, optim - optim_host, acts, RUNTIME_RESERVED_B,
                           logits_B=logits, activations_per_microbatch_B=layer_act * layers,
                           in_flight=in_flight, offloaded_B=host, optimizer_host_B=optim_host,
                           weights_quantized_B=_quantized_weights_B(wl, layer_params))


def _quantized_params(wl: Workload, layer_params: float) -> float:
    """The stage's layer parameters a stack holds only as quantized parameters (no BF16 copy):
    ``software.quantized_params`` under its active recipe."""
    scn: Scenario = wl.scenario
    recipe = scn.recipe
    if recipe is None or recipe.name not in scn.software.quantized_params:
        return 0.0
    return layer_params


def _quantized_weights_B(wl: Workload, layer_params: float) -> float:
    """The quantized copies of a stage's linear weights a quantizing stack caches for the step
    (the layers' parameters: norms are a rounding error; embedding and head stay BF16)."""
    scn: Scenario = wl.scenario
    chip, par = scn.cluster.chip, scn.parallelism
    recipe = scn.recipe
    if recipe is None or not scn.software.quantized_saves:
        return 0.0
    per_param = recipe.copies(chip) * recipe.element_B
    return per_param * layer_params / (par.shard_ranks if par.zero >= 3 else 1)


def check_fits(wl: Workload, mem: MemoryBreakdown) -> None:
    """InfeasibleError when the estimate (or the optimizer update's peak) exceeds the chip's HBM,
    or what is offloaded the host memory per chip; the message names every term of the estimate
    and what would help."""
    scn = wl.scenario
    chip = scn.cluster.chip
    par, tr = scn.parallelism, scn.training
    host_cap = chip.host_memory_bytes
    if mem.offloaded_B and host_cap is not None and mem.offloaded_B > host_cap:
        state = (f" (the optimizer state {mem.optimizer_host_B / GiB:.1f} GiB of it)"
                 if mem.optimizer_host_B else "")
        fixes = ["keep fewer tensors offloaded in training.remat_policy", "lower training.micro_batch"]
        if mem.optimizer_host_B:
            fixes = [*_shard_hints(par), "training.optimizer_offload: false", *fixes]
        raise InfeasibleError(
            f"{scn.source}: what is offloaded needs an estimated {mem.offloaded_B / GiB:.1f} GiB "
            f"of host memory per chip{state} (model estimate) but a {chip.name} host has "
            f"{host_cap / GiB:.1f} GiB per chip; try: {'; '.join(fixes)}")
    cap = chip.usable_hbm_bytes
    # the update's peak on whichever stage holds the most state (not always the step's busiest)
    upd = (max((_stage_memory(wl, st) for st in _busiest_stages(wl)), key=lambda x: x.update_peak_B)
           if mem.optimizer_host_B else mem)
    if mem.total_B <= cap and upd.update_peak_B > cap and upd.optimizer_host_B:
        raise InfeasibleError(
            f"{scn.source}: the optimizer update brings its {upd.optimizer_host_B / GiB:.1f} GiB of "
            f"host state back beside weights and gradients, {upd.update_peak_B / GiB:.1f} GiB per "
            f"chip (model estimate), but a {chip.name} has {cap / GiB:.1f} GiB; try: "
            f"{'; '.join([*_shard_hints(par), 'raise parallelism.tp or pp'])}")
    if mem.total_B <= cap:
        return
    hints = _shard_hints(par)
    if tr.recompute != "full" and not tr.remat_policy:
        hints.append("use training.recompute: full")
    if tr.micro_batch > 1:
        hints.append("lower training.micro_batch")
    if mem.logits_B > 0.1 * cap:
        hints.append(f"raise training.vocab_tiling (now {tr.vocab_tiling})")
    if mem.optimizer_B > 0.05 * cap and host_cap is not None and scn.software.optimizer_offload:
        hints.append("keep the optimizer state on the host (training.optimizer_offload: true)")
    hints.append("raise parallelism.tp or pp")
    offl = f", offloaded to host {mem.offloaded_B / GiB:.1f}" if mem.offloaded_B else ""
    quant = (f" + {mem.weights_quantized_B / GiB:.1f} quantized copies"
             if mem.weights_quantized_B else "")
    raise InfeasibleError(
        f"{scn.source}: needs {mem.total_B / GiB:.1f} GiB per chip (model estimate: weights "
        f"{mem.weights_B / GiB:.1f}{quant}, gradients {mem.gradients_B / GiB:.1f}, optimizer "
        f"{mem.optimizer_B / GiB:.1f}, activations {mem.activations_B / GiB:.1f} = "
        f"{mem.activations_per_microbatch_B / GiB:.2f} x {mem.in_flight:g} micro-batches in "
        f"flight, logits {mem.logits_B / GiB:.1f}, reserved {mem.reserved_B / GiB:.1f}{offl}) "
        f"but a {chip.name} has {cap / GiB:.1f} GiB; try: {'; '.join(hints)}")


def _shard_hints(par: ParallelismConfig) -> list[str]:
    """Shard the training state wider: a higher ZeRO stage, a larger shard group."""
    hints = []
    if par.zero < 3:
        hints.append(f"raise parallelism.zero (now {par.zero})")
    if par.zero_group and par.zero >= 1:
        hints.append(f"raise parallelism.zero_group (now {par.zero_group}, up to dp = {par.dp})")
    return hints
