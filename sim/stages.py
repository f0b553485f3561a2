"""A scenario's work as per-stage plans: seconds of every segment and transfer of a pipeline
stage, and the link loads each transfer puts on the fabric (``sim.engine.StagePlan``).

This is where the step's modelling decisions about exposure live, each with its source:
tensor-parallel collectives hidden behind the GEMMs they feed (userbuffers), the context-parallel
KV ring hidden behind attention, the gradient reduction's bytes and operation per ZeRO stage,
hybrid sharding's replica all-reduce, ZeRO-3's weight gathers, the ZeRO-1/2 parameter gather
hidden behind the next forward, the optimizer's traffic and the pipeline sends. Compute ops become
seconds through ``sim.compute.model``, collectives through ``sim.collectives.CollectiveModel``.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import calibration as cal
from .collectives import CollectiveModel, CollectiveResult
from .collectives.traffic import collective_traffic, p2p_traffic
from .compute.model import ComputeModel
from .config import Scenario
from .engine import Segment, StagePlan
from .network.traffic import Traffic
from .stage_ends import ends_s
from .tp_overlap import tp_exposed_s
from .workload.activations import host_transfer_s, offload_exposed_s
from .workload.layout import Layout
from .workload.memory import optimizer_bytes_per_param, optimizer_step_bytes_per_param
from .workload.transformer import Item, LayerWork, Op, Workload

if TYPE_CHECKING:
    from .hardware import Chip
    from .software import SoftwareProfile

__all__ = ["compute_model", "plan_stages", "StackEfficiency"]

StackEfficiency = dict[tuple[str, str, str], float]


def compute_model(scn: Scenario, stack_efficiency: StackEfficiency | None = None) -> ComputeModel:
    """The compute model of *scn*: its chip, precision and software profile."""
    stack = None if stack_efficiency is None else tuple(sorted(stack_efficiency.items()))
    return _compute_model(scn.cluster.chip, scn.training.precision, scn.software, stack)


# PERF: one compute model per (chip, precision, software profile, stack efficiencies) in a
# process, so its memo of op times serves every layout a plan screens and every run a validation
# suite plays (an op's time is a pure function of the op and these four).
@functools.lru_cache(maxsize=256)
def _compute_model(chip: Chip, precision: str, software: SoftwareProfile,
                   stack: tuple[tuple[tuple[str, str, str], float], ...] | None) -> ComputeModel:
    return ComputeModel(chip, precision, software, None if stack is None else dict(stack))


_GROUP_OF = {"tp": Layout.tp_group, "cp": Layout.cp_group, "ep": Layout.ep_group, "etp": Layout.etp_group,
             "dp": Layout.dp_group}                # a collective's group on a stage, by its kind


def _segments(items: tuple[Item, ...], cm: ComputeModel, net: CollectiveModel,
              groups: Mapping[str, list[list[int]]] | None, lay: Layout, stage: int,
              backward_from: int = 1 << 62) -> tuple[Segment, ...]:
    """A layer's items as compute segments and blocking collectives; with *groups* (every group of each
    kind in this stage) each carries the load of all of them. From item *backward_from* on: the backward."""
    out: list[Segment] = []
    ops: list[Op] = []
    members: dict[str, list[int]] = {}
    pool: float | None = None                     # the backward's wgrad time (sim.tp_overlap)
    for i, it in enumerate(items):
        if isinstance(it, Op):
            ops.append(it)
            continue
        if ops:
            out.append(Segment("compute", cm.stream_time_s(ops)))
            ops = []
        group = members.get(it.group)
        if group is None:
            group = members[it.group] = _GROUP_OF[it.group](lay, stage)
        size = max(1, it.size_bytes)
        seconds = net.time(it.op, size, group).time_s
        if it.group == "tp" and cm.profile.tp_comm_overlap and it.op in ("allgather", "reducescatter"):
            seconds, pool = tp_exposed_s(items, i, cm, seconds, backward_from, pool)
        load = (collective_traffic(net, it.op, size, groups[it.group], seconds=seconds,
                                   label=it.group) if groups is not None else None)
        out.append(Segment(it.group, seconds, it.group, load))
    if ops:
        out.append(Segment("compute", cm.stream_time_s(ops)))
    return tuple(out)


def _offload_segment(scn: Scenario, segs: tuple[Segment, ...]) -> tuple[Segment, ...]:
    """A compute-stream segment for what a layer's activation offload leaves exposed in a pass."""
    exposed = offload_exposed_s(scn, sum(x.seconds for x in segs if x.kind == "compute"))
    return (Segment("compute", exposed),) if exposed > 0 else ()


