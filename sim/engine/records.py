"""What the engine plays (a plan per pipeline stage) and what it returns (typed records)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..network.traffic import Traffic

__all__ = ["Schedule", "Segment", "StagePlan", "Interval", "EngineResult"]


@dataclass(frozen=True, slots=True)
class Schedule:
    """How a job's pipeline runs its micro-batches: *pp* stages of *vs* model chunks each, *micro*
    micro-batches per step, the schedule's name (``sim.workload.schedules``: gpipe, 1f1b,
    interleaved) and, for the interleaved one, the micro-batches per round (Llama 3's N; 0: pp)."""

    pp: int
    vs: int
    micro: int
    schedule_kind: str
    group: int = 0
    flushes: int = 1              # schedules of micro / flushes micro-batches, one after another


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of a rank's compute stream: ``kind`` "compute" or a blocking collective of
    ``group`` ("tp", "cp", "ep"), with the load it puts on the links (None: a plain delay)."""

    kind: str
    seconds: float
    group: str = ""
    traffic: Traffic | None = None


@dataclass(frozen=True)
class StagePlan:
    """What one pipeline stage does, in seconds (from the workload, compute and network models),
    and, for its transfers, the link loads the engine shares among them (None: a plain delay)."""

    layer_fwd: tuple[Segment, ...]
    layer_bwd: tuple[Segment, ...]            # recomputation included
    layers_per_chunk: int
    first_fwd: float                          # embedding (chunk 0)
    first_bwd: float
    last_fwd: float                           # head + loss (last chunk)
    last_bwd: float
    p2p_s: float                              # activation / gradient transfer to the next stage
    dp_layer_s: float                         # reduce one layer's gradients over data parallel
    dp_per_microbatch: bool                   # FSDP/ZeRO-3: reduce-scatter every micro-batch
    fsdp_layer_gather_s: float                # ZeRO-3: all-gather one layer's weights (per pass)
    optimizer_s: float
    param_gather_s: float                     # ZeRO-1/2: all-gather updated weights after the step
    replica_layer_s: float = 0.0              # hybrid sharding: all-reduce one layer's gradient
                                              # shard across replicas, once per step
    replica_tail_s: float = 0.0               # ... or of the whole gradient after the backward
    p2p_fwd: Traffic | None = None            # activations to stage + 1 (every rank of the stage)
    p2p_bwd: Traffic | None = None            # gradients to stage - 1
    dp_traffic: Traffic | None = None         # one layer's gradient reduction (+ replica step)
    replica_traffic: Traffic | None = None    # hybrid sharding alone (ZeRO-3: per layer, per step)
    replica_tail: Traffic | None = None       # the replica all-reduce after the backward
    fsdp_fwd: Traffic | None = None           # ZeRO-3 weight gather of one layer (forward)
    fsdp_bwd: Traffic | None = None           # ... gather + gradient reduce-scatter (backward)
    param_traffic: Traffic | None = None      # ZeRO-1/2 updated-weight gather
    chunk_layers: tuple[int, ...] = ()        # layers of each of the stage's chunks (uneven
                                              # stages); () = layers_per_chunk in every chunk

    def layers_of(self, chunk: int) -> int:
        """Layers of the stage's *chunk* (0 .. virtual_stages - 1)."""
        return self.chunk_layers[chunk] if self.chunk_layers else self.layers_per_chunk

    def total_layers(self, vs: int) -> int:
        """Layers of all the stage's *vs* chunks."""
        return sum(self.chunk_layers) if self.chunk_layers else self.layers_per_chunk * vs

    def handed_layer(self) -> tuple[float, Traffic | None] | None:
        """What each backward layer hands to the data-parallel stream, (seconds, load), or None:
        the layer's gradient reduction (with the replica sync) once a step, or only the replica
        sync when the reduction runs every micro-batch (``dp_per_microbatch``)."""
        if not self.dp_per_microbatch and self.dp_layer_s + self.replica_layer_s > 0:
            return self.dp_layer_s + self.replica_layer_s, self.dp_traffic
        if self.dp_per_microbatch and self.replica_layer_s > 0:
            return self.replica_layer_s, self.replica_traffic
        return None

    def fsdp_exposure(self, kind: str) -> tuple[float, Traffic | None]:
        """ZeRO-3 in pass *kind* ("F" or "B"): the seconds a layer's weight gather (and, in the
        backward, its gradient reduce-scatter) takes beyond the layer's compute, which the step
        leaves exposed, and the load it puts on the links (prefetched during the previous
        layer, so only that excess shows)."""
        if not self.fsdp_layer_gather_s:
            return 0.0, None
        layer = self.layer_fwd if kind == "F" else self.layer_bwd
        comp = sum(s.seconds for s in layer if s.kind == "compute")
        expo = max(0.0, self.fsdp_layer_gather_s + (self.dp_layer_s if kind == "B" else 0.0) - comp)
        return expo, (self.fsdp_fwd if kind == "F" else self.fsdp_bwd)


@dataclass(frozen=True, slots=True)
class Interval:
    """One thing a rank did, in simulated seconds: ``kind`` is "compute", "comm",
    "pipeline_bubble", "straggler_wait", "dp", "exposed_dp" or "optimizer"."""

    rank: int
    stage: int
    kind: str
    label: str
    start_s: float
    end_s: float


@dataclass
class EngineResult:
    step_time_s: float
    breakdown_s: dict[str, float]
    critical_stage: int
    intervals: list[Interval] = field(default_factory=list)
    events: int = 0
    straggler_ranks: dict[int, float] = field(default_factory=dict)
    network_solves: int = 0               # max-min solves of the shared links (0: nothing met)
