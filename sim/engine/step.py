"""The simpy engine: every pipeline stage plays its schedule on a compute stream, waits for the
activations and gradients of its neighbours, and reduces gradients on a data-parallel stream; every
transfer is played on the cluster's links, shared with the transfers in flight at the same time.

Two modes, one program. ``per_rank=False`` (default) simulates one representative rank per
pipeline stage: every TP, CP and DP peer of a stage runs the same work at the same times when
nothing breaks the symmetry, so a collective's members arrive together, one process stands for all
of them, and its transfers carry the load of all their groups (``sim.network.traffic``). With
``ranks_per_stage`` > 1 every rank is its own process and each collective waits for its last
member (a barrier), which straggler jitter needs; each group then admits its share of the load.
Without jitter the two give the same step (tests/test_engine.py).

The program is small generator processes, each a method: ``stage`` (a rank's schedule),
``chunk_pass`` (one forward or backward of a model chunk), ``segments``, ``communicate`` (barrier +
transfer), ``dp_stream`` and ``hand_over`` (pipeline send).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from ..network.shared import SharedLinks, succeed_after, wake_at
from ..network.traffic import Traffic
from ..workload.schedules import schedule as schedule_steps
from .loads import played_loads, step_loads
from .ranks import Barrier, Rank
from .records import EngineResult, Interval, Schedule, Segment, StagePlan

__all__ = ["StepEngine", "simulate"]

ProcGen = Generator[simpy.Event, Any, Any]
Groups = Callable[[str, int], tuple[Any, int]]


class StepEngine:
    """One training step (see the module docstring); ``run()`` plays it once."""

    def __init__(self, plan: list[StagePlan], schedule: Schedule, *,
                 ranks_per_stage: int = 1, groups: Groups | None = None,
                 jitter: Callable[[int, int], float] | None = None, trace: bool = False,
                 capacity_Bps: np.ndarray | None = None, env: simpy.Environment | None = None,
                 links: SharedLinks | None = None, private: set[int] | None = None) -> None:
        """*env*, *links* and *private* (ids of loads that share no link: ``private_loads``)
        given: this step is played on another's clock and links (a second job on the fabric)."""
        pp, vs, micro = schedule.pp, schedule.vs, schedule.micro
        self.plan, self.pp, self.vs, self.micro = plan, pp, vs, micro
        self.schedule_kind = schedule.schedule_kind
        self.group = schedule.group       # interleaved: micro-batches per round (0: pp)
        self.flushes = schedule.flushes
        self.ranks_per_stage = ranks_per_stage
        self.groups = groups if ranks_per_stage > 1 else None
        self.jitter = jitter
        self.trace = trace
        self.env = env or simpy.Environment()
        # a second job's step (*links* and *private* given) plays every load not private on them
        self._quiet = [set[int]() for _ in plan]
        if links is None and capacity_Bps is not None:
            private, self._quiet = step_loads(plan, capacity_Bps, micro * vs)
            links = SharedLinks(self.env, capacity_Bps, played_loads(plan, private))
        self.links = links
        self._private = private or set()
        self._start = self.env.now
        self.n_chunks = pp * vs
        self.intervals: list[Interval] = []
        self._done: dict[int, simpy.Event] = {}
        self._barriers: dict[tuple[Any, ...], Barrier] = {}
        self._finish: dict[int, float] = {}
        self._wait_caused: dict[int, float] = defaultdict(float)
        self._ranks: list[Rank] = []
        self._comm_cache: dict[int, float | None] = {}
        self._comp_cache: dict[int, tuple[float, int]] = {}
        self._expo_cache: dict[tuple[int, str], tuple[float, Traffic | None]] = {}
        self._plain_cache: dict[tuple[int, int], tuple[tuple[Segment, ...], tuple[int, ...]]] = {}

    # ------------------------------------------------------------------ running

    def run(self) -> EngineResult:
        self.start()
        self.env.run()
        return self.result()

    def start(self) -> simpy.Event:
        """Start every rank's process now; the event fires when all have finished."""
        self._start = self.env.now
        procs = []
        for stage in range(self.pp):
            for local in range(self.ranks_per_stage):
                r = Rank(stage * self.ranks_per_stage + local, local, stage, self.plan[stage])
                self._ranks.append(r)
                procs.append(self.env.process(self.stage(r)))
        return self.env.all_of(procs)

    def result(self) -> EngineResult:
        """The step as played (after ``start``'s event has fired)."""
        finish = self._finish
        step = max(finish.values()) - self._start
        crit = self._ranks[max(finish, key=lambda k: (finish[k], -k))]
        b = crit.busy
        breakdown = {
            "compute": b["compute"],
            "exposed_comm": b["comm"] + b["exposed_dp"],
            "pipeline_bubble": b["pipeline_bubble"],
            "straggler_wait": b["straggler_wait"],
            "optimizer": b["optimizer"],
        }
        breakdown["other"] = max(0.0, step - sum(breakdown.values()))   # none, by construction
        events = next(self.env._eid)      # noqa: SLF001 - simpy's event counter, for the benchmark
        return EngineResult(step, breakdown, crit.stage, self.intervals, events=events,
                            straggler_ranks=dict(self._wait_caused),
                            network_solves=self.links.solves if self.links else 0)

    # ------------------------------------------------------------------ helpers

    def _record(self, r: Rank, kind: str, label: str, start: float, suffix: str = "") -> None:
        r.busy[kind] += self.env.now - start
        if self.trace:
            self.intervals.append(Interval(r.rank, r.stage, kind,
                                           f"{label}:{suffix}" if suffix else label,
                                           start, self.env.now))

    def _event(self, kind: str, local: int, m: int, g: int) -> simpy.Event:
        """Chunk *g*'s *kind* pass of micro-batch *m* on rank *local* handed over (PERF: int key)."""
        key = ((2 * local + (kind == "B")) * self.micro + m) * self.n_chunks + g
        ev = self._done.get(key)
        if ev is None:
            ev = self._done[key] = self.env.event()
        return ev

    def _delay(self, traffic: Traffic | None) -> bool:
        """Whether a transfer is a plain delay: no links, no load, or one never over capacity."""
        return self.links is None or traffic is None or id(traffic) in self._private

    def _send(self, seconds: float, traffic: Traffic | None, share: float = 1.0,
              done: simpy.Event | None = None) -> simpy.Event:
        """A transfer of *seconds* alone: on the shared links when it has a load, else a delay;
        its delivery fires *done* where given (an untriggered event), else a new event."""
        if self._delay(traffic):
            if done is None:
                return self.env.timeout(seconds)
            succeed_after(self.env, done, seconds)
            return done
        assert self.links is not None and traffic is not None
        return self.links.transfer(traffic, share, done)

    def _share(self, traffic: Traffic | None, per_group: bool) -> float:
        """The part of a load one process admits: all for a representative rank, else a group's or a rank's."""
        if self.ranks_per_stage == 1 or traffic is None:
            return 1.0
        return 1.0 / max(1, traffic.groups if per_group else self.ranks_per_stage)

    # ------------------------------------------------------------------ processes

    def stage(self, r: Rank) -> ProcGen:
        """A rank's step: its schedule's passes in order, then the gradient tail, the optimizer
        and the ZeRO-1/2 parameter gather."""
        sp = r.plan
        queue: simpy.Store = simpy.Store(self.env)
        dp_proc = self.env.process(self.dp_stream(r, queue))
        steps = schedule_steps(self.schedule_kind, r.stage, self.pp, self.micro, self.vs, self.group,
                               self.flushes)
        last_b = {c: max(m for k, m, cc in steps if k == "B" and cc == c) for c in range(self.vs)}
        for n_step, (kind, m, c) in enumerate(steps):
            g = c * self.pp + r.stage                     # global model chunk
            t0 = self.env.now
            if kind == "F" and g > 0:
                yield self._event("F", r.local, m, g - 1)
            if kind == "B" and g < self.n_chunks - 1:
                yield self._event("B", r.local, m, g + 1)
            if self.env.now > t0:
                self._record(r, "pipeline_bubble", "wait", t0)
            yield from self.chunk_pass(r, kind, m, g, n_step, queue if m == last_b[c] else None)
            self.hand_over(r, kind, m, g)
        if sp.replica_tail_s:
            r.dp_open += 1
            queue.put((sp.replica_tail_s, sp.replica_tail))   # the replica all-reduce after the backward
        queue.put(None)
        t0 = self.env.now
        yield dp_proc
        if self.env.now > t0:
            self._record(r, "exposed_dp", "grad-reduce tail", t0)
        t0 = self.env.now
        yield self.env.timeout(sp.optimizer_s)
        self._record(r, "optimizer", "optimizer", t0)
        if sp.param_gather_s:
            yield from self.communicate(r, "dp", ("params",), sp.param_gather_s, sp.param_traffic,
                                        "param-gather")
        self._finish[r.rank] = self.env.now

    def chunk_pass(self, r: Rank, kind: str, m: int, g: int, n_step: int,
                   reduce_into: simpy.Store | None) -> ProcGen:
        """One forward or backward pass of global chunk *g* for micro-batch *m*; a chunk's last
        backward queues each layer's gradient reduction on the data-parallel stream."""
        sp = r.plan
        last = g == self.n_chunks - 1
        if kind == "F":
            layer, extra = sp.layer_fwd, (sp.first_fwd if g == 0 else 0.0) + (sp.last_fwd if last else 0.0)
        else:
            layer, extra = sp.layer_bwd, (sp.first_bwd if g == 0 else 0.0) + (sp.last_bwd if last else 0.0)
        embed_first = kind == "F" and g == 0
        if extra and embed_first:
            yield from self.segments(r, (Segment("compute", extra),), "embed", (n_step, -1))
        item = None
        if kind == "B" and reduce_into is not None:
            item = sp.handed_layer()
        expo, expo_load = self._exposure(r, kind)
        comm = self._comm_of(layer) if not self.trace and self.groups is None else None
        if comm is not None and self._delay(expo_load):
            # PERF: a layer whose transfers are all plain delays is one step of time (its compute
            # keeps its own jitter draws). Exact: nothing else waits on a point inside a layer,
            # so the process wakes only where a layer hands a gradient reduction over, else once
            # at the chunk's end: the time the layers' steps, added one after the other, reach.
            t, busy = self.env.now, r.busy
            for _ in range(sp.layers_of(g // self.pp)):
                comp = self._layer_compute_s(r, layer)
                t = t + (comp + (comm + expo))
                busy["compute"] += comp
                busy["comm"] += comm + expo
                if item is not None:
                    yield wake_at(self.env, t)
                    r.dp_open += 1
                    reduce_into.put(item)                 # type: ignore[union-attr]
            if item is None:
                yield wake_at(self.env, t)
        else:
            for li in range(sp.layers_of(g // self.pp)):
                if expo > 0:
                    t0 = self.env.now
                    yield self._send(expo, expo_load, self._share(expo_load, per_group=False))
                    self._record(r, "comm", "fsdp-gather", t0)
                yield from self.segments(r, layer, f"{kind}{m}.{g}", (n_step, li))
                if item is not None:
                    r.dp_open += 1
                    reduce_into.put(item)                 # type: ignore[union-attr]
        if extra and not embed_first:
            yield from self.segments(r, (Segment("compute", extra),), "head" if last else "embed",
                                     (n_step, -2))

    def _layer_compute_s(self, r: Rank, layer: tuple[Segment, ...]) -> float:
        """A layer's compute seconds on *r*, its draws added in order (PERF: without jitter, the same
        sum each time, kept with how many draws it stands for)."""
        if self.jitter is None and (hit := self._comp_cache.get(id(layer))) is not None:
            r.computed += hit[1]
            return hit[0]
        n, comp = r.computed, 0.0
        for seg in (seg for seg in layer if seg.kind == "compute"):
            comp += self._compute_s(r, seg)
        if self.jitter is None:
            self._comp_cache[id(layer)] = (comp, r.computed - n)
        return comp

    def _comm_of(self, layer: tuple[Segment, ...]) -> float | None:
        """Seconds of a layer's transfers when every one is a plain delay, else None."""
        if (key := id(layer)) not in self._comm_cache:
            comm = [s for s in layer if s.kind != "compute"]
            delays = all(self._delay(s.traffic) for s in comm)
            self._comm_cache[key] = sum(s.seconds for s in comm) if delays else None
        return self._comm_cache[key]

    def _exposure(self, r: Rank, kind: str) -> tuple[float, Traffic | None]:
        """ZeRO-3's exposed gather (``StagePlan.fsdp_exposure``), played on the links: (seconds,
        load) per layer, the same for every layer of a stage and pass."""
        key = (r.stage, kind)
        hit = self._expo_cache.get(key)
        if hit is None:
            expo, base = r.plan.fsdp_exposure(kind)
            load = None
            # a load that can never meet another stays a plain delay (None) at any length
            if base is not None and expo > 0 and not self._delay(base):
                load = base.with_seconds(expo)
            hit = self._expo_cache[key] = (expo, load)
        return hit

    def _compute_s(self, r: Rank, seg: Segment) -> float:
        """A compute segment's seconds on rank *r*: its straggler jitter draw (the rank's next) applied."""
        dt = seg.seconds * (self.jitter(r.rank, r.computed) if self.jitter else 1.0)
        r.computed += 1
        return dt

    def _plain_of(self, r: Rank, segs: tuple[Segment, ...]) -> tuple[int, ...]:
        """Per segment, whether it is a plain delay for *r*: 0 compute, 1 a transfer that shares no
        link, 2 none while *r*'s data-parallel stream is idle (``step_loads``), 3 no; cached."""
        if (hit := self._plain_cache.get((id(segs), r.stage))) is None:
            quiet, per_rank = self._quiet[r.stage], self.groups is not None
            hit = self._plain_cache[id(segs), r.stage] = (segs, tuple(   # (segs kept: their id)
                0 if s.kind == "compute" else 3 if per_rank else 1 if self._delay(s.traffic)
                else 2 if id(s.traffic) in quiet else 3 for s in segs))
        return hit[1]

    def segments(self, r: Rank, segs: tuple[Segment, ...], label: str, seq: Any) -> ProcGen:
        env = self.env
        i, n = 0, len(segs)
        plain = ((3,) * n if self.trace else (0,) if n == 1 and segs[0].kind == "compute"
                 else self._plain_of(r, segs))
        while i < n:
            if plain[i] < 2 or (plain[i] == 2 and r.dp_open == 0):
                # PERF: a run of plain delays is one wake-up at the time their timeouts, one after the
                # other, would reach: the same sums in order (jitter draws included); nothing waits inside.
                t, busy, most = env.now, r.busy, 2 if r.dp_open == 0 else 1
                while i < n and plain[i] <= most:
                    seg = segs[i]
                    if plain[i] == 0:
                        end = t + self._compute_s(r, seg)
                        busy["compute"] += end - t
                    else:                      # a quiet load (2, never None): as the links play it
                        end = t + seg.seconds if plain[i] == 1 else seg.traffic.end_alone(t)  # type: ignore[union-attr]
                        busy["comm"] += end - t
                    t = end
                    i += 1
                yield wake_at(env, t)
                continue
            seg = segs[i]
            i += 1
            if seg.kind == "compute":
                dt = self._compute_s(r, seg)
                t0 = env.now
                yield env.timeout(dt)
                self._record(r, "compute", label, t0)
            elif self.groups is None:
                # PERF: a representative rank's collective needs no barrier: played here, not
                # through ``communicate`` (as a delay in the common case, sharing no link)
                t0 = env.now
                yield self._send(seg.seconds, seg.traffic, self._share(seg.traffic, True))
                self._record(r, "comm", label, t0, seg.group)
            else:
                yield from self.communicate(r, seg.group, (seq, i - 1), seg.seconds, seg.traffic,
                                            label, suffix=seg.group)

    def communicate(self, r: Rank, group: str, seq: Any, seconds: float,
                    traffic: Traffic | None, label: str, kind: str = "comm",
                    suffix: str = "") -> ProcGen:
        """A collective of *r*'s *group*: wait for its last member (per-rank mode), then the
        transfer the group runs together."""
        barrier = None
        if self.groups is not None:
            gid, size = self.groups(group, r.local)
            if size > 1:
                key = (r.stage, group, gid, seq)
                barrier = self._barriers.get(key)
                if barrier is None:
                    barrier = self._barriers[key] = Barrier(self.env, size)
                t0 = self.env.now
                yield barrier.arrive(r.rank)
                if self.env.now > t0:
                    self._record(r, "straggler_wait", group, t0)
                    if barrier.last is not None:
                        self._wait_caused[barrier.last] += self.env.now - t0
        t0 = self.env.now
        if barrier is not None:
            if barrier.transfer is None:
                barrier.transfer = self._send(seconds, traffic, self._share(traffic, True))
            yield barrier.transfer
        else:
            yield self._send(seconds, traffic, self._share(traffic, True))
        self._record(r, kind, label, t0, suffix)

    def dp_stream(self, r: Rank, queue: simpy.Store) -> ProcGen:
        """Gradient reductions, one after another, as the backward pass hands them over."""
        n = 0
        while True:
            item = yield queue.get()
            if item is None:
                return
            seconds, traffic = item
            yield from self.communicate(r, "dp", ("grad", n), seconds, traffic, "grad-reduce",
                                        kind="dp")
            r.dp_open -= 1
            n += 1

    def hand_over(self, r: Rank, kind: str, m: int, g: int) -> None:
        """Pass a finished chunk's activations (forward) or gradients (backward) to the stage that
        needs them, after the pipeline transfer."""
        target = self._event(kind, r.local, m, g)
        crosses = (kind == "F" and g < self.n_chunks - 1) or (kind == "B" and g > 0)
        sp = r.plan
        if not (crosses and self.pp > 1 and sp.p2p_s):
            target.succeed()
            return
        tr = sp.p2p_fwd if kind == "F" else sp.p2p_bwd
        self._send(sp.p2p_s, tr, self._share(tr, per_group=False), done=target)


def simulate(plan: list[StagePlan], schedule: Schedule, *,
             ranks_per_stage: int = 1, groups: Groups | None = None,
             jitter: Callable[[int, int], float] | None = None, trace: bool = False,
             capacity_Bps: np.ndarray | None = None) -> EngineResult:
    """Simulate one training step of *plan* (one ``StagePlan`` per stage) run as *schedule*.

    *ranks_per_stage* > 1 runs that many ranks per stage (per-rank mode); *groups(kind, local)*
    gives (group id, group size) of a stage-local rank for "tp", "cp", "ep", "dp" collectives.
    *jitter(rank, k)* multiplies the k-th compute segment of a rank (stragglers).
    *capacity_Bps*: the links' capacities (``LinkTable.capacity_Bps``) to play the transfers'
    loads on; None plays every transfer as a delay of its time alone.
    """
    return StepEngine(plan, schedule, ranks_per_stage=ranks_per_stage, groups=groups, jitter=jitter,
                      trace=trace, capacity_Bps=capacity_Bps).run()