def _layer_passes(wl: Workload, cm: ComputeModel, net: CollectiveModel, lay: Layout, stage: int,
                  traffic: bool) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    """The stage's mean layer's forward and backward (recomputation included) segments: each
    layer kind's passes (``_kind_passes``) scaled by its share of the stage's layers
    (``Workload.stage_mix``), one after the other; a uniform stack is its one layer unscaled."""
    fwd: tuple[Segment, ...] = ()
    bwd: tuple[Segment, ...] = ()
    for layer, weight in wl.stage_mix(stage):
        f, b = _kind_passes(wl, layer, cm, net, lay, stage, traffic)
        fwd += _scaled(f, weight)
        bwd += _scaled(b, weight)
    return fwd, bwd


def _scaled(segs: tuple[Segment, ...], weight: float) -> tuple[Segment, ...]:
    """*segs* for *weight* of a layer (``_scale`` each)."""
    return segs if weight == 1.0 else tuple(_scale(x, weight) for x in segs)


def _scale(seg: Segment, factor: float) -> Segment:
    """*seg* for *factor* of its time: its load keeps its rate, so it moves *factor* of its bytes."""
    load = seg.traffic.with_seconds(seg.traffic.seconds * factor) if seg.traffic is not None else None
    return Segment(seg.kind, seg.seconds * factor, seg.group, load)


def _kind_passes(wl: Workload, layer: LayerWork, cm: ComputeModel, net: CollectiveModel,
                 lay: Layout, stage: int, traffic: bool
                 ) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    """One layer's forward and backward (recomputation included) segments on *stage*: its
    kernels and blocking collectives, the exposed activation offload, and the context-parallel KV
    ring's time beyond the attention it hides behind."""
    scn = wl.scenario
    groups = lay.groups(stage) if traffic else None
    fwd, bwd = (_passes_alone(layer, cm, net, lay, stage) if groups is None else
                _layer_segments(layer, cm, net, groups, lay, stage))
    if cm.profile.ep_comm_overlap and scn.parallelism.microbatches > 1:
        fwd, bwd = _ep_overlap(fwd, bwd, _comm_sm_share(cm))
    elif _syncs_on_token_counts(scn, layer, cm):
        fwd += (Segment("compute", cal.MOE_SYNC_IDLE_S),)
    if scn.training.offloads:           # activation offload: the exposed host-link time
        fwd += _offload_segment(scn, fwd)
        bwd += _offload_segment(scn, bwd)
    if lay.cp > 1 and layer.cp_kv_bytes:
        ring = lay.cp_group(stage)
        kv = net.time("sendrecv", layer.cp_kv_bytes, ring).time_s * (lay.cp - 1)

        def attn(items: tuple[Item, ...]) -> float:
            return sum(cm.op_time_s(o) for o in items if isinstance(o, Op) and o.kind == "attention")
        cp_f, cp_b = max(0.0, kv - attn(layer.forward)), max(0.0, 2 * kv - attn(layer.backward))
        ring_load = (collective_traffic(net, "sendrecv", layer.cp_kv_bytes, lay.cp_groups(stage),
                                        label="cp") if traffic else None)
        fwd += (Segment("cp", cp_f, "cp", ring_load and ring_load.with_seconds(cp_f)),)
        bwd += (Segment("cp", cp_b, "cp", ring_load and ring_load.with_seconds(cp_b)),)
    return fwd, bwd


