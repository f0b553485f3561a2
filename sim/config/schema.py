"""The typed scenario: frozen records the loader (``scenario.py``) builds and everything
downstream reads, and the keys each section accepts (for the loader and for ``--set``/``--over``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..hardware import Chip
from ..models import ModelSpec
from ..precision import Recipe, active_recipe
from ..software import SoftwareProfile
from ..topology_spec import SliceShape, TopologySpec
from .model_section import MODEL_KEYS

__all__ = [
    "ClusterConfig", "CostConfig", "FailuresConfig", "ParallelismConfig", "PlanSizes", "Scenario",
    "StragglersConfig", "TrainingConfig", "CLUSTER_KEYS", "MODEL_KEYS", "SECTION_KEYS", "TOP_KEYS",
    "scenario_keys",
]


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    topology: TopologySpec
    chips: int
    shape: SliceShape | None = None       # TPU: per-pod slice shape
    pods: int = 1                         # TPU: slices (pods) joined over the DCN
    twisted: bool = False
    oversubscription: float | None = None # None: the topology file's value
    sharp: bool | None = None             # InfiniBand SHARP in the switches; None: the file's value
    background_load: float = 0.0          # share of every inter-node link taken by other jobs
    # Graph edits: (node, node, factor) per link; factor 0 = the link is down (routes avoid it)
    degraded_links: tuple[tuple[int | str, int | str, float], ...] = ()
    shared_with: str | None = None        # another scenario file whose job shares the fabric

    @property
    def chip(self) -> Chip:
        return self.topology.chip


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    seq_len: int = 4096
    global_batch: int | None = None       # sequences per step as given; None: the default, which
                                          # parallelism.sequences_per_step resolves
    micro_batch: int = 1
    precision: str = "bf16"
    recompute: str = "selective"
    tokens: float | None = None           # token budget to train (time, chip-hours, cost, energy)
    # Per-tensor activation policy in MaxText's names (sim/config/remat.py): "" / () = none given,
    # the stack's enumeration for `recompute` applies; else the recipe name (or "custom") and the
    # location (device | offload | remat) of every tensor a layer can keep, which then decide
    # instead of `recompute` (so --set training.remat_policy=... overrides a file's recompute).
    remat_policy_name: str = ""
    remat_policy: tuple[tuple[str, str], ...] = ()
    optimizer_state: str = "fp32"         # Adam moments: fp32 | bf16 (2 x 4 or 2 x 2 bytes/param)
    master_weights: bool = True           # an fp32 copy of the weights in the optimizer state
    # the optimizer state (moments and master weights) lives in host memory and streams through the
    # chip for the update (MaxText optimizer_memory_host_offload): sim/workload/memory.py
    optimizer_offload: bool = False
    vocab_tiling: int = 1                 # logits computed in this many chunks (MaxText num_vocab_tiling)
    logits_dtype: str = "fp32"            # the logits the loss keeps: fp32 | bf16 (remat.LOGIT_BYTES)
    # Megatron-Core's selective recomputation by module (sim/workload/recompute.py), with
    # recompute "selective": () = the stack's own selective set
    recompute_modules: tuple[str, ...] = ()

    @property
    def offloads(self) -> bool:
        """Whether the remat policy moves any activation to host memory."""
        return any(loc == "offload" for _, loc in self.remat_policy)


@dataclass(frozen=True, slots=True)
class PlanSizes:
    """The sizes a parallel plan that meets every rule resolves to (sim/config/parallelism.py)."""

    microbatches: int                     # micro-batches per pipeline per step
    sequences_per_step: int               # the global batch: training.global_batch, or
                                          # dp x micro_batch x max(1, 4 x pp) when not given
    layers_per_chunk: int                 # model.layers / (pp x virtual_stages); uneven stages:
                                          # the most layers one chunk holds
    local_seq_len: int                    # tokens of a sequence per context-parallel rank
    chunk_layers: tuple[int, ...] = ()    # layers of each model chunk in model order (chunk
                                          # c x pp + s is stage s's chunk c); () = all equal


@dataclass(frozen=True, slots=True)
class ParallelismConfig:
    """The parallel plan: the ``parallelism`` section as given, and every fact derived from it with
    the cluster, the model and the training section, resolved once by the loader
    (sim/config/parallelism.py, which also holds every rule a plan must meet). Nothing downstream
    re-derives them.

    A plan that breaks a rule (tp not dividing the heads, a batch that does not split into
    micro-batches, ...) still loads, with ``plan_error`` saying which rule (the validation suites
    map such a scenario and count the refusal); its sizes then raise that ConfigError when read,
    and ``checked()`` raises it up front (``build_workload`` does). ``virtual_stages`` is the
    effective count: the loader allows more than 1 only with the interleaved schedule.

    Expert layers re-fold the ranks of a pipeline stage (MoE parallel folding, Liu et al. 2025,
    arXiv 2504.14960): attention runs on tp x cp x dp, the experts on etp x ep x edp of the same
    ranks (``sim.workload.layout``). ``etp`` defaults to tp, as Megatron-Core's
    ``expert_tensor_parallel_size`` does (megatron/core/parallel_state.py,
    ``initialize_model_parallel``).
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1                           # derived: chips / (tp x pp x cp)
    etp: int = 0                          # expert tensor parallelism; 0 (not given): tp, as in
                                          # Megatron-Core (expert_tensor_parallel_size)
    zero: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1               # model chunks per pipeline rank (interleaved schedule)
    sequence_parallel: bool = True
    zero_group: int = 0                   # dp ranks one ZeRO/FSDP shard group spans; 0: all of dp
    stage_layers: tuple[int, ...] = ()    # as given: one per stage or one per model chunk; ()
    first_stage_layers: int | None = None # as given (Megatron --decoder-first-pipeline-num-layers)
    last_stage_layers: int | None = None  # as given (Megatron --decoder-last-pipeline-num-layers)
    microbatch_group: int = 0             # interleaved: micro-batches per round (Llama 3's N); 0: pp
    pipeline_flushes: int = 1             # pipeline schedules a step runs one after another, each
                                          # filled and drained (gradient accumulation over
                                          # torch.distributed.pipelining's schedule.step calls)
    sizes: PlanSizes | None = None        # derived; None: the plan breaks a rule (plan_error)
    plan_error: str = ""                  # "FILE: FIELD: what is wrong" of the first rule broken

    def __post_init__(self) -> None:
        if self.etp == 0:                 # not given: the experts split like the dense layers
            object.__setattr__(self, "etp", self.tp)

    @property
    def edp(self) -> int:
        """Expert data parallelism: the ranks of a stage that hold the same experts and reduce
        their gradients together, tp x cp x dp / (etp x ep) (Megatron-Core's
        expert_data_parallel_size: world / (etp x ep x pp)). Only whole when the plan is valid
        (``plan_problem`` checks that ep x etp divides tp x cp x dp)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    def checked(self) -> PlanSizes:
        """The plan's sizes, or the ConfigError of the first rule the plan breaks."""
        if self.sizes is None:
            raise ConfigError(self.plan_error or "parallelism: the plan was not resolved by the "
                              "scenario loader (sim.config)")
        return self.sizes

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per step."""
        return self.checked().microbatches

    @property
    def sequences_per_step(self) -> int:
        """The global batch in sequences (given, or the default)."""
        return self.checked().sequences_per_step

    @property
    def layers_per_chunk(self) -> int:
        """Transformer layers in one model chunk (virtual stage)."""
        return self.checked().layers_per_chunk

    @property
    def layers_per_stage(self) -> int:
        """Transformer layers one pipeline stage holds (all of its chunks); uneven stages: the
        most any stage holds."""
        return max(self.layers_of_stages)

    @property
    def model_chunk_layers(self) -> tuple[int, ...]:
        """Layers of every model chunk in model order (chunk c x pp + s is stage s's chunk c)."""
        sizes = self.checked()
        return sizes.chunk_layers or (sizes.layers_per_chunk,) * self.chunks

    def stage_chunk_layers(self, stage: int) -> tuple[int, ...]:
        """Layers of each of *stage*'s chunks (its virtual stages 0 .. virtual_stages - 1)."""
        per = self.model_chunk_layers
        return tuple(per[c * self.pp + stage] for c in range(self.virtual_stages))

    @property
    def layers_of_stages(self) -> tuple[int, ...]:
        """Layers each pipeline stage holds, all of its chunks together."""
        sizes = self.checked()
        if not sizes.chunk_layers:                  # every chunk alike
            return (sizes.layers_per_chunk * self.virtual_stages,) * self.pp
        per = sizes.chunk_layers
        return tuple(sum(per[c * self.pp + s] for c in range(self.virtual_stages))
                     for s in range(self.pp))

    @property
    def uneven(self) -> bool:
        """Whether the stages or chunks hold different numbers of layers."""
        return len(set(self.model_chunk_layers)) > 1

    @property
    def local_seq_len(self) -> int:
        """Tokens of one sequence on one context-parallel rank: training.seq_len / cp."""
        return self.checked().local_seq_len

    @property
    def chunks(self) -> int:
        """Model chunks along the pipeline: pp x virtual_stages."""
        return self.pp * self.virtual_stages

    @property
    def shard_dp(self) -> int:
        """Data-parallel ranks that split the ZeRO-sharded states (the rest hold replicas)."""
        return self.zero_group or self.dp

    @property
    def replicas(self) -> int:
        """Copies of the ZeRO-sharded training state: 1 unless hybrid sharding (zero_group)."""
        return self.dp // self.shard_dp

    @property
    def shard_ranks(self) -> int:
        """Ranks that split one copy of the sharded state: the shard group's data- and
        context-parallel ranks."""
        return self.shard_dp * self.cp

    @property
    def expert_shard_ranks(self) -> int:
        """Ranks that split one copy of a routed expert's sharded state: its expert-data-parallel
        ranks (``edp``), within the shard group under hybrid sharding."""
        return max(1, self.edp * self.shard_dp // self.dp)


@dataclass(frozen=True, slots=True)
class StragglersConfig:
    compute_jitter_sigma: float = 0.0
    slow_fraction: float = 0.0
    slow_factor: float = 1.0
    link_degrade_fraction: float = 0.0
    link_bandwidth_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class FailuresConfig:
    """``failures:``: the horizon and budget, the recovery strategy, and what to override of the
    defaults that follow the job (None: ``sim.recovery`` / ``sim.reliability`` decide)."""

    horizon_days: float = 30.0
    checkpoint_interval_min: float | None = None   # None: "auto" (Young/Daly)
    recovery: str = "restart"            # restart | hot_spare | replica | in_memory_checkpoint
    checkpoint_write_s: float | None = None
    checkpoint_load_s: float | None = None
    detect_s: float | None = None
    restart_s: float | None = None
    swap_s: float | None = None
    storage_GBps: float | None = None    # aggregate checkpoint storage bandwidth (GB = 1e9 B)
    spares: int | None = None            # spare swap units (hosts, racks, cubes); None: see recovery
    repair_h: float = 8.0                # a failed unit back in the spare pool
    fleet_factor: float | None = None    # None: "auto", drawn per history from the chip's fleets
    sdc_detect_h: float = 2.0            # silent data corruption found this long after it starts
    repeat_probability: float = 0.0      # a failed unit fails again after the restart
    weibull_shape: float = 1.0           # 1: exponential lifetimes
    fleet_age_days: float = 365.0        # the fleet's age at the job's start (Weibull hazard)
    planned_per_day: float = 0.0         # planned interruptions (Llama 3: 47 in 54 days = 0.87)
    rate_scale: float = 1.0              # multiplies the failure rates
    tokens: float | None = None          # token budget: report the time to train it
    monte_carlo_runs: int = 100
    step_s: float | None = None          # the step the recovery sees (None: the simulated one)


@dataclass(frozen=True, slots=True)
class CostConfig:
    """The price of a chip-hour: ``cost.usd_per_chip_hour``, else the catalogue's; None where
    neither gives one (every output then reports all but cost, and says so once)."""

    usd_per_chip_hour: float | None


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    source: str                           # file it came from ("<dict>" when built in code)
    cluster: ClusterConfig
    model: ModelSpec
    training: TrainingConfig
    parallelism: ParallelismConfig
    stragglers: StragglersConfig | None
    failures: FailuresConfig | None
    cost: CostConfig
    software: SoftwareProfile             # resolved once by the loader (sim.software.resolve_software)
    seed: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # cluster.shared_with's job, read and checked once with this scenario
    neighbour: Scenario | None = field(default=None, compare=False, repr=False)

    @property
    def recipe(self) -> Recipe | None:
        """The low-precision recipe its linear layers run (``sim.precision.active_recipe``);
        None: every GEMM in BF16."""
        return active_recipe(self.training.precision, self.cluster.chip, self.software)


CLUSTER_KEYS = frozenset({"topology", "chips", "slice", "slices", "twisted", "oversubscription",
                          "sharp", "background_load", "degraded_links", "shared_with",
                          "nvl_domain", "chip"})
TOP_KEYS = frozenset({"name", "cluster", "model", "training", "parallelism", "stragglers",
                      "failures", "cost", "seed", "software"})

# Keys of each scenario section (for the readers in scenario.py and for --set / --over).
SECTION_KEYS: dict[str, frozenset[str]] = {
    "training": frozenset({"seq_len", "global_batch", "micro_batch", "precision", "recompute",
                           "recompute_modules", "logits_dtype",
                           "tokens", "remat_policy", "optimizer_state", "master_weights",
                           "optimizer_offload", "vocab_tiling"}),
    "parallelism": frozenset({"tp", "pp", "cp", "ep", "etp", "zero", "zero_group", "schedule",
                              "virtual_stages", "sequence_parallel", "stage_layers",
                              "first_stage_layers", "last_stage_layers", "microbatch_group",
                              "pipeline_flushes"}),
    "software": frozenset({"framework", "attention", "moe_dispatcher", "ep_overlap", "kernel_tables"}),
    "cost": frozenset({"usd_per_chip_hour"}),
    "stragglers": frozenset(StragglersConfig.__slots__),
    "failures": frozenset(FailuresConfig.__slots__),
}


def scenario_keys() -> dict[str, frozenset[str]]:
    """Every section and its keys (``cluster``, ``model`` included): what --set may name."""
    return {"cluster": CLUSTER_KEYS, "model": MODEL_KEYS, **SECTION_KEYS}
