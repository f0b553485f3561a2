"""The step without simpy: the work estimate that guards long runs, and the closed-form longest
path the plan search screens layouts with."""

from __future__ import annotations

from ..workload.schedules import schedule as schedule_steps
from .records import EngineResult, Schedule, StagePlan

__all__ = ["estimate_events", "fast_step"]


def estimate_events(plan: list[StagePlan], *, vs: int, micro: int, ranks_per_stage: int = 1,
                    simulations: int = 1, delays: set[int] | None = None) -> int:
    """About how many simpy events ``simulate`` will process (within a factor of ~2; the
    benchmark's events/s turns it into seconds), so that a plan too big to play can be refused
    before it runs. Every rank plays micro x vs forward and backward passes, each with its
    dependency and hand-over events. A representative rank (``ranks_per_stage`` 1, no trace)
    whose layer's transfers are all plain delays (ids in *delays*: ``private_loads``) plays a
    layer as one timeout (the last backward of each chunk with a gradient reduction each);
    otherwise every segment of every layer is a timeout and a resume."""
    per_rank = 0
    for sp in plan:
        segs = len(sp.layer_fwd) + len(sp.layer_bwd)
        fused = delays is not None and ranks_per_stage == 1 and all(
            s.traffic is None or id(s.traffic) in delays
            for s in sp.layer_fwd + sp.layer_bwd if s.kind != "compute")
        handed = ((not sp.dp_per_microbatch and sp.dp_layer_s + sp.replica_layer_s > 0)
                  or (sp.dp_per_microbatch and sp.replica_layer_s > 0))
        layers = sp.total_layers(vs)                # all of the stage's chunks
        if fused:
            per_rank += micro * (2 * layers + 6 * vs) + (layers * 3 if handed else 0)
        else:
            per_rank += micro * (layers * (segs + 1) + 4 * vs)
    return simulations * ranks_per_stage * per_rank


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
    pp, vs, micro = schedule.pp, schedule.vs, schedule.micro
    n_chunks = pp * vs
    done: dict[tuple[str, int, int], float] = {}
    steps = [schedule_steps(schedule.schedule_kind, st, pp, micro, vs, schedule.group) for st in range(pp)]
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
                n_layers = sp.layers_of(c)
                if item:
                    for li in range(n_layers):
                        end = start_layers + (li + 1) * layer
                        dp_free[st] = max(dp_free[st], end) + item
                t = start_layers + n_layers * layer
                if extra and not (kind == "F" and g == 0):
                    t += extra
                busy[st]["compute"] += n_layers * comp + extra
                busy[st]["comm"] += n_layers * (comm + expo)
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
