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

__all__ = ["Segment", "StagePlan", "EngineResult", "simulate", "estimate_events"]

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


def _later(env: simpy.Environment, event: simpy.Event, delay: float) -> ProcGen:
    yield env.timeout(delay)
    event.succeed()
