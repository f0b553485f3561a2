"""The rule tables that turn a published training run (a runs.csv row) into a scenario.

Each table is checked in order and the first match wins; every rule that takes an assumption says
so, and the mapping (``sim.validate.training_map``) writes it into the run's ``assumptions``.
Patterns are regexes searched in the named column, any case unless said otherwise.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .data import GPUS_PER_NODE

__all__ = ["HARDWARE_RULES", "TOPOLOGY_CHIPS", "HardwareRule", "offloads"]


# Bundled topology -> its catalogue chip (the `chip:` line of topologies/<name>.yaml; a test checks
# the two agree). Used before the scenario is loaded (GPU node rule, FP8 capability, peaks).
TOPOLOGY_CHIPS = types.MappingProxyType({
    "dgx-a100": "A100-SXM-80GB",
    "dgx-a100-40gb": "A100-SXM-40GB",
    "hgx-a100-4nic": "A100-SXM-80GB",
    "dgx-h100": "H100-SXM",
    "dgx-h200": "H200",
    "dgx-b200": "B200",
    "gb200-nvl72": "GB200",
    "dgx-b300": "B300",
    "gb300-nvl72": "GB300",
    "tpu-v4": "TPU-v4",
    "tpu-v5e": "TPU-v5e",
    "tpu-v5p": "TPU-v5p",
    "tpu-v6e": "TPU-v6e",
})

class _Unsupported(Exception):
    """Internal signal: the row cannot be expressed as a scenario; the message is the reason."""


# ----------------------------------------------------------------------------- rule tables

@dataclass(frozen=True, slots=True)
class HardwareRule:
    """The first rule whose ``pattern`` (a regex, any case) is found in the ``hardware`` column wins.

    ``topology`` None: the run is unsupported and ``note`` is the reason. Otherwise ``note`` is an
    assumption made by the mapping ("" for none). ``max_chips``: larger runs are unsupported, with
    ``beyond_reason``.
    """

    pattern: str
    topology: str | None
    note: str = ""
    max_chips: int | None = None
    beyond_reason: str = ""


HARDWARE_RULES: tuple[HardwareRule, ...] = (
    HardwareRule(r"\bV100\b", None, "V100 (Volta) is not in the hardware catalogue"),
    HardwareRule(r"TPU v3", None, "TPU v3 is not in the hardware catalogue"),
    HardwareRule(r"\bH800\b", None, "H800 (export H100 variant, 400 GB/s NVLink) is not in the "
                                    "hardware catalogue"),
    HardwareRule(r"H100.*(HBM2e|500 ?W|lower-TDP)", None,
                 "H100 500 W / HBM2e variant: not the catalogue's H100 SXM (700 W, 80 GB HBM3), "
                 "whose peak and memory bandwidth it does not reach"),
    HardwareRule(r"Omni-Path", None, "Omni-Path fabric: not the rail-optimized InfiniBand "
                                     "fat-tree of the GPU topologies"),
    HardwareRule(r"GCP A3", "dgx-h100", "", max_chips=GPUS_PER_NODE,
                 beyond_reason="GCP A3 VMs talk over GPUDirect-TCPX (4 x 200 Gb/s per VM), not the "
                               "DGX H100's 8 x 400 Gb/s InfiniBand; only single-VM runs map"),
    # Blackwell. MLPerf Training v5.x systems: HGX/DGX 8-GPU B200 and B300 servers, GB200/GB300
    # NVL72 racks (4-GPU compute trays, one 72-GPU NVLink domain). "GB300" before "B300": the
    # word boundary keeps r"\bB300\b" from matching "GB300" anyway, the order says it.
    HardwareRule(r"\bGB300\b", "gb300-nvl72"),
    HardwareRule(r"\bGB200\b", "gb200-nvl72"),
    HardwareRule(r"\bB300\b", "dgx-b300"),
    # torchao's B200 training tables ran on "power limited B200 GPUs" with the limit unstated:
    # refused as the H100 500 W variant is (the model's kernels are the 1,000 W part's).
    HardwareRule(r"\bB200\b.*power[- ]limited", None,
                 "power-limited B200, limit not stated: not the catalogue's 1,000 W B200, whose "
                 "clocks and peak it does not reach"),
    HardwareRule(r"\bB200\b", "dgx-b200"),
    HardwareRule(r"\bH200\b", "dgx-h200"),
    HardwareRule(r"\bH100\b", "dgx-h100"),
    HardwareRule(r"vTrain validation cluster", "hgx-a100-4nic",
                 "vTrain cluster: 800 Gb/s per node between nodes (vTrain's validation configs: "
                 "inter_node_bandwidth 800, 'total bandwidth of inter-node communication in Gbps' "
                 "per its src/config.py), i.e. 4 x HDR 200 Gb/s: hgx-a100-4nic; memory size not "
                 "stated, 80 GB assumed"),
    HardwareRule(r"\bA100 40 ?GB", "dgx-a100-40gb"),
    HardwareRule(r"\bA100 80 ?GB", "dgx-a100"),
    HardwareRule(r"\bA100\b", "dgx-a100", "A100 memory size not stated: the 80 GB part (dgx-a100) "
                                          "is assumed"),
    HardwareRule(r"TPU v4\b", "tpu-v4"),
    HardwareRule(r"TPU v5p\b", "tpu-v5p"),
    HardwareRule(r"TPU v5e\b", "tpu-v5e"),
    HardwareRule(r"TPU v6e\b", "tpu-v6e"),
)

# Fabric remarks in the hardware column that the topology does not model exactly (assumptions).
_FABRIC_NOTES: tuple[tuple[str, str], ...] = (
    (r"RoCE", "RoCE fabric modelled as the topology's InfiniBand fat-tree at the same per-GPU rate"),
)

# precision column -> scenario precision. Checked in order; the low precisions first ("BF16 + Float8
# linears" runs its matmuls in FP8), and the Blackwell block-scaled formats before plain FP8:
# NVFP4 (Transformer Engine NVFP4BlockScaling, MLPerf v5.1 FP4=True FP4_RECIPE=nvfp4) -> nvfp4;
# MXFP8 (TE MXFP8BlockScaling, FP8_RECIPE=mxfp8) -> mxfp8; any other FP8 (per-tensor delayed or
# current scaling, "FP8-CS", FP8_RECIPE=tensorwise/delayed) -> fp8. FP16 mixed precision has the
# same tensor-core peak as BF16 on every chip here.
_PRECISION_RULES: tuple[tuple[str, str], ...] = (
    (r"nvfp4|\bfp4\b", "nvfp4"),
    (r"mxfp8", "mxfp8"),
    (r"fp8|float8", "fp8"),
    (r"bf16|bfloat16", "bf16"),
    (r"fp16|mixed", "bf16"),
)
_UNKNOWN_PRECISION = r"^$|not stated"

# recompute column -> scenario recompute; None: not representable (the reason is the rule's text).
# MaxText's other named remat policies become training.remat_policy (_REMAT_POLICY).
_RECOMPUTE_RULES: tuple[tuple[str, str | None], ...] = (
    (r"^remat_policy=full$", "full"),
    # MaxText "selective" = minimal_flash's set (sim/workload/activations.py): every projection
    # output and the attention output. `minimal` alone keeps no attention output (its dot has batch
    # dims: jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims), so it is the per-tensor
    # preset of that name (training.remat_policy, below).
    (r"^remat_policy=minimal_flash$", "selective"),
    (r"^remat_policy=", None),                                  # unknown MaxText policy names
    (r"^full\b", "full"),
    (r"^selective\b", "selective"),
    (r"^none\b", "none"),
)
_RECOMPUTE_IN_NOTES = r"remat|recomput|activation checkpoint"
# "selective (moe, layernorm)": Megatron-Core's recompute_modules (training.recompute_modules)
_RECOMPUTE_MODULES = r"selective \(([a-z_, ]+)\)"
_REMAT_POLICY = r"^remat_policy=(\w+)$"
# MaxText's ``remat_policy: custom`` with its per-tensor settings, as the recipe lists them:
# "remat_policy=custom(decoder_layer_input:offload, query_proj:offload)" (training.remat_policy as
# a mapping; the tensors it does not name are rematerialized, as in MaxText)
_REMAT_CUSTOM = r"^remat_policy=custom\(\s*(\w+:\w+(?:\s*,\s*\w+:\w+)*)\s*\)$"
_OFFLOAD_POLICY = r"offload"           # MaxText policy names that move activations to the host

# Training settings a run's recipe states that runs.csv has no column for: (column, pattern
# (any case), training keys, the recipe that says so). Each applied one is an assumption of the run.
_RECIPE_FACTS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("model", r"^Nemotron-340B$", {"optimizer_state": "bf16"},
     "Nemotron-340B recipe (NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/nemotron/"
     "nemotron_340b.yaml @3be81fc): optim mcore_distributed_optim with dtype: bf16, Adam moments "
     "in bf16 (fp32 master weights kept)"),
    ("notes", r"NeMo AutoModel = PyTorch FSDP2", {"logits_dtype": "bf16"},
     "NeMo AutoModel benchmark recipes (examples/llm_benchmark/*/*.yaml @15da268): loss_fn "
     "MaskedCrossEntropy with fp32_upcast: false, the logits kept in bf16"),
)

# zero_or_fsdp column -> ZeRO stage. Checked in order; blank -> 1 (Megatron's distributed optimizer,
# recorded as an assumption).
_ZERO_RULES: tuple[tuple[str, int], ...] = (
    (r"SHARD_GRAD_OP|no reshard of params", 2),    # params gathered once per step: ZeRO-2
    (r"^ZeRO-1", 1),
    (r"^ZeRO-2", 2),
    (r"^ZeRO-3", 3),
    (r"FSDP|FULL_SHARD", 3),
)
# Sharding within a slice/VM and plain data parallelism across them (hybrid sharding): the shard
# group is one slice's data-parallel ranks (parallelism.zero_group = dp / slices), or the number
# MaxText's ici_fsdp_parallelism gives when it is positive.
_HYBRID_SHARDING = r"across slices|within slice|DCN DP \d+"
_ICI_FSDP = r"ici_fsdp(?:_parallelism)?=(-?\d+)"
# TPU Multislice: how many ICI slices the run joins over the DCN (hardware column, then notes).
_SLICES_IN_ROW: tuple[tuple[str, str], ...] = (
    ("hardware", r"\((\d+) pods? x \d+ chips\)"),
    ("notes", r"chips = (\d+) ?x "),
)
_MULTISLICE = r"multislice|pods"

# model name -> MLP type of the schema ("swiglu": 3 matrices, "gelu": 2). Checked in order.
_MLP_RULES: tuple[tuple[str, str], ...] = (
    (r"llama|mistral|mixtral|qwen|deepseek|gpt[ _-]?oss|maxtext|palm", "swiglu"),
    (r"nemotron", "gelu"),          # squared-ReLU MLP: two matrices, like GELU
    (r"gpt|mpt|bloom|\bopt\b|megatron-turing|mt-nlg", "gelu"),
)
_GPT_STYLE = r"\bgpt(?![ _-]?oss)|megatron-turing|mt-nlg"     # vocab default 51200 applies
_GPT_DEFAULT_VOCAB = 51200
_MOE_NAME = r"mixtral|qwen3.*a\d+b|deepseek|gpt[ _-]?oss|kimi|llama[ _-]?4"
_MOE_NOTES = r"(\d+) (?:routed )?experts top-(\d+)"
# Expert tensor parallelism where a source gives it (Megatron's expert_tensor_parallel_size, the
# ETP of Megatron-Bridge's performance tables); parallelism.etp.
_ETP_IN_NOTES = r"\bETP\s*[=:]?\s*(\d+)|expert[ _-]tensor[ _-]parallel(?:ism|[ _]size)?\s*[=:]?\s*(\d+)"
# The expert tensor parallelism taken where ep does not divide dp and no source gives one: the
# experts then also span tensor-parallel ranks, and Megatron-Bridge's MoE performance recipes run
# them unsplit (expert_tensor_parallel_size 1; Qwen3 235B on H100: tp 2, pp 8, vp 4, ep 32, etp 1).
_ETP_FOLD_DEFAULT = (1, "Megatron-Bridge's MoE performance recipes set expert_tensor_parallel_size "
                        "1 (NVIDIA-NeMo/Megatron-Bridge v0.2.0 scripts/performance/configs/qwen3/"
                        "workload_base_configs.py; v0.1.0rc4 .../qwen3_235b_a22b_llm_pretrain.yaml "
                        "h100: etp 1)")
# Model families whose architecture is a preset's (sim/models.py, each config cited there):
# MLA, shared experts, dense-first layers, local attention, hybrid Mamba-2 patterns and MTP
# modules are the preset's; the row's columns are checked against it (hidden, layers).
_PRESET_MODELS: tuple[tuple[str, str], ...] = (
    (r"deepseek[ _-]?v3", "deepseek-v3"),
    (r"kimi[ _-]?k2", "kimi-k2"),
    (r"gpt[ _-]?oss[ _-]?120b", "gpt-oss-120b"),
    (r"gpt[ _-]?oss[ _-]?20b", "gpt-oss-20b"),
    (r"qwen3.*235b", "qwen3-235b-a22b"),
    (r"qwen3.*30b", "qwen3-30b-a3b"),
    (r"llama[ _-]?4.*maverick", "llama4-maverick"),
    (r"nemotron[ _-]?h.*56b", "nemotron-h-56b"),
    (r"nemotron[ _-]?(?:v?3)[ _-]?nano", "nemotron-3-nano"),
)
# Benchmarks that route tokens uniformly at random (Megatron --moe-router-force-load-balancing,
# NeMo AutoModel fake_balanced_gate): the busiest rank's share is the statistical one only.
_BALANCED_ROUTING_NOTES = r"force-balance"      # Megatron: random logits, balanced on average
_EXACT_ROUTING_NOTES = r"[Ff]ake balanced gate"   # AutoModel: a round-robin assignment
_DEEPEP_NOTES = r"DeepEP"
# A stack column naming PyTorch FlexAttention (AutoModel's gpt-oss rows: "TE + DeepEP + FlexAttn").
_FLEX_NOTES = r"FlexAttn"
# Stacks whose gradient accumulation runs one torch.distributed.pipelining schedule per local batch
# (source URL pattern, notes pattern of the accumulation steps, why): each fills and drains the
# pipeline (parallelism.pipeline_flushes). Megatron's "GA=" is its micro-batches in one schedule.
_PIPELINE_FLUSHES = (r"NVIDIA-NeMo/Automodel", r"\bGA (\d+)\b",
                     "NeMo AutoModel runs one pipeline schedule.step() per local batch "
                     "(recipes/llm/train_ft.py _run_train_optim_step @36044ad3)")
# Rows whose `micro_batch` is the per-device batch (the notes say per_device_batch: MaxText's
# per_device_batch_size, the global batch being it times every device). MaxText shards
# activation_batch over data/fsdp/fsdp_transpose/expert, never 'tensor', and accumulates no
# gradients by default, so a tensor-parallel group runs tp x per_device_batch sequences in one pass
# (AI-Hypercomputer/maxtext src/maxtext/configs/base.yml @e591f30: logical_axis_rules
# activation_batch / activation_embed, gradient_accumulation_steps: 1).
_PER_DEVICE_BATCH = (r"per_device_batch",
                     "per-device batch (per_device_batch_size): a tensor-parallel group of {tp} "
                     "runs {micro} sequences in one pass (MaxText base.yml @e591f30: activation_batch "
                     "is not sharded over 'tensor'; gradient_accumulation_steps 1)")
# head_dim facts for model families whose head_dim is not hidden / heads (model.head_dim).
_HEAD_DIM_FACTS: tuple[tuple[str, int, str], ...] = (
    (r"qwen3", 128, "Qwen3 config.json: head_dim 128"),
)

# Sources whose software predates Megatron sequence parallelism (Korthikanti et al., May 2022).
_NO_SEQUENCE_PARALLEL_SOURCES: tuple[tuple[str, str], ...] = (
    (r"NVIDIA/Megatron-LM/blob/5281919", "Megatron-LM of Sep 2020 predates sequence parallelism"),
    (r"arxiv\.org/abs/2104\.04473", "Narayanan et al. 2021 predates sequence parallelism"),
)


def _first(rules: Iterable[tuple[str, Any]], text: str) -> tuple[bool, Any]:
    """(True, value) of the first rule whose pattern is found in *text* (any case), else (False, None)."""
    for pattern, value in rules:
        if re.search(pattern, text, re.IGNORECASE):
            return True, value
    return False, None


def offloads(policy: str | Mapping[str, str]) -> bool:
    """Whether a row's MaxText remat policy (a recipe name or a custom mapping) moves activations
    to the host."""
    if isinstance(policy, Mapping):
        return "offload" in policy.values()
    return bool(re.search(_OFFLOAD_POLICY, policy))