# PERF: a plan's layouts share their (interned) layers and often their ranks' layout: each layer's
# segments alone on a network per (layout, stage) once, by identity; a network's go with it.
_ALONE: weakref.WeakKeyDictionary[CollectiveModel, dict[Any, Any]] = weakref.WeakKeyDictionary()


def _passes_alone(layer: LayerWork, cm: ComputeModel, net: CollectiveModel, lay: Layout,
                  stage: int) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    """*layer*'s forward and backward segments on *stage*, its transfers alone (no loads)."""
    memo = _ALONE.setdefault(net, {})
    key = (id(layer), id(cm), lay, stage)
    hit = memo.get(key)
    if hit is not None and hit[0] is layer and hit[1] is cm:
        return hit[2], hit[3]
    if len(memo) >= 8192:
        memo.clear()
    fwd, bwd = _layer_segments(layer, cm, net, None, lay, stage)
    memo[key] = (layer, cm, fwd, bwd)
    return fwd, bwd


def _layer_segments(layer: LayerWork, cm: ComputeModel, net: CollectiveModel,
                    groups: Mapping[str, list[list[int]]] | None, lay: Layout, stage: int
                    ) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    """*layer*'s forward, and its recomputation then backward, as ``_segments``."""
    return (_segments(layer.forward, cm, net, groups, lay, stage),
            _segments(layer.recompute + layer.backward, cm, net, groups, lay, stage, len(layer.recompute)))


def _syncs_on_token_counts(scn: Scenario, layer: LayerWork, cm: ComputeModel) -> bool:
    """Whether a layer's forward waits for the host: a dropless MoE layer (its per-expert token
    counts known only at run time) on a stack that launches kernels eagerly from the host, which
    copies the counts back and synchronizes before the dispatch (``cal.MOE_SYNC_IDLE_S``). A
    token-dropping capacity fixes the shapes; XLA compiles them static."""
    moe = scn.model.moe
    return (layer.expert_params > 0 and moe is not None and moe.capacity_factor is None
            and cm.gpu and not cm.profile.runs_on_tpu)


def _comm_sm_share(cm: ComputeModel) -> float:
    """The share of the chip's SMs the overlapped expert-parallel transfers hold
    (``sim.calibration.EP_COMM_SMS``: DeepEP's kernels or NCCL's channels, one block each)."""
    return min(0.5, cal.EP_COMM_SMS[cm.profile.moe_dispatcher] / cm.sms) if cm.gpu else 0.0


def _ep_overlap(fwd: tuple[Segment, ...], bwd: tuple[Segment, ...], sm_share: float
                ) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    """Megatron's combined 1F1B (``SoftwareProfile.ep_comm_overlap``): in the steady state a
    layer's forward for one micro-batch runs beside its backward for another, each pass's
    expert-parallel dispatch and combine under the other pass's compute. What a pass's EP
    transfers take beyond the other pass's compute stays exposed, spread over them; the compute
    they hide behind runs slower beside them: on the SMs they leave (*sm_share* of them busy
    moving tokens: sm_share / (1 - sm_share) of compute a hidden second) and, on a GPU, never
    faster than the measured ``cal.EP_OVERLAP_SLOWDOWN`` a hidden second (their HBM and L2
    traffic too), charged to the pass."""
    def hide(own: tuple[Segment, ...], other: tuple[Segment, ...]) -> tuple[Segment, ...]:
        ep = sum(x.seconds for x in own if x.group in ("ep", "etp"))
        if ep <= 0:
            return own
        budget = sum(x.seconds for x in other if x.kind == "compute")
        keep = max(0.0, ep - budget) / ep
        hidden = ep * (1 - keep)
        out = tuple(_scale(x, keep) if x.group in ("ep", "etp") else x for x in own)
        slowed = hidden * max(sm_share / (1 - sm_share), cal.EP_OVERLAP_SLOWDOWN if sm_share else 0.0)
        return out + ((Segment("compute", slowed),) if slowed > 0 else ())
    return hide(fwd, bwd), hide(bwd, fwd)


