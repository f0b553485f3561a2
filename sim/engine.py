"""The simpy engine: every pipeline stage plays its schedule on a compute stream, waits for the
activations and gradients of its neighbours, and reduces gradients on a data-parallel stream.

Two modes, one program. ``per_rank=False`` (default) simulates one representative rank per
pipeline stage: every TP, CP and DP peer of a stage runs the same work at the same times when
nothing breaks the symmetry, so a collective's members arrive together and one process stands for
all of them. ``per_rank=True`` runs every rank as its own process and makes each collective wait
for its last member (a barrier), which is what straggler jitter needs; without jitter the two give
the same step (tests/test_engine.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from .workload.schedules import schedule

__all__ = ["Segment", "StagePlan", "EngineResult", "simulate", "estimate_events", "fast_step"]

ProcGen = Generator[simpy.Event, Any, Any]


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of a rank's compute stream: ``kind`` "compute" or a blocking collective of
    ``group`` ("tp", "cp", "ep")."""

    kind: str
    seconds: float
    group: str = ""


@dataclass(frozen=True)
class StagePlan:
    """What one pipeline stage does, in seconds (from the workload, compute and network models)."""

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


@dataclass
class Interval:
    rank: int
    stage: int
    kind: str             # "compute" | "comm" | "wait" | "dp" | "optimizer"
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


class _Barrier:
    """Fires when ``n`` members have arrived; remembers who came last."""

    def __init__(self, env: simpy.Environment, n: int) -> None:
        self.event = env.event()
        self.n = n
        self.arrived = 0
        self.last: int | None = None

    def arrive(self, env: simpy.Environment, rank: int) -> simpy.Event:
        self.arrived += 1
        if self.arrived == self.n:
            self.last = rank
            self.event.succeed()
        return self.event


def estimate_events(plan: list[StagePlan], *, vs: int, micro: int, ranks_per_stage: int = 1,
                    simulations: int = 1) -> int:
    """About how many simpy events ``simulate`` will process (within a factor of ~2; the
    benchmark's events/s turns it into seconds), so that a plan too big to play can be refused
    before it runs: every rank plays micro x vs forward and backward steps, each its layers'
    segments (a timeout and a resume each) plus its dependency and hand-over events."""
    per_rank = 0
    for sp in plan:
        segs = len(sp.layer_fwd) + len(sp.layer_bwd)
        per_rank += micro * vs * (sp.layers_per_chunk * (segs + 1) + 4)
    return simulations * ranks_per_stage * per_rank


