"""Activation bytes one transformer layer keeps per micro-batch until its backward, per software
stack and recompute policy, as an enumeration of named tensors.

Every tensor is sized per token in bytes (bf16 = 2), then split over the tensor-parallel ranks:
``sp`` tensors ([tokens, hidden]) only under sequence parallelism, ``tp`` tensors (heads, ffn)
always. Names follow MaxText's ``checkpoint_name`` tags (sim/config/remat.py) where one exists:

- ``decoder_layer_input`` 2h (the attention norm's input), ``attn_norm_out`` 2h (the QKV GEMMs'
  input), ``query_proj`` 2ad, ``key_proj`` / ``value_proj`` 2gd, ``context`` 2ad (attention
  output, the out-projection's input), ``out_proj`` 2h, ``mlp_norm_in`` 2h (the residual after
  attention), ``mlp_norm_out`` 2h, ``mlpwi_0`` / ``mlpwi_1`` 2f each (SwiGLU gate and up; a GELU
  MLP has one, ``mlpwi_0``), ``mlp_act`` 2f (the activation's output, the down GEMM's input),
  ``mlpwo`` 2h; MLP tensors scale by top_k x capacity_factor for MoE.
- ``scores`` 2 a S per token (the softmax output, a x S x S per sequence in bf16): kept only by an
  attention kernel that writes its scores to memory (``xla``: Megatron's fused softmax between two
  batched GEMMs, XLA's dot-product attention, eager math SDPA) when nothing is recomputed.

What each stack keeps (recompute ``none`` / ``selective``), by the facts of its software profile
(``sim.software``, where each stack's sources are):

- The base set (a profile without ``eager_autograd``, recompute ``none``): Korthikanti et al.
  2022 (section 4.1) without dropout: the two norm inputs and outputs, Q, K, V, the attention
  output, the MLP's up-projection output(s) and the activation output. ``selective_recompute:
  scores`` drops the scores (the paper's selective recomputation), as flash kernels never store
  them.
- ``eager_autograd`` (eager PyTorch): autograd keeps every saved input of every op, so on top of
  that set, for SwiGLU, ``silu(w1 x)`` as well as ``w1 x`` (``F.silu`` saves its input, the
  product saves both factors: ``w2(F.silu(w1(x)) * w3(x))``), 2f more per token; and with
  ``sdpa_output_copy`` (attention through SDPA in [b, heads, s, d] layout) the attention output
  twice (SDPA saves its ``out`` for the backward; the ``transpose(1, 2).contiguous()`` copy is the
  out-projection's saved input), 2ad more. RoPE (torchtitan's complex multiply by the constant
  ``freqs_cis``) saves no activation: SDPA keeps the RoPE'd Q/K, as in the base set.
- ``selective_recompute: op-sac``: torchtitan's op-level selective AC (``activation_checkpoint.mode:
  selective``, ``selective_ac_option: op``; torchtitan parallelize_llama.py ``_custom_policy``:
  "Saves output of all compute ops, except every second mm" plus the SDPA outputs): the block
  input, wq, wv, w1 (and w2 for SwiGLU, the 7th mm) outputs and the attention output.
- ``selective_recompute: minimal_flash``: MaxText's ``minimal_flash`` recipe (every projection
  output, the attention output and the layer input; the elementwise work is recomputed).
- ``full`` (every stack): the layer input only.
- A ``training.remat_policy`` (any stack): the layer input plus each named tensor where the policy
  puts it (``device``: HBM; ``offload``: pinned host memory; ``remat``: recomputed).

Under a low-precision recipe (``sim.precision``) on a stack with ``quantized_saves`` (Transformer
Engine), a linear layer keeps the quantized copy of its input that its wgrad reads instead of the
BF16 tensor: ``attn_norm_out``, ``mlp_norm_out`` and ``mlp_act`` shrink to the recipe's bytes per
element; ``context`` stays BF16 (the attention backward reads it) and gains the quantized copy
the out-projection saves.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Scenario
from ..config.remat import REMAT_PRESETS

__all__ = ["LayerActivations", "layer_activation_bytes", "kept_tensors"]

# Linear-layer inputs a quantizing stack keeps as its quantized copy instead of BF16, and the one
# that another op also reads in BF16 (the attention output: the attention backward's ``O``).
_QUANTIZED_INPUTS = ("attn_norm_out", "mlp_norm_out", "mlp_act")
_ALSO_QUANTIZED = ("context",)

_BASE = ("decoder_layer_input", "attn_norm_out", "query_proj", "key_proj", "value_proj", "context",
         "mlp_norm_in", "mlp_norm_out", "mlpwi_0", "mlpwi_1", "mlp_act")


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one layer keeps per micro-batch on one chip: in HBM and offloaded to host memory."""

    device_B: float
    host_B: float


