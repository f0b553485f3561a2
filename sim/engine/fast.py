"""The step without simpy: the work estimate that guards long runs, and the closed-form longest
path the plan search screens layouts with."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..workload.schedules import Step
from ..workload.schedules import schedule as schedule_steps
from .records import EngineResult, Schedule, StagePlan

__all__ = ["estimate_events", "fast_step", "step_floor"]


def estimate_events(plan: list[StagePlan], *, vs: int, micro: int, ranks_per_stage: int = 1,
                    simulations: int = 1, delays: set[int] | None = None,
                    quiet: list[set[int]] | None = None) -> int:
    """About how many simpy events ``simulate`` will process (within a factor of ~2; the
    benchmark's events/s turns it into seconds), so that a plan too big to play can be refused
    before it runs. Every rank plays micro x vs forward and backward passes, each with its
    dependency and hand-over events. A representative rank (``ranks_per_stage`` 1, no trace)
    plays a pass (forward or backward) whose layer's transfers, and ZeRO-3's exposed gather,
    are all plain delays (ids in *delays*: ``private_loads``) as one wake-up a chunk (one a
    layer in the last backward of each chunk, with a gradient reduction each); one whose
    transfers are delays or, for its stage, quiet (*quiet*: ``step_loads``) as one a layer;
    otherwise every segment of every layer is a timeout and a resume."""
    per_rank = 0.0
    for stage, sp in enumerate(plan):
        layers = sp.total_layers(vs)                # all of the stage's chunks
        for kind, layer in (("F", sp.layer_fwd), ("B", sp.layer_bwd)):
            loads = [id(s.traffic) for s in layer if s.kind != "compute" and s.traffic is not None]
            batched = (delays is not None and ranks_per_stage == 1
                       and not _exposed_load(sp, kind, delays))
            plain_ids, quiet_ids = delays or set(), quiet[stage] if quiet is not None else set()
            fused = batched and all(k in plain_ids for k in loads)
            calm = batched and all(k in plain_ids or k in quiet_ids for k in loads)
            if fused:
                per_rank += micro * 4 * vs
                if kind == "B" and sp.handed_layer() is not None:
                    per_rank += layers * 4
            elif calm:
                per_rank += micro * (layers * 2 + 2 * vs)
            else:
                per_rank += micro * (layers * (len(layer) + 0.5) + 2 * vs)
    return int(simulations * ranks_per_stage * per_rank)


def _exposed_load(sp: StagePlan, kind: str, delays: set[int] | None) -> bool:
    """Whether ZeRO-3's weight gather leaves part of a layer exposed on links a transfer of
    another stream may meet (the engine then plays every segment: ``step._exposure``)."""
    expo, base = sp.fsdp_exposure(kind)
    return expo > 0 and base is not None and (delays is None or id(base) not in delays)


def fast_step(plan: list[StagePlan], schedule: Schedule) -> EngineResult:
    """The step ``simulate`` plays in representative mode (no jitter, no per-rank barriers), as a
    longest-path computation over the schedule's dependency graph instead of simpy events.

    Every rule is the engine's, in the same order: a stage runs its schedule's steps one after
    the other, each after the step it depends on (the previous chunk's forward, the next chunk's
    backward) plus the point-to-point delay; a step is its extras and its layers' segments (with
    ZeRO-3's exposed traffic); the gradient reductions of each chunk's last backward queue on the
    data-parallel stream as its layers finish; then the stream's tail, the optimizer and the
    parameter gather. It costs a few operations per (stage, micro-batch, chunk) instead of events
    per layer: the screening path of ``clustersim plan`` (tests/test_engine.py checks it against
    ``simulate``).

    Transfers are delays of their times alone: it is ``simulate`` without ``capacity_Bps``, so
    where transfers of the step share links it is optimistic; ``clustersim plan`` screens with it
    and confirms the layout it picks with the full engine.
    """
    pp = schedule.pp
    done: dict[tuple[str, int, int], float] = {}
    lanes = [_lane(schedule_steps(schedule.schedule_kind, st, pp, schedule.micro, schedule.vs,
                                  schedule.group, schedule.flushes), plan[st]) for st in range(pp)]
    # PERF: a stage plays until it waits on a step not yet played, then sleeps until that step
    # is (instead of every stage tried round after round); each stage's times depend only on
    # its dependencies' ends, so the order stages are played in changes nothing.
    waiting: dict[tuple[str, int, int], int] = {}
    ready = list(range(pp))
    while ready:
        st = ready.pop()
        dep = _play(lanes[st], st, plan[st], done, pp, pp * schedule.vs, waiting, ready)
        if dep is not None:
            waiting[dep] = st
    assert all(lane.pos == len(lane.steps) for lane in lanes), "schedule dependencies form a cycle"
    return _result(plan, lanes)


def step_floor(plan: list[StagePlan], schedule: Schedule, stages: Sequence[int] | None = None,
               passes: Sequence[tuple[float, float]] | None = None) -> float:
    """A floor under ``fast_step(plan, schedule).step_time_s`` in a few operations a (stage,
    chunk): a stage plays its steps one after another, so it finishes no sooner than their
    seconds summed plus its optimizer and parameter gather (waits for other stages, the
    pipeline's bubble and the data-parallel stream's exposed rest only add to that), and the
    step no sooner than any stage. *plan* may hold some stages only (``plan_stages(...,
    stages=)``), *stages* naming them (None: every stage, in order). With *passes* (every
    stage's floor under one forward and one backward step: ``sim.stage_floors.pass_floors``) the
    pipeline's fill and drain too: a stage's first forward waits for that micro-batch's
    forward through every stage before it, and its last backward's gradient then goes back
    through them, the first stage finishing no sooner. Lowered by a relative 1e-9 so that sums
    taken in another order than ``fast_step``'s never lift it above the step. The plan search
    skips the layouts whose floor lies above the steps it ranks."""
    pp = schedule.pp
    n_chunks = pp * schedule.vs
    floor = 0.0
    for st, sp in zip(range(pp) if stages is None else stages, plan):
        lane = _lane((), sp)
        busy = 0.0
        for (kind, c), n in _step_counts(schedule, st):
            before, layer, _, n_layers, after, *_ = _shape(sp, lane, kind, c, c * pp + st, False,
                                                           n_chunks, pp)
            busy += n * (before + n_layers * layer + after)
        fill = drain = 0.0
        if passes is not None and st > 0:
            first, last = _end_kinds(schedule, st)
            fill = sum(f for f, _ in passes[:st]) if first == "F" else 0.0
            drain = sum(b for _, b in passes[:st]) if last == "B" else 0.0
        tail = sp.replica_tail_s + sp.optimizer_s + sp.param_gather_s
        floor = max(floor, fill + busy + max(tail, drain))
    return floor * (1 - 1e-9)


@functools.lru_cache(maxsize=4096)
def _end_kinds(schedule: Schedule, st: int) -> tuple[str, str]:
    """The kinds of stage *st*'s first and last steps in *schedule*."""
    steps = schedule_steps(schedule.schedule_kind, st, schedule.pp, schedule.micro, schedule.vs,
                           schedule.group, schedule.flushes)
    return steps[0][0], steps[-1][0]


@functools.lru_cache(maxsize=4096)
def _step_counts(schedule: Schedule, st: int) -> tuple[tuple[tuple[str, int], int], ...]:
    """How many steps of each (kind, chunk) stage *st* plays in *schedule*."""
    steps = schedule_steps(schedule.schedule_kind, st, schedule.pp, schedule.micro, schedule.vs,
                           schedule.group, schedule.flushes)
    return tuple(sorted(Counter((k, c) for k, _, c in steps).items()))


@dataclass(slots=True)
class _Lane:
    """One stage while ``fast_step`` plays it (mutable, private to one call): its schedule steps,
    how far it got and the seconds it spent so far."""

    steps: tuple[Step, ...]
    last_b: dict[int, int]                   # chunk -> micro-batch of its last backward
    seg_s: dict[str, tuple[float, float]]    # "F"/"B" -> one layer's (compute, other segments) s
    pos: int = 0                             # next step to play
    now: float = 0.0
    dp_free: float = 0.0                     # when the data-parallel stream is next free
    compute_s: float = 0.0
    comm_s: float = 0.0
    bubble_s: float = 0.0
    shapes: dict[tuple[str, int, bool], tuple[float, float, float, int, float, float, float, float]] = \
        field(default_factory=dict)              # (kind, chunk, reduces) -> ``_shape``


def _lane(steps: tuple[Step, ...], sp: StagePlan) -> _Lane:
    """The stage's lane before its first step: the last backward of each chunk, one layer's times."""
    last_b: dict[int, int] = {}
    for k, m, cc in steps:
        if k == "B" and m > last_b.get(cc, -1):
            last_b[cc] = m
    seg_s = {k: (sum(x.seconds for x in segs if x.kind == "compute"),
                 sum(x.seconds for x in segs if x.kind != "compute"))
             for k, segs in (("F", sp.layer_fwd), ("B", sp.layer_bwd))}
    return _Lane(steps, last_b, seg_s)


def _shape(sp: StagePlan, lane: _Lane, kind: str, c: int, g: int, reduce: bool,
           n_chunks: int, pp: int) -> tuple[float, float, float, int, float, float, float, float]:
    """What a step of *kind* on global chunk *g* (the stage's chunk *c*) does, whatever its
    micro-batch: (extra before its layers, one layer's time, the gradient reduction each layer
    queues, its layers, extra after them, compute and transfer seconds it adds, the p2p delay
    before its successor may start)."""
    if kind == "F":
        extra = (sp.first_fwd if g == 0 else 0.0) + (sp.last_fwd if g == n_chunks - 1 else 0.0)
    else:
        extra = (sp.first_bwd if g == 0 else 0.0) + (sp.last_bwd if g == n_chunks - 1 else 0.0)
    comp, comm = lane.seg_s[kind]
    expo = sp.fsdp_exposure(kind)[0]
    layer = comp + comm + expo
    handed = sp.handed_layer() if reduce else None
    item = handed[0] if handed is not None else 0.0
    before = extra if extra and kind == "F" and g == 0 else 0.0
    after = extra if extra and not (kind == "F" and g == 0) else 0.0
    n_layers = sp.layers_of(c)
    crosses = (kind == "F" and g < n_chunks - 1) or (kind == "B" and g > 0)
    return (before, layer, item, n_layers, after, n_layers * comp + extra,
            n_layers * (comm + expo), sp.p2p_s if crosses and pp > 1 else 0.0)


def _play(lane: _Lane, st: int, sp: StagePlan, done: dict[tuple[str, int, int], float], pp: int,
          n_chunks: int, waiting: dict[tuple[str, int, int], int],
          ready: list[int]) -> tuple[str, int, int] | None:
    """Play stage *st*'s next steps in order until one waits on a step not yet in *done*; that
    step's key (None: the stage is finished). Each step's end, p2p delay included, goes into
    *done*, and the stage *waiting* on it into *ready*."""
    steps, last_b, shapes = lane.steps, lane.last_b, lane.shapes
    pos = lane.pos
    blocked = None
    now, dp_free = lane.now, lane.dp_free
    while pos < len(steps):
        kind, m, c = steps[pos]
        g = c * pp + st
        dep = (("F", m, g - 1) if kind == "F" and g > 0 else
               ("B", m, g + 1) if kind == "B" and g < n_chunks - 1 else None)
        if dep is not None and dep not in done:
            blocked = dep
            break
        t = now
        if dep is not None and done[dep] > t:
            lane.bubble_s += done[dep] - t
            t = done[dep]
        # PERF: a step's shape depends on its kind, chunk and whether it reduces, not on its
        # micro-batch: worked out once (the same expressions, so the same sums)
        reduce = kind == "B" and m == last_b[c]
        shape = shapes.get((kind, c, reduce))
        if shape is None:
            shape = shapes[(kind, c, reduce)] = _shape(sp, lane, kind, c, g, reduce, n_chunks, pp)
        before, layer, item, n_layers, after, compute_add, comm_add, p2p = shape
        if before:
            t += before
        start_layers = t
        if item:
            for li in range(n_layers):
                end = start_layers + (li + 1) * layer
                dp_free = max(dp_free, end) + item
        t = start_layers + n_layers * layer
        if after:
            t += after
        lane.compute_s += compute_add
        lane.comm_s += comm_add
        key = (kind, m, g)
        done[key] = t + p2p
        woken = waiting.pop(key, None)
        if woken is not None:
            ready.append(woken)
        now = t
        pos += 1
    lane.pos, lane.now, lane.dp_free = pos, now, dp_free
    return blocked


def _result(plan: list[StagePlan], lanes: list[_Lane]) -> EngineResult:
    """The step: every stage's tail (the data-parallel stream's exposed rest, the optimizer, the
    parameter gather), the first stage to finish last and its breakdown."""
    finish = []
    exposed: list[float] = []
    for lane, sp in zip(lanes, plan):
        t = lane.now
        # the stream's rest, then the replica all-reduce after the backward (0 s: none)
        exposed_dp = max(lane.dp_free, t) + sp.replica_tail_s - t
        t += exposed_dp + sp.optimizer_s + sp.param_gather_s
        exposed.append(exposed_dp)
        finish.append(t)
    step = max(finish)
    crit = min(st for st in range(len(lanes)) if finish[st] == step)
    b, sp = lanes[crit], plan[crit]
    breakdown = {"compute": b.compute_s, "exposed_comm": b.comm_s + sp.param_gather_s + exposed[crit],
                 "pipeline_bubble": b.bubble_s, "straggler_wait": 0.0,
                 "optimizer": sp.optimizer_s}
    breakdown["other"] = max(0.0, step - sum(breakdown.values()))
    return EngineResult(step, breakdown, crit)
