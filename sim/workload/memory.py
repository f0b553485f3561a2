"""Memory per device: weights, gradients, optimizer state, activations, with the source of each term.

Mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", section 3.1): 2 bytes of bf16 weights and 2
of gradients per parameter, plus 12 bytes of fp32 master weights, momentum and variance; ZeRO-1
shards the 12, ZeRO-2 also the gradients, ZeRO-3 / FSDP also the weights, over the data-parallel
ranks. Activations per layer and micro-batch follow the enumeration of Korthikanti et al. 2022
(section 4.1) for a layer without dropout and with flash attention (no stored scores), in units of
s b h bytes (bf16): attention block: norm input 2, QKV input 2, Q/K/V 2 (1 + 2 g / a), output 2;
MLP block: norm input 2, input 2, up-projection output 2 f/h (4 f/h for SwiGLU's two matrices),
activation output 2 f/h. For GPT-3 (a = g, f = 4h, GELU) this gives 32, the paper's 34 less its
two dropout masks. Sequence parallelism divides everything by t (without it the norm inputs and
block inputs stay whole); full recomputation keeps only the layer input (2 s b h). A pipeline
stage under 1F1B holds up to pp micro-batches in flight (Narayanan et al. 2021); interleaving adds
(pp - 1) / (pp v) of that.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Scenario
from ..errors import InfeasibleError
from ..units import GiB
from .schedules import stage_activation_peak_B
from .transformer import Workload

__all__ = ["MemoryBreakdown", "memory_per_chip"]

# CUDA/XLA context (~0.5 GiB), library workspaces and communication buffers: assumed, not measured.
RUNTIME_RESERVED_B = 2 * GiB


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    weights_B: float
    gradients_B: float
    optimizer_B: float
    activations_B: float
    reserved_B: float

    @property
    def total_B(self) -> float:
        return self.weights_B + self.gradients_B + self.optimizer_B + self.activations_B + self.reserved_B


def memory_per_chip(wl: Workload) -> MemoryBreakdown:
    """The busiest stage's memory (the first: most micro-batches in flight, plus the embedding)."""
    scn: Scenario = wl.scenario
    m, tr, par = scn.model, scn.training, scn.parallelism
    t, pp = par.tp, par.pp
    shard = par.shard_ranks            # ZeRO shards over the shard group (zero_group), not replicas
    layers = par.layers_per_stage
    params = layers * wl.layer.params + wl.embed_params * (2 if pp == 1 else 1)
    weights = 2.0 * params / (shard if par.zero >= 3 else 1)
    grads = 2.0 * params / (shard if par.zero >= 2 else 1)
    optim = 12.0 * params / (shard if par.zero >= 1 else 1)
    b, s, h, a, g = tr.micro_batch, par.local_seq_len, m.hidden, m.heads, m.kv_heads
    whole = 8.0                                         # norm and block inputs (2 each, 4 of them)
    q = a * m.head_dim / h                              # attention width (heads x head_dim) / hidden
    attn = 2 * q * (1 + 2 * g / a) + 2 * q              # Q, K, V and the attention output
    mlp = (6.0 if m.mlp == "swiglu" else 4.0) * m.ffn_hidden / h
    if m.moe is not None:
        mlp *= m.moe.top_k * m.moe.capacity_factor
    sbh = s * b * h
    if tr.recompute == "full":
        layer_act = 2.0 * sbh / (t if par.sequence_parallel and t > 1 else 1)
    elif t > 1 and not par.sequence_parallel:
        layer_act = sbh * (whole + (attn + mlp) / t)
    else:
        layer_act = sbh * (whole + attn + mlp) / t
    # The schedule's own peak per stage, each in-flight chunk with its real layers, the last stage
    # with its logits (pp == 1: added below): sim/workload/schedules.py.
    acts = stage_activation_peak_B(par, layer_act, 4.0 * b * s * m.vocab / t if pp > 1 else 0.0)
    if pp == 1:                                         # the output head's fp32 logits
        acts += 4.0 * b * s * m.vocab / t
    return MemoryBreakdown(weights, grads, optim, acts, RUNTIME_RESERVED_B)


def check_fits(wl: Workload, mem: MemoryBreakdown) -> None:
    cap = wl.scenario.cluster.chip.hbm_bytes
    if mem.total_B <= cap:
        return
    par, tr = wl.scenario.parallelism, wl.scenario.training
    hints = []
    if par.zero < 3:
        hints.append(f"raise parallelism.zero (now {par.zero})")
    if par.zero_group and par.zero >= 1:
        hints.append(f"raise parallelism.zero_group (now {par.zero_group}, up to dp = {par.dp})")
    if tr.recompute != "full":
        hints.append("use training.recompute: full")
    if tr.micro_batch > 1:
        hints.append("lower training.micro_batch")
    hints.append("raise parallelism.tp or pp")
    raise InfeasibleError(
        f"{wl.scenario.source}: needs {mem.total_B / GiB:.1f} GiB per chip (weights "
        f"{mem.weights_B / GiB:.1f}, gradients {mem.gradients_B / GiB:.1f}, optimizer "
        f"{mem.optimizer_B / GiB:.1f}, activations {mem.activations_B / GiB:.1f}, reserved "
        f"{mem.reserved_B / GiB:.1f}) but a {wl.scenario.cluster.chip.name} has "
        f"{cap / GiB:.1f} GiB; try: {'; '.join(hints)}")