def _sizes(scn: Scenario) -> dict[str, tuple[float, str]]:
    """Every tensor a layer may keep: (bytes per token, split) with split ``sp`` or ``tp``."""
    m = scn.model
    h, a, g, d, f = m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden
    moe = m.moe.top_k * m.moe.capacity_factor if m.moe is not None else 1.0
    swiglu = m.mlp == "swiglu"
    seq = scn.training.seq_len
    return {
        "decoder_layer_input": (2.0 * h, "sp"), "attn_norm_out": (2.0 * h, "sp"),
        "query_proj": (2.0 * a * d, "tp"), "key_proj": (2.0 * g * d, "tp"),
        "value_proj": (2.0 * g * d, "tp"), "context": (2.0 * a * d, "tp"),
        "context_copy": (2.0 * a * d, "tp"), "scores": (2.0 * a * seq, "tp"),
        "out_proj": (2.0 * h, "sp"), "mlp_norm_in": (2.0 * h, "sp"), "mlp_norm_out": (2.0 * h, "sp"),
        "mlpwi_0": (2.0 * f * moe, "tp"), "mlpwi_1": (2.0 * f * moe if swiglu else 0.0, "tp"),
        "mlp_act": (2.0 * f * moe, "tp"), "silu_out": (2.0 * f * moe if swiglu else 0.0, "tp"),
        "mlpwo": (2.0 * h, "sp"),
    }


def kept_tensors(scn: Scenario) -> dict[str, str]:
    """Tensor name -> ``device`` or ``offload`` for every tensor a layer of *scn* keeps."""
    tr = scn.training
    if tr.remat_policy:
        return {t: loc for t, loc in tr.remat_policy if loc != "remat"}
    sw = scn.software
    selective = sw.selective_recompute if tr.recompute == "selective" else None
    if tr.recompute == "full":
        names: tuple[str, ...] = ("decoder_layer_input",)
    elif selective == "minimal_flash":
        names = ("decoder_layer_input",) + REMAT_PRESETS["minimal_flash"][0]
    elif selective == "op-sac":
        names = ("decoder_layer_input", "query_proj", "value_proj", "context", "mlpwi_0")
        if scn.model.mlp == "swiglu":
            names += ("mlpwo",)
    else:
        names = _BASE + (("silu_out",) if sw.eager_autograd else ())
        names += ("context_copy",) if sw.sdpa_output_copy else ()
        if tr.recompute == "none" and sw.attention == "xla":
            names += ("scores",)
    return {t: "device" for t in names}


def _quantized_scale(scn: Scenario) -> tuple[float, float]:
    """(bytes kept per BF16 byte of a quantized linear input, extra bytes per BF16 byte of the
    attention output): (1, 0) unless the stack keeps quantized inputs under an active recipe."""
    recipe = scn.recipe
    if recipe is None or not scn.software.quantized_saves:
        return 1.0, 0.0
    return recipe.element_B / 2.0, recipe.element_B / 2.0


def layer_activation_bytes(scn: Scenario) -> LayerActivations:
    """Bytes one layer keeps per micro-batch on one chip (module docstring), split into HBM and
    host memory."""
    par = scn.parallelism
    t = par.tp
    tokens = scn.training.micro_batch * par.local_seq_len
    sp = par.sequence_parallel and t > 1
    sizes = _sizes(scn)
    scale, extra = _quantized_scale(scn)
    out = {"device": 0.0, "offload": 0.0}
    for name, loc in kept_tensors(scn).items():
        per_token, split = sizes[name]
        factor = scale if name in _QUANTIZED_INPUTS else 1.0 + extra if name in _ALSO_QUANTIZED else 1.0
        out[loc] += factor * tokens * per_token / (t if split == "tp" or sp else 1)
    return LayerActivations(out["device"], out["offload"])


def offload_exposed_s(scn: Scenario, compute_s: float) -> float:
    """Seconds one layer's activation offload adds to one pass (forward: device -> host, backward:
    host -> device) of one micro-batch: its bytes over the host link, less the pass's *compute_s*
    where the stack overlaps it. The host link, one direction, is the chip's own where it has one
    (``Chip.host_link_Bps``: NVLink-C2C to the Grace CPU on GB200 / GB300, its share of the
    Grace's link), else the topology's PCIe bandwidth per chip; the topology's PCIe latency
    either way."""
    host_B = layer_activation_bytes(scn).host_B
    if host_B <= 0:
        return 0.0
    topo = scn.cluster.topology
    link_Bps = scn.cluster.chip.host_link_Bps or topo.pcie_Bps
    transfer_s = topo.pcie_latency_s + host_B / link_Bps
    if scn.software.offload_overlap:
        return max(0.0, transfer_s - compute_s)
    return transfer_s
