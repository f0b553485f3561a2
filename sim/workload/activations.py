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
- ``training.recompute_modules`` (Megatron-Core's modules, ``sim.workload.recompute``): the base
  set less what the named modules save (a checkpointed module keeps its input only); the
  permuted copies of an MoE layer's input (``moe_permuted``) go with the ``moe`` module.
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

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..config import Scenario
from ..config.remat import REMAT_PRESETS
from ..models import LayerKind, kind_index
from .recompute import dropped_tensors

__all__ = ["LayerActivations", "layer_activation_bytes", "stage_activation_bytes", "kept_tensors",
           "host_transfer_s"]

# Linear-layer inputs a quantizing stack keeps as its quantized copy instead of BF16, and the one
# that another op also reads in BF16 (the attention output: the attention backward's ``O``).
_QUANTIZED_INPUTS = ("attn_norm_out", "mlp_norm_out", "moe_permuted", "mlp_act")
_ALSO_QUANTIZED = ("context",)

_BASE = ("decoder_layer_input", "attn_norm_out", "query_proj", "key_proj", "value_proj", "context",
         "mlp_norm_in", "mlp_norm_out", "moe_permuted", "mlpwi_0", "mlpwi_1", "mlp_act")


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one layer keeps per micro-batch on one chip: in HBM and offloaded to host memory."""

    device_B: float
    host_B: float


def _sizes(scn: Scenario, kind: LayerKind | None = None) -> dict[str, tuple[float, str]]:
    """Every tensor a layer of *kind* (None: the model's last layer's kind) may keep: (bytes per
    token, split) with split ``sp`` or ``tp``. The names are the attention layer's; another
    mixer's tensors take the same places (``_mixer_sizes``), a missing block's are 0."""
    m = scn.model
    kind = kind or m.layer_kinds()[-1]
    out = {"decoder_layer_input": (2.0 * m.hidden, "sp")}
    if kind.mixer:
        out.update(_mixer_sizes(scn, kind))
    else:
        out.update({n: (0.0, "tp") for n in ("attn_norm_out", "query_proj", "key_proj",
                                             "value_proj", "context", "context_copy", "scores")})
        out["out_proj"] = (0.0, "sp")
    out.update(_mlp_sizes(scn, kind))
    return out


def _mixer_sizes(scn: Scenario, kind: LayerKind) -> dict[str, tuple[float, str]]:
    """The mixer's tensors: GQA/MHA (module docstring); MLA's per-head Q/K (qk widths), V and
    output (v width), with its Q and KV latents kept beside the projections; a Mamba-2 mixer's
    in_proj output (z, x, B, C, dt) as ``query_proj``, its conv output as ``key_proj``, the scan
    output and the per-chunk fp32 states as ``context``."""
    m = scn.model
    h, a, g, d = m.hidden, m.heads, m.kv_heads, m.head_dim
    keys = scn.training.seq_len if kind.window is None else min(kind.window, scn.training.seq_len)
    base = {"attn_norm_out": (2.0 * h, "sp"), "out_proj": (2.0 * h, "sp"),
            "context_copy": (2.0 * a * d, "tp"), "scores": (2.0 * a * keys, "tp")}
    if kind.mixer == "mamba":
        mb = m.mamba
        assert mb is not None
        di, gn = mb.d_inner, mb.groups * mb.state
        states = mb.heads * mb.head_dim * mb.state * 4.0 / mb.chunk
        return {**base, "query_proj": (2.0 * (2 * di + 2 * gn + mb.heads), "tp"),
                "key_proj": (2.0 * (di + 2 * gn), "tp"), "value_proj": (0.0, "tp"),
                "context": (2.0 * di + states, "tp"), "context_copy": (2.0 * di, "tp"),
                "scores": (0.0, "tp")}
    mla = m.attention.mla
    if mla is None:
        return {**base, "query_proj": (2.0 * a * d, "tp"), "key_proj": (2.0 * g * d, "tp"),
                "value_proj": (2.0 * g * d, "tp"), "context": (2.0 * a * d, "tp")}
    latents = 2.0 * (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim)
    return {**base, "attn_norm_out": (2.0 * h + latents, "sp"),
            "query_proj": (2.0 * a * mla.qk_head_dim, "tp"),
            "key_proj": (2.0 * a * mla.qk_head_dim, "tp"),
            "value_proj": (2.0 * a * mla.v_head_dim, "tp"),
            "context": (2.0 * a * mla.v_head_dim, "tp"),
            "context_copy": (2.0 * a * mla.v_head_dim, "tp")}


def _mlp_sizes(scn: Scenario, kind: LayerKind) -> dict[str, tuple[float, str]]:
    """The MLP's tensors: a dense MLP's (module docstring); an MoE layer's experts' for the copies
    its rank computes (top_k x the busiest rank's share), with shared experts' beside them, and the
    permuted input copies (``moe_permuted``)."""
    m = scn.model
    h = m.hidden
    if not kind.mlp:
        return {n: (0.0, "sp" if n in ("mlp_norm_in", "mlp_norm_out", "moe_permuted", "mlpwo") else "tp")
                for n in ("mlp_norm_in", "mlp_norm_out", "moe_permuted", "mlpwi_0", "mlpwi_1",
                          "mlp_act", "silu_out", "mlpwo")}
    swiglu = m.mlp == "swiglu"
    permuted = 0.0
    if kind.mlp == "moe":
        moe = m.moe
        assert moe is not None
        f = _routed_width(scn) + moe.shared_experts * m.shared_ffn
        permuted = 2.0 * h * _routed_width(scn) / m.expert_ffn
    else:
        f = m.ffn_hidden
    return {"mlp_norm_in": (2.0 * h, "sp"), "mlp_norm_out": (2.0 * h, "sp"),
            "moe_permuted": (permuted, "sp"),
            "mlpwi_0": (2.0 * f, "tp"), "mlpwi_1": (2.0 * f if swiglu else 0.0, "tp"),
            "mlp_act": (2.0 * f, "tp"), "silu_out": (2.0 * f if swiglu else 0.0, "tp"),
            "mlpwo": (2.0 * h, "sp")}


def _routed_width(scn: Scenario) -> float:
    """The routed experts' hidden width per token on the busiest rank: top_k x its share x the
    expert width (0 for a dense model)."""
    m = scn.model
    moe = m.moe
    if moe is None:
        return 0.0
    par = scn.parallelism
    share = moe.busiest_share(scn.training.micro_batch * par.local_seq_len * moe.top_k
                              / (par.tp if par.sequence_parallel else 1), par.ep)
    return moe.top_k * share * m.expert_ffn


def kept_tensors(scn: Scenario) -> dict[str, str]:
    """Tensor name -> ``device`` or ``offload`` for every tensor a layer of *scn* keeps."""
    tr = scn.training
    if tr.remat_policy:
        kept = {t: loc for t, loc in tr.remat_policy if loc != "remat"}
        if "mlp_norm_out" in kept:      # MaxText's name covers the permuted copies as well
            kept["moe_permuted"] = kept["mlp_norm_out"]
        return kept
    sw = scn.software
    # recompute_modules name what Megatron-Core recomputes instead of the stack's selective set
    selective = (sw.selective_recompute if tr.recompute == "selective" and not tr.recompute_modules
                 else None)
    if tr.recompute == "full":
        names: tuple[str, ...] = ("decoder_layer_input",)
    elif selective == "minimal_flash":
        names = ("decoder_layer_input",) + REMAT_PRESETS["minimal_flash"][0]
        names += ("moe_permuted",) if "mlp_norm_out" in names else ()
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


def _module_share(scn: Scenario, kind: LayerKind) -> Callable[[str], float]:
    """Tensor name -> the share of it a layer of *kind* keeps under ``training.recompute_modules``
    (``sim.workload.recompute.dropped_tensors``): 1 for all without them; an MoE layer's MLP
    tensors split between its routed and shared experts by their widths."""
    modules = scn.training.recompute_modules
    if not modules or scn.training.remat_policy:
        return lambda name: 1.0
    dropped = dropped_tensors(kind, modules)
    m = scn.model
    routed = _routed_width(scn) if kind.mlp == "moe" else 0.0
    shared = m.moe.shared_experts * m.shared_ffn if kind.mlp == "moe" and m.moe else 0.0
    experts = routed / (routed + shared) if routed + shared else 0.0
    part = {"all": 1.0, "experts": experts, "shared": 1.0 - experts}
    return lambda name: 1.0 - part[dropped[name]] if name in dropped else 1.0


def layer_activation_bytes(scn: Scenario, kind: LayerKind | None = None) -> LayerActivations:
    """Bytes one layer of *kind* (None: the model's last layer's) keeps per micro-batch on one
    chip (module docstring), split into HBM and host memory."""
    par = scn.parallelism
    t = par.tp
    tokens = scn.training.micro_batch * par.local_seq_len
    sp = par.sequence_parallel and t > 1
    kind = kind or scn.model.layer_kinds()[-1]
    sizes = _sizes(scn, kind)
    scale, extra = _quantized_scale(scn)
    kept = _module_share(scn, kind)
    out = {"device": 0.0, "offload": 0.0}
    for name, loc in kept_tensors(scn).items():
        per_token, split = sizes[name]
        factor = scale if name in _QUANTIZED_INPUTS else 1.0 + extra if name in _ALSO_QUANTIZED else 1.0
        out[loc] += kept(name) * factor * tokens * per_token / (t if split == "tp" or sp else 1)
    return LayerActivations(out["device"], out["offload"])


def stage_activation_bytes(scn: Scenario, layers: tuple[int, ...]) -> LayerActivations:
    """The mean over *layers* (model layer indices) of what each keeps (``layer_activation_bytes``
    per kind)."""
    kinds, index = kind_index(scn.model)
    if len(kinds) == 1:
        # PERF: a uniform stack (every layout of a dense model, and each of XLA's remat trials)
        # means one kind's bytes over its layers: the same sums, each worked out once
        one = layer_activation_bytes(scn, kinds[0])
        n = max(1, len(layers))
        return LayerActivations(_mean_of_same(one.device_B, n), _mean_of_same(one.host_B, n))
    picked = [index[i] for i in layers] or [index[-1]]
    each = {k: layer_activation_bytes(scn, kinds[k]) for k in set(picked)}
    n = len(picked)
    device = {k: a.device_B for k, a in each.items()}
    host = {k: a.host_B for k, a in each.items()}
    return LayerActivations(sum(map(device.__getitem__, picked)) / n,
                            sum(map(host.__getitem__, picked)) / n)


@functools.lru_cache(maxsize=4096)
def _mean_of_same(x: float, n: int) -> float:
    """*x* summed *n* times over *n*, as ``stage_activation_bytes`` sums a stage's layers."""
    return sum([x] * n) / n


def host_transfer_s(scn: Scenario, nbytes: float) -> float:
    """Seconds *nbytes* take one way over a chip's link to host memory: the chip's own where it has
    one (``Chip.host_link_Bps``: NVLink-C2C to the Grace CPU on GB200 / GB300, its share of the
    Grace's link), else the topology's PCIe bandwidth per chip; the topology's PCIe latency
    either way."""
    topo = scn.cluster.topology
    return topo.pcie_latency_s + nbytes / (scn.cluster.chip.host_link_Bps or topo.pcie_Bps)


def offload_exposed_s(scn: Scenario, compute_s: float) -> float:
    """Seconds one layer's activation offload adds to one pass (forward: device -> host, backward:
    host -> device) of one micro-batch: its bytes over the host link (``host_transfer_s``), less
    the pass's *compute_s* where the stack overlaps it."""
    host_B = layer_activation_bytes(scn).host_B
    if host_B <= 0:
        return 0.0
    transfer_s = host_transfer_s(scn, host_B)
    if scn.software.offload_overlap:
        return max(0.0, transfer_s - compute_s)
    return transfer_s