def simulate(plan: list[StagePlan], *, pp: int, vs: int, micro: int, schedule_kind: str,
             ranks_per_stage: int = 1, groups: Callable[[str, int], tuple[int, int]] | None = None,
             jitter: Callable[[int, int], float] | None = None, trace: bool = False) -> EngineResult:
    """Simulate one training step.

    *ranks_per_stage* > 1 runs that many ranks per stage (per-rank mode); *groups(kind, local)*
    gives (group id, group size) of a stage-local rank for "tp", "cp", "ep", "dp" collectives.
    *jitter(rank, k)* multiplies the k-th compute segment of a rank (stragglers).
    """
    env = simpy.Environment()
    done: dict[tuple[Any, ...], simpy.Event] = {}
    barriers: dict[tuple[Any, ...], _Barrier] = {}
    intervals: list[Interval] = []
    busy: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    finish: dict[int, float] = {}
    wait_caused: dict[int, float] = defaultdict(float)
    counters: dict[int, int] = defaultdict(int)
    n_chunks = pp * vs

    def ev(key: tuple[Any, ...]) -> simpy.Event:
        if key not in done:
            done[key] = env.event()
        return done[key]

    def record(rank: int, stage: int, kind: str, label: str, start: float) -> None:
        busy[rank][kind] += env.now - start
        if trace:
            intervals.append(Interval(rank, stage, kind, label, start, env.now))

    def collective(rank: int, local: int, stage: int, kind: str, seq: Any) -> ProcGen:
        """Wait for the last member of this rank's *kind* group (per-rank mode only)."""
        if groups is None or ranks_per_stage == 1:
            return
        gid, size = groups(kind, local)
        if size <= 1:
            return
        key = (stage, kind, gid, seq)
        b = barriers.get(key)
        if b is None:
            b = barriers[key] = _Barrier(env, size)
        t0 = env.now
        yield b.arrive(env, rank)
        if env.now > t0:
            record(rank, stage, "straggler_wait", kind, t0)
            if b.last is not None:
                wait_caused[b.last] += env.now - t0

    def segments(rank: int, local: int, stage: int, segs: tuple[Segment, ...], label: str,
                 seq_base: Any) -> ProcGen:
        for i, seg in enumerate(segs):
            if seg.kind == "compute":
                k = counters[rank]
                counters[rank] += 1
                dt = seg.seconds * (jitter(rank, k) if jitter else 1.0)
                t0 = env.now
                yield env.timeout(dt)
                record(rank, stage, "compute", label, t0)
            else:
                yield from collective(rank, local, stage, seg.group, (seq_base, i))
                t0 = env.now
                yield env.timeout(seg.seconds)
                record(rank, stage, "comm", f"{label}:{seg.group}", t0)

    def dp_stream(rank: int, local: int, stage: int, queue: simpy.Store) -> ProcGen:
        n = 0
        while True:
            item = yield queue.get()
            if item is None:
                return
            yield from collective(rank, local, stage, "dp", ("grad", n))
            n += 1
            t0 = env.now
            yield env.timeout(item)
            record(rank, stage, "dp", "grad-reduce", t0)

    def rank_proc(rank: int, local: int, stage: int) -> ProcGen:
        sp = plan[stage]
        queue: simpy.Store = simpy.Store(env)
        dp_proc = env.process(dp_stream(rank, local, stage, queue))
        steps = schedule(schedule_kind, stage, pp, micro, vs)
        last_b = {c: max(m for k, m, cc in steps if k == "B" and cc == c) for c in range(vs)}
        for n_step, (kind, m, c) in enumerate(steps):
            g = c * pp + stage                              # global model chunk
            # dependencies
            t0 = env.now
            if kind == "F" and g > 0:
                yield ev(("F", local, m, g - 1))
            if kind == "B" and g < n_chunks - 1:
                yield ev(("B", local, m, g + 1))
            if env.now > t0:
                record(rank, stage, "pipeline_bubble", "wait", t0)
            layer = sp.layer_fwd if kind == "F" else sp.layer_bwd
            extra = 0.0
            if kind == "F":
                extra = (sp.first_fwd if g == 0 else 0.0) + (sp.last_fwd if g == n_chunks - 1 else 0.0)
            else:
                extra = (sp.first_bwd if g == 0 else 0.0) + (sp.last_bwd if g == n_chunks - 1 else 0.0)
            if extra and kind == "F" and g == 0:
                yield from segments(rank, local, stage, (Segment("compute", extra),), "embed", (n_step, -1))
            for li in range(sp.layers_per_chunk):
                if sp.fsdp_layer_gather_s:
                    # ZeRO-3: the weight all-gather is prefetched during the previous layer; in
                    # the backward the gradient reduce-scatter shares the same links. Only what
                    # the layer's traffic takes beyond its compute is exposed.
                    comp = sum(s.seconds for s in layer if s.kind == "compute")
                    traffic = sp.fsdp_layer_gather_s + (sp.dp_layer_s if kind == "B" else 0.0)
                    expo = max(0.0, traffic - comp)
                    if expo > 0:
                        t1 = env.now
                        yield env.timeout(expo)
                        record(rank, stage, "comm", "fsdp-gather", t1)
                yield from segments(rank, local, stage, layer, f"{kind}{m}.{g}", (n_step, li))
                if kind == "B" and m == last_b[c]:
                    if not sp.dp_per_microbatch:
                        queue.put(sp.dp_layer_s + sp.replica_layer_s)
                    elif sp.replica_layer_s:
                        queue.put(sp.replica_layer_s)
            if extra and not (kind == "F" and g == 0):
                yield from segments(rank, local, stage, (Segment("compute", extra),),
                                    "head" if g == n_chunks - 1 else "embed", (n_step, -2))
            # hand the result to the neighbour (after the point-to-point transfer)
            key = (kind, local, m, g)
            target = ev(key)
            crosses = (kind == "F" and g < n_chunks - 1) or (kind == "B" and g > 0)
            delay = sp.p2p_s if crosses and pp > 1 else 0.0
            if delay:
                env.process(_later(env, target, delay))
            else:
                target.succeed()
        queue.put(None)
        t0 = env.now
        yield dp_proc
        if env.now > t0:
            record(rank, stage, "exposed_dp", "grad-reduce tail", t0)
        t0 = env.now
        yield env.timeout(sp.optimizer_s)
        record(rank, stage, "optimizer", "optimizer", t0)
        if sp.param_gather_s:
            yield from collective(rank, local, stage, "dp", ("params",))
            t0 = env.now
            yield env.timeout(sp.param_gather_s)
            record(rank, stage, "comm", "param-gather", t0)
        finish[rank] = env.now

    for stage in range(pp):
        for local in range(ranks_per_stage):
            env.process(rank_proc(stage * ranks_per_stage + local, local, stage))
    env.run()
    step = max(finish.values())
    crit_rank = max(finish, key=lambda r: (finish[r], -r))
    crit_stage = crit_rank // ranks_per_stage
    b = busy[crit_rank]
    breakdown = {
        "compute": b["compute"],
        "exposed_comm": b["comm"] + b["exposed_dp"],
        "pipeline_bubble": b["pipeline_bubble"],
        "straggler_wait": b["straggler_wait"],
        "optimizer": b["optimizer"],
    }
    # Whatever the critical rank spent neither busy nor in a named wait (none, by construction).
    breakdown["other"] = max(0.0, step - sum(breakdown.values()))
    events = next(env._eid)            # noqa: SLF001 - simpy's event counter, for the benchmark
    return EngineResult(step, breakdown, crit_stage, intervals, events=events,
                        straggler_ranks=dict(wait_caused))