class _Free:
    """A network on which every transfer takes 0 s (``plan_stages(..., floor_only=True)``)."""

    _NONE = CollectiveResult("allreduce", "none", "none", 1, 1, 0.0, 0.0, 0.0)

    def time(self, *_: object) -> CollectiveResult:
        return self._NONE

    time_concurrent = time


_FREE: Any = _Free()


@dataclass(frozen=True)
class _DataParallel:
    """A stage's data-parallel work: its transfers' times alone on the network (seconds, 0: none),
    what they move, and the optimizer step over the stage's share of the parameters."""

    op: str                    # the gradient reduction: reduce-scatter under ZeRO, else all-reduce
    grad_bytes: int            # one layer's bf16 gradients, routed experts' apart
    expert_bytes: int          # one layer's routed-expert gradients (reduced over EDP)
    layer_s: float             # reduce one layer's gradients over the shard group
    replica_s: float           # hybrid sharding: all-reduce the reduced shard across replicas
    tail_bytes: int            # ... once after the backward instead (``slice_reduce_bytes``), 0: no
    tail_s: float              # that all-reduce's time alone on the network, DCN ring steps too
    per_microbatch: bool       # ZeRO-3 (FSDP): reduce-scatter every micro-batch
    gather_s: float            # ZeRO-3: all-gather one layer's weights
    param_gather_s: float      # ZeRO-1/2: gather the updated weights, what stays exposed
    params: int                # the stage's parameters (its layers and embeddings)
    chunk_layers: tuple[int, ...]  # the stage's real layers per model chunk
    optimizer_s: float