def fast_step(plan: list[StagePlan], *, pp: int, vs: int, micro: int,
              schedule_kind: str) -> EngineResult:
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
    """
    n_chunks = pp * vs
    done: dict[tuple[str, int, int], float] = {}
    steps = [schedule(schedule_kind, st, pp, micro, vs) for st in range(pp)]
    pos = [0] * pp
    now = [0.0] * pp
    busy = [{"compute": 0.0, "comm": 0.0, "pipeline_bubble": 0.0} for _ in range(pp)]
    dp_free = [0.0] * pp                   # when each stage's data-parallel stream is next free
    last_b: list[dict[int, int]] = [{} for _ in range(pp)]
    for st in range(pp):
        for k, m, cc in steps[st]:
            if k == "B" and m > last_b[st].get(cc, -1):
                last_b[st][cc] = m
    seg_time = [{k: (sum(x.seconds for x in segs if x.kind == "compute"),
                     sum(x.seconds for x in segs if x.kind != "compute"))
                 for k, segs in (("F", sp.layer_fwd), ("B", sp.layer_bwd))} for sp in plan]
    remaining = sum(len(x) for x in steps)
    while remaining:
        progressed = False
        for st in range(pp):
            sp = plan[st]
            while pos[st] < len(steps[st]):
                kind, m, c = steps[st][pos[st]]
                g = c * pp + st
                dep = (("F", m, g - 1) if kind == "F" and g > 0 else
                       ("B", m, g + 1) if kind == "B" and g < n_chunks - 1 else None)
                if dep is not None and dep not in done:
                    break
                t = now[st]
                if dep is not None and done[dep] > t:
                    busy[st]["pipeline_bubble"] += done[dep] - t
                    t = done[dep]
                if kind == "F":
                    extra = (sp.first_fwd if g == 0 else 0.0) + (sp.last_fwd if g == n_chunks - 1 else 0.0)
                else:
                    extra = (sp.first_bwd if g == 0 else 0.0) + (sp.last_bwd if g == n_chunks - 1 else 0.0)
                comp, comm = seg_time[st][kind]
                expo = 0.0
                if sp.fsdp_layer_gather_s:
                    traffic = sp.fsdp_layer_gather_s + (sp.dp_layer_s if kind == "B" else 0.0)
                    expo = max(0.0, traffic - comp)
                layer = comp + comm + expo
                reduce = (kind == "B" and m == last_b[st][c])
                item = ((sp.dp_layer_s + sp.replica_layer_s) if not sp.dp_per_microbatch
                        else sp.replica_layer_s) if reduce else 0.0
                if extra and kind == "F" and g == 0:
                    t += extra
                start_layers = t
                if item:
                    for li in range(sp.layers_per_chunk):
                        end = start_layers + (li + 1) * layer
                        dp_free[st] = max(dp_free[st], end) + item
                t = start_layers + sp.layers_per_chunk * layer
                if extra and not (kind == "F" and g == 0):
                    t += extra
                busy[st]["compute"] += sp.layers_per_chunk * comp + extra
                busy[st]["comm"] += sp.layers_per_chunk * (comm + expo)
                crosses = (kind == "F" and g < n_chunks - 1) or (kind == "B" and g > 0)
                done[(kind, m, g)] = t + (sp.p2p_s if crosses and pp > 1 else 0.0)
                now[st] = t
                pos[st] += 1
                remaining -= 1
                progressed = True
        assert progressed, "schedule dependencies form a cycle"
    finish = []
    for st, sp in enumerate(plan):
        t = now[st]
        exposed_dp = max(0.0, dp_free[st] - t)
        t += exposed_dp + sp.optimizer_s + sp.param_gather_s
        busy[st]["exposed_dp"] = exposed_dp
        busy[st]["comm"] += sp.param_gather_s
        busy[st]["optimizer"] = sp.optimizer_s
        finish.append(t)
    step = max(finish)
    crit = min(st for st in range(pp) if finish[st] == step)
    b = busy[crit]
    breakdown = {"compute": b["compute"], "exposed_comm": b["comm"] + b["exposed_dp"],
                 "pipeline_bubble": b["pipeline_bubble"], "straggler_wait": 0.0,
                 "optimizer": b["optimizer"]}
    breakdown["other"] = max(0.0, step - sum(breakdown.values()))
    return EngineResult(step, breakdown, crit)


def _later(env: simpy.Environment, event: simpy.Event, delay: float) -> ProcGen:
    yield env.timeout(delay)
    event.succeed()