def _data_parallel(wl: Workload, cm: ComputeModel, net: CollectiveModel, lay: Layout, stage: int,
                   fwd: tuple[Segment, ...], transfers: bool = True) -> _DataParallel:
    """The stage's data-parallel work; without *transfers*, every transfer at 0 s (a floor's)."""
    if not transfers:
        net = _FREE
    scn = wl.scenario
    par = scn.parallelism
    dpg = lay.shard_group(stage) if transfers else []   # all dp ranks unless hybrid sharding
    shard = lay.shard_dp * lay.cp                       # (its ranks: only where a transfer is timed)
    # bf16 gradients: the performance recipes reduce in bf16 (NeMo's and Megatron-Bridge's perf
    # configs set grad_reduce_in_fp32 = False, against bf16_mixed's True)
    n_layers = max(1, len(wl.stage_layers(stage)))
    layer_params = wl.stage_params(stage) / n_layers    # the stage's mean layer
    expert_params = wl.stage_expert_params(stage) / n_layers
    grad_bytes = max(1, round(2 * (layer_params - expert_params)))
    expert_bytes = round(2 * expert_params)
    dp_op = "reducescatter" if par.zero >= 1 else "allreduce"
    dp_layer = net.time(dp_op, grad_bytes, dpg).time_s if shard > 1 else 0.0
    # Routed experts' gradients are reduced over the expert-data-parallel ranks (MoE parallel
    # folding: the stage's ranks / (ep x etp)), not the dense data-parallel group.
    if expert_bytes and lay.edp > 1:
        dp_layer += net.time(dp_op, expert_bytes, lay.edp_group(stage)).time_s
    # Hybrid sharding: each rank's reduced gradient shard is then all-reduced with the ranks
    # holding the same shard in the other replicas, every shard position at once: layer by
    # layer, or (TPU slices under a stack with ``slice_reduce_bytes``) exposed: the shard of the
    # stage's whole gradient in the weights' dtype after the backward, plus each layer's DCN ring
    # steps, 2 (slices - 1) a layer, at ``cal.TPU_DCN_LAYER_STEP_S`` each.
    params = wl.stage_params(stage) + wl.embed_params * ((stage == 0) + (stage == par.pp - 1))
    groups = lay.replica_groups(stage) if lay.replicas > 1 else []
    slices = (len(net.group_info(groups[0]).by_pod)         # the slices a replica group spans
              if transfers and scn.cluster.pods > 1 and groups else 1)
    after = cm.profile.slice_reduce_bytes if slices > 1 else 0
    tail_bytes = max(1, round(after * params / shard)) if after else 0
    tail = (net.time_concurrent("allreduce", tail_bytes, groups).time_s
            + n_layers * 2 * (slices - 1) * cal.TPU_DCN_LAYER_STEP_S if tail_bytes else 0.0)
    replica = (net.time_concurrent("allreduce", max(1, grad_bytes // shard), groups).time_s
               if groups and not after else 0.0)
    fsdp = par.zero >= 3 and shard > 1
    gather = net.time("allgather", grad_bytes, dpg).time_s if fsdp else 0.0
    # ZeRO-3 shards the routed experts over their expert shard group too (sim/workload/memory.py),
    # so each pass gathers them there before their GEMMs, beside the dense weights' gather
    # (FSDP2 wraps the experts on the expert-sharding mesh dimension: dp_shard / ep).
    if fsdp and expert_bytes and lay.expert_shard > 1:
        gather += net.time("allgather", expert_bytes, lay.expert_shard_group(stage)).time_s
    chunk_layers = tuple(par.stage_chunk_layers(stage))
    layers = sum(chunk_layers)                        # this stage's real layers
    experts = wl.stage_expert_params(stage)        # sharded over their EDP ranks (memory.py)
    opt_params = ((params - experts) / shard + experts / par.expert_shard_ranks if par.zero >= 1
                  else params)
    tr = scn.training
    optimizer = cm.optimizer_s(optimizer_step_bytes_per_param(tr.optimizer_state, tr.master_weights)
                               * opt_params)
    if tr.optimizer_offload:
        # the state in host memory streams in and is written back at once (the host link is full
        # duplex): the update takes no less than its one-way trip
        state_B = optimizer_bytes_per_param(tr.optimizer_state, tr.master_weights) * opt_params
        optimizer = max(optimizer, host_transfer_s(scn, state_B))
    pg = (net.time("allgather", max(1, 2 * params), dpg).time_s
          if par.zero in (1, 2) and shard > 1 else 0.0)
    if pg and cm.profile.param_gather_overlap:
        # Megatron --overlap-param-gather: each chunk's updated weights are gathered while the
        # next step's forward runs the chunks before it; only what exceeds one micro-batch's
        # forward over the stage stays exposed.
        pg = max(0.0, pg - sum(x.seconds for x in fwd if x.kind == "compute") * layers)
    return _DataParallel(dp_op, grad_bytes, expert_bytes, dp_layer, replica, tail_bytes, tail, fsdp, gather,
                         pg, params, chunk_layers, optimizer)


def plan_stages(wl: Workload, net: CollectiveModel, stack_efficiency: StackEfficiency | None = None,
                traffic: bool = True, offset: int = 0,
                stages: Sequence[int] | None = None, floor_only: bool = False) -> list[StagePlan]:
    """Per-stage plans: seconds of every segment and transfer alone on the network and, with
    *traffic* (the full engine; the plan screen skips it), the link loads of each transfer for
    all the groups that run it at once. *offset*: the job's first chip (a second job).
    *stages*: only these stages' plans, in that order (the plan screen's floor); None: all.
    *floor_only*: the data-parallel and pipeline transfers at 0 s (they cost the most to work
    out and never shorten a step: ``sim.engine.step_floor`` of these plans is a floor too)."""
    par = wl.scenario.parallelism
    lay = Layout.of(par, offset)
    cm = compute_model(wl.scenario, stack_efficiency)
    plans = []
    for stage in range(par.pp) if stages is None else stages:
        fwd, bwd = _layer_passes(wl, cm, net, lay, stage, traffic)
        dp = _data_parallel(wl, cm, net, lay, stage, fwd, transfers=not floor_only)
        if par.pp > 1 and not floor_only:
            a, b = lay.stage_pair(stage)
            p2p_r = net.time("sendrecv", max(1, wl.pp_bytes), [a, b])
            p2p, p2p_lat = p2p_r.time_s, p2p_r.latency_s
        else:
            p2p = p2p_lat = 0.0
        loads = _stage_loads(net, lay, stage, wl, dp, (p2p, p2p_lat)) if traffic else {}
        first_f, first_b, last_f, last_b = ends_s(wl, cm)       # PERF: once a set (stage_ends)
        plans.append(StagePlan(
            layer_fwd=fwd, layer_bwd=bwd, layers_per_chunk=wl.layers_per_chunk,
            chunk_layers=dp.chunk_layers if par.uneven else (),
            first_fwd=first_f, first_bwd=first_b, last_fwd=last_f, last_bwd=last_b, p2p_s=p2p,
            dp_layer_s=dp.layer_s, dp_per_microbatch=dp.per_microbatch,
            fsdp_layer_gather_s=dp.gather_s, replica_layer_s=dp.replica_s, replica_tail_s=dp.tail_s,
            optimizer_s=dp.optimizer_s, param_gather_s=dp.param_gather_s, **loads))
    return plans


def _stage_loads(net: CollectiveModel, lay: Layout, stage: int, wl: Workload, dp: _DataParallel,
                 p2p: tuple[float, float]) -> dict[str, Traffic | None]:
    """The link loads of a stage's transfers, each for every group that runs it at once: the
    gradient reductions of all its shard groups (+ the replica all-reduces), ZeRO-3's gathers,
    the parameter gather, and the pipeline sends of all its ranks to the next and previous
    stage."""
    shards = lay.shard_groups(stage)
    shard = len(shards[0])
    dp_load = (collective_traffic(net, dp.op, dp.grad_bytes, shards, label="dp")
               if shard > 1 else None)
    if dp.expert_bytes and lay.edp > 1:
        experts = collective_traffic(net, dp.op, dp.expert_bytes, lay.edp_groups(stage), label="dp")
        dp_load = dp_load.then(experts) if dp_load is not None else experts
    rep_load = (collective_traffic(net, "allreduce", max(1, dp.grad_bytes // shard),
                                   lay.replica_groups(stage), concurrent=True, label="dp")
                if lay.replicas > 1 and not dp.tail_bytes else None)
    both = [x for x in (dp_load, rep_load) if x is not None]
    dp_total = both[0].then(both[1]) if len(both) == 2 else (both[0] if both else None)
    out: dict[str, Traffic | None] = {"dp_traffic": dp_total, "replica_traffic": rep_load}
    if dp.tail_bytes:
        out["replica_tail"] = collective_traffic(net, "allreduce", dp.tail_bytes, lay.replica_groups(stage),
                                                 concurrent=True, label="dp").with_latency(dp.tail_s)
    if dp.gather_s:
        ag = collective_traffic(net, "allgather", dp.grad_bytes, shards, label="dp")
        if dp.expert_bytes and lay.expert_shard > 1:
            ag = ag.then(collective_traffic(net, "allgather", dp.expert_bytes,
                                            lay.expert_shard_groups(stage), label="dp"))
        out["fsdp_fwd"] = ag
        out["fsdp_bwd"] = ag.then(dp_load) if dp_load is not None else ag
    if dp.param_gather_s:
        pg_load = collective_traffic(net, "allgather", max(1, 2 * dp.params), shards, label="dp")
        out["param_traffic"] = pg_load.with_seconds(dp.param_gather_s) if pg_load.seconds else None
    if lay.pp > 1 and p2p[0]:
        nbytes = max(1, wl.pp_bytes)
        out["p2p_fwd"] = p2p_traffic(net, lay.stage_pairs(stage, 1), nbytes, *p2p)
        out["p2p_bwd"] = p2p_traffic(net, lay.stage_pairs(stage, -1), nbytes, *p2p)
    return out
