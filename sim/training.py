"""One training step of a scenario: workload -> per-stage plan -> simpy engine -> StepResult.

This is the chain of calls and the translation of work into seconds: compute ops through the
compute model, collectives through the network model on the scenario's topology.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .collectives import CollectiveModel
from .collectives.traffic import collective_traffic, p2p_traffic
from .compute.model import ComputeModel
from .config import Scenario
from .engine import Segment, StagePlan, estimate_events, private_loads, simulate, simulate_together
from .errors import ConfigError, InfeasibleError
from .network.traffic import Traffic
from .results import StepResult
from .software import resolve_software
from .topology import Topology, build_topology, frozen_gc, paused_gc
from .units import GiB
from .workload.activations import offload_exposed_s
from .workload.layout import Layout
from .workload.memory import check_fits, memory_per_chip
from .workload.transformer import Comm, Item, Op, Workload, build_workload

__all__ = ["run_step", "plan_stages", "check_work", "EVENTS_PER_S",
           "DEFAULT_MAX_EVENTS"]

# Engine speed on the CI machine (benchmarks/test_bench_training.py: ~0.8-0.9 M events/s) and the
# default work limit of a command: ~10 s of simulation. Larger plans are refused up front with the
# estimate, and run with --max-events.
EVENTS_PER_S = 800_000
DEFAULT_MAX_EVENTS = 8_000_000
# A training step longer than this (100 days) means an input outside any real range.
MAX_STEP_S = 100 * 86400.0


def check_work(events: int, max_events: int, what: str) -> None:
    """ConfigError when *events* exceeds *max_events*, with the time it would take."""
    if events > max_events:
        minutes = events / EVENTS_PER_S / 60
        took = f"~{minutes:.0f} minutes" if minutes >= 1 else f"~{minutes * 60:.0f} s"
        raise ConfigError(f"{what} would process ~{events:,} simulation events ({took}), over the "
                          f"limit of {max_events:,}; pass --max-events {events} (or --yes) to run "
                          "it anyway, or shrink training.global_batch / --steps")

# Adam with fp32 master weights: read param, grad, m, v and write param, m, v (28 bytes, as the
# optimizer table counts them: validation/compute/*/optimizer.csv), plus the bf16 model copy.
OPTIMIZER_BYTES_PER_PARAM = 30


def _overlap_gemm_s(items: tuple[Item, ...], i: int, cm: ComputeModel) -> float:
    """GEMM time a TP collective at ``items[i]`` can hide behind under userbuffers overlap: the
    GEMMs that consume an all-gather's output (those right after it) or produce a reduce-scatter's
    input (those right before it)."""
    comm = items[i]
    step = 1 if isinstance(comm, Comm) and comm.op == "allgather" else -1
    total, j = 0.0, i + step
    while 0 <= j < len(items):
        op = items[j]
        if not (isinstance(op, Op) and op.kind == "gemm"):
            break
        total += cm.op_time_s(op)
        j += step
    return total


def _segments(items: tuple[Item, ...], cm: ComputeModel, net: CollectiveModel,
              groups: dict[str, list[list[int]]] | None, lay: Layout,
              stage: int) -> tuple[Segment, ...]:
    """A layer's items as compute segments and blocking collectives; with *groups* (every group
    of each kind in this stage) each collective carries the load of all of them."""
    out: list[Segment] = []
    ops: list[Op] = []
    for i, it in enumerate(items):
        if isinstance(it, Op):
            ops.append(it)
            continue
        if ops:
            out.append(Segment("compute", cm.stream_time_s(ops)))
            ops = []
        group = {"tp": lay.tp_group, "cp": lay.cp_group, "ep": lay.ep_group, "dp": lay.dp_group}[it.group](stage)
        size = max(1, it.size_bytes)
        seconds = net.time(it.op, size, group).time_s
        if (it.group == "tp" and cm.profile.tp_comm_overlap
                and it.op in ("allgather", "reducescatter")):
            seconds = max(0.0, seconds - _overlap_gemm_s(items, i, cm))
        load = (collective_traffic(net, it.op, size, groups[it.group], seconds=seconds,
                                   label=it.group) if groups is not None else None)
        out.append(Segment(it.group, seconds, it.group, load))
    if ops:
        out.append(Segment("compute", cm.stream_time_s(ops)))
    return tuple(out)


def _offload_segment(scn: Scenario, segs: tuple[Segment, ...]) -> tuple[Segment, ...]:
    """A compute-stream segment for what a layer's activation offload leaves exposed in a pass."""
    busy_s = sum(x.seconds for x in segs if x.kind == "compute")
    exposed = offload_exposed_s(scn, busy_s)
    return (Segment("compute", exposed),) if exposed > 0 else ()


def compute_model(scn: Scenario,
                  stack_efficiency: dict[tuple[str, str, str], float] | None = None) -> ComputeModel:
    """The compute model of *scn*: its chip, precision and software profile."""
    profile = scn.software or resolve_software(None, None, scn.cluster.chip)
    return ComputeModel(scn.cluster.chip, scn.training.precision, profile, stack_efficiency)


def plan_stages(wl: Workload, topo: Topology, net: CollectiveModel,
                stack_efficiency: dict[tuple[str, str, str], float] | None = None,
                traffic: bool = True, offset: int = 0) -> list[StagePlan]:
    """Per-stage plans: seconds of every segment and transfer alone on the network and, with
    *traffic* (the full engine; the plan screen skips it), the link loads of each transfer for
    all the groups that run it at once. *offset*: the job's first chip (a second job)."""
    scn = wl.scenario
    par = scn.parallelism
    lay = Layout.of(par, offset)
    cm = compute_model(scn, stack_efficiency)
    plans = []
    for stage in range(par.pp):
        groups = lay.groups(stage) if traffic else None
        fwd = _segments(wl.layer.forward, cm, net, groups, lay, stage)
        bwd = _segments(wl.layer.recompute + wl.layer.backward, cm, net, groups, lay, stage)
        if scn.training.offloads:           # activation offload: the exposed host-link time
            fwd += _offload_segment(scn, fwd)
            bwd += _offload_segment(scn, bwd)
        if par.cp > 1:
            ring = lay.cp_group(stage)
            kv = net.time("sendrecv", wl.layer.cp_kv_bytes, ring).time_s * (par.cp - 1)
            def attn(items: tuple[Item, ...]) -> float:
                return sum(cm.op_time_s(o) for o in items if isinstance(o, Op) and o.kind == "attention")
            cp_f, cp_b = max(0.0, kv - attn(wl.layer.forward)), max(0.0, 2 * kv - attn(wl.layer.backward))
            ring_load = (collective_traffic(net, "sendrecv", wl.layer.cp_kv_bytes, lay.cp_groups(stage),
                                           label="cp") if traffic else None)
            fwd += (Segment("cp", cp_f, "cp", ring_load and ring_load.with_seconds(cp_f)),)
            bwd += (Segment("cp", cp_b, "cp", ring_load and ring_load.with_seconds(cp_b)),)
        dpg = lay.shard_group(stage)            # all data-parallel ranks unless hybrid sharding
        shards = lay.shard_groups(stage)
        shard = len(dpg)
        grad_bytes = max(1, 2 * wl.layer.params)
        dp_op = "reducescatter" if par.zero >= 1 else "allreduce"
        dp_layer = net.time(dp_op, grad_bytes, dpg).time_s if shard > 1 else 0.0
        # Hybrid sharding: each rank's reduced gradient shard is then all-reduced with the ranks
        # holding the same shard in the other replicas, every shard position at once.
        replica = (net.time_concurrent("allreduce", max(1, grad_bytes // shard),
                                       lay.replica_groups(stage)).time_s
                   if lay.replicas > 1 else 0.0)
        fsdp = par.zero >= 3 and shard > 1
        gather = net.time("allgather", grad_bytes, dpg).time_s if fsdp else 0.0
        chunk_layers = par.stage_chunk_layers(stage)       # this stage's real layers
        layers = sum(chunk_layers)
        params = layers * wl.layer.params + wl.embed_params * ((stage == 0) + (stage == par.pp - 1))
        opt_params = params / (shard if par.zero >= 1 else 1)
        optimizer = cm.optimizer_s(OPTIMIZER_BYTES_PER_PARAM * opt_params)
        pg = (net.time("allgather", max(1, 2 * params), dpg).time_s
              if par.zero in (1, 2) and shard > 1 else 0.0)
        if pg and cm.profile.param_gather_overlap:
            # Megatron --overlap-param-gather: each chunk's updated weights are gathered while the
            # next step's forward runs the chunks before it; only what exceeds one micro-batch's
            # forward over the stage stays exposed.
            pg = max(0.0, pg - sum(x.seconds for x in fwd if x.kind == "compute") * layers)
        if par.pp > 1:
            a, b = lay.stage_pair(stage)
            p2p_r = net.time("sendrecv", max(1, wl.pp_bytes), [a, b])
            p2p, p2p_lat = p2p_r.time_s, p2p_r.latency_s
        else:
            p2p = p2p_lat = 0.0
        loads: dict[str, Traffic | None] = {}
        if traffic:
            loads = _stage_loads(net, lay, stage, wl, shards, grad_bytes, dp_op, replica, gather,
                                 pg, params, (p2p, p2p_lat))
        def t(items: tuple[Item, ...]) -> float:
            return cm.stream_time_s(i for i in items if isinstance(i, Op))
        plans.append(StagePlan(
            layer_fwd=fwd, layer_bwd=bwd, layers_per_chunk=wl.layers_per_chunk,
            chunk_layers=chunk_layers if par.uneven else (),
            first_fwd=t(wl.first_forward), first_bwd=t(wl.first_backward),
            last_fwd=t(wl.last_forward), last_bwd=t(wl.last_backward), p2p_s=p2p,
            dp_layer_s=dp_layer, dp_per_microbatch=fsdp, fsdp_layer_gather_s=gather,
            replica_layer_s=replica,
            optimizer_s=optimizer, param_gather_s=pg, **loads))
    return plans


def _stage_loads(net: CollectiveModel, lay: Layout, stage: int, wl: Workload,
                 shards: list[list[int]], grad_bytes: int, dp_op: str, replica: float,
                 gather: float, pg: float, params: int,
                 p2p: tuple[float, float]) -> dict[str, Traffic | None]:
    """The link loads of a stage's transfers, each for every group that runs it at once: the
    gradient reductions of all its shard groups (+ the replica all-reduces), ZeRO-3's gathers,
    the parameter gather, and the pipeline sends of all its ranks to the next and previous
    stage."""
    shard = len(shards[0])
    dp_load = (collective_traffic(net, dp_op, grad_bytes, shards, label="dp")
               if shard > 1 else None)
    rep_load = (collective_traffic(net, "allreduce", max(1, grad_bytes // shard),
                                   lay.replica_groups(stage), concurrent=True, label="dp")
                if lay.replicas > 1 else None)
    both = [x for x in (dp_load, rep_load) if x is not None]
    dp_total = both[0].then(both[1]) if len(both) == 2 else (both[0] if both else None)
    out: dict[str, Traffic | None] = {"dp_traffic": dp_total, "replica_traffic": rep_load}
    if gather:
        ag = collective_traffic(net, "allgather", grad_bytes, shards, label="dp")
        out["fsdp_fwd"] = ag
        out["fsdp_bwd"] = ag.then(dp_load) if dp_load is not None else ag
    if pg:
        pg_load = collective_traffic(net, "allgather", max(1, 2 * params), shards, label="dp")
        out["param_traffic"] = pg_load.with_seconds(pg) if pg_load.seconds else None
    if lay.pp > 1 and p2p[0]:
        nbytes = max(1, wl.pp_bytes)
        out["p2p_fwd"] = p2p_traffic(net, lay.stage_pairs(stage, 1), nbytes, *p2p)
        out["p2p_bwd"] = p2p_traffic(net, lay.stage_pairs(stage, -1), nbytes, *p2p)
    return out


def run_step(scn: Scenario, seed: int | None = None, *, per_rank: bool = False,
             trace: bool = False, topo: Topology | None = None,
             net: CollectiveModel | None = None,
             stack_efficiency: dict[tuple[str, str, str], float] | None = None,
             max_events: int | None = None, steps: int = 1) -> tuple[StepResult, Any]:
    """Simulate one step; returns the result and the engine's record (for traces).

    *max_events*: refuse (ConfigError) before running when *steps* such steps would process more
    simpy events than this (``sim.engine.estimate_events``); None: no limit.
    """
    # PERF: a large cluster's graph and link tables are millions of long-lived objects that each
    # full collection would walk again (~1 s of the 98,304-GPU step in
    # benchmarks/test_bench_training.py): built with the collector off, then out of its sight
    # until the step is done.
    with frozen_gc() as freeze:
        return _run_step(scn, seed, per_rank=per_rank, trace=trace, topo=topo, net=net,
                         stack_efficiency=stack_efficiency, max_events=max_events, steps=steps,
                         freeze=freeze)


def _run_step(scn: Scenario, seed: int | None, *, per_rank: bool, trace: bool,
              topo: Topology | None, net: CollectiveModel | None,
              stack_efficiency: dict[tuple[str, str, str], float] | None,
              max_events: int | None, steps: int,
              freeze: Callable[[], None]) -> tuple[StepResult, Any]:
    """``run_step``; *freeze* hides what is alive from the garbage collector (``frozen_gc``)."""
    wl = build_workload(scn)
    mem = memory_per_chip(wl)
    check_fits(wl, mem)
    with paused_gc():
        neighbour = _neighbour(scn) if scn.cluster.shared_with else None
        if neighbour is not None:
            if per_rank or scn.stragglers is not None:
                raise ConfigError(f"{scn.source}: cluster.shared_with plays both jobs with one rank "
                                  "per stage; drop stragglers / per-rank tracing to use it")
            topo = build_topology(replace(scn.cluster,
                                          chips=scn.cluster.chips + neighbour.cluster.chips,
                                          shared_with=None))
            net = None
        topo = topo or build_topology(scn.cluster)
        clean: tuple[Topology, CollectiveModel] | None = None     # the links before degradation
        if scn.stragglers is not None and scn.stragglers.link_degrade_fraction > 0:
            from .stragglers import degrade_links

            clean = (topo, net or CollectiveModel(topo))
            topo = degrade_links(topo, scn.stragglers, scn.seed)
            net = CollectiveModel(topo)
        net = net or CollectiveModel(topo)
        freeze()
    plans = plan_stages(wl, topo, net, stack_efficiency)
    par = scn.parallelism
    vs = par.virtual_stages             # 1 unless interleaved (the config's rule)
    lay = Layout.of(par)
    per_stage = par.tp * par.cp * par.dp if per_rank else 1
    step_seed = scn.seed if seed is None else seed
    if max_events is not None:
        sims = par.dp if scn.stragglers is not None and not per_rank else 1
        delays = (private_loads(plans, net.links.capacity_Bps, wl.microbatches * vs)
                  if not trace else None)
        est = estimate_events(plans, vs=vs, micro=wl.microbatches, ranks_per_stage=per_stage,
                              simulations=sims, delays=delays)
        check_work(est * steps, max_events,
                   f"{scn.source}: {steps} steps" if steps > 1 else f"{scn.source}: this step")
    extra: dict[str, Any] = {}
    if neighbour is not None:
        eng, extra = _shared_step(scn, neighbour, plans, wl, topo, net, stack_efficiency, trace)
    elif scn.stragglers is not None and not per_rank:
        if clean is not None and clean[0] is not topo:
            clean_plans = (plan_stages(wl, clean[0], clean[1], stack_efficiency),
                           clean[1].links.capacity_Bps)
        else:
            clean_plans = (plans, net.links.capacity_Bps)
        eng, extra = _straggler_step(scn, plans, wl, vs, step_seed, trace,
                                     net.links.capacity_Bps, clean_plans)
    else:
        eng = simulate(plans, pp=par.pp, vs=vs, micro=wl.microbatches, schedule_kind=par.schedule,
                       group=par.microbatch_group,
                       ranks_per_stage=per_stage, groups=lay.local_group if per_rank else None,
                       trace=trace, capacity_Bps=net.links.capacity_Bps)
        if eng.network_solves and not per_rank:
            # What sharing links cost: the same step with every transfer at its time alone.
            alone = simulate(plans, pp=par.pp, vs=vs, micro=wl.microbatches,
                             schedule_kind=par.schedule, group=par.microbatch_group).step_time_s
            extra["link_sharing_s"] = max(0.0, eng.step_time_s - alone)
    if not (0 < eng.step_time_s <= MAX_STEP_S):
        worst = max(eng.breakdown_s, key=lambda k: eng.breakdown_s[k])
        raise InfeasibleError(f"{scn.source}: a step of {eng.step_time_s:.3g} s (mostly {worst}) is "
                              f"over {MAX_STEP_S / 86400:.0f} days; some input (a bandwidth, a "
                              "latency, the batch) is outside any real range")
    chip = scn.cluster.chip
    result = StepResult(
        scenario=scn.name, topology=topo.name, chip=chip.name, chips=scn.cluster.chips,
        step_time_s=eng.step_time_s, tokens_per_step=wl.tokens_per_step,
        model_flops_per_step=wl.model_flops_per_step, peak_flops_per_chip=chip.bf16_flops,
        memory_per_chip_GiB=mem.total_B / GiB,
        memory_breakdown_GiB=mem.as_GiB(),
        breakdown_s=eng.breakdown_s, usd_per_chip_hour=scn.cost.usd_per_chip_hour,
        parallelism={"tp": par.tp, "pp": par.pp, "cp": par.cp, "ep": par.ep, "dp": par.dp,
                     "zero": par.zero, "zero_group": par.shard_dp, "slices": scn.cluster.pods,
                     "schedule": par.schedule, "virtual_stages": vs,
                     "microbatches": wl.microbatches},
        critical_stage=eng.critical_stage, engine_events=eng.events,
        seed=step_seed, software=compute_model(scn).profile.describe(), extra=extra)
    return result, eng


def _neighbour(scn: Scenario) -> Scenario:
    from .config import load_scenario

    assert scn.cluster.shared_with is not None
    return load_scenario(scn.cluster.shared_with)


def _shared_step(scn: Scenario, other: Scenario, plans: list[StagePlan], wl: Workload,
                 topo: Topology, net: CollectiveModel,
                 stack_efficiency: dict[tuple[str, str, str], float] | None,
                 trace: bool) -> tuple[Any, dict[str, Any]]:
    """The step with a second job on the next chips of the fabric, stepping all along; both
    jobs' transfers on one set of links. Also the step alone on the same graph, for the cost."""
    owl = build_workload(other)
    check_fits(owl, memory_per_chip(owl))
    oplans = plan_stages(owl, topo, net, stack_efficiency, offset=scn.cluster.chips)

    def kw(s: Scenario, w: Workload) -> dict[str, Any]:
        p = s.parallelism
        return {"pp": p.pp, "vs": p.virtual_stages,
                "micro": w.microbatches, "schedule_kind": p.schedule, "group": p.microbatch_group}

    cap = net.links.capacity_Bps
    eng, other_steps = simulate_together(plans, oplans, cap, job=kw(scn, wl),
                                         other_job=kw(other, owl), trace=trace)
    alone = simulate(plans, capacity_Bps=cap, **kw(scn, wl)).step_time_s
    other_alone = simulate(oplans, capacity_Bps=cap, **kw(other, owl)).step_time_s
    return eng, {"shared_with": {
        "scenario": other.name, "chips": other.cluster.chips,
        "step_time_alone_s": alone, "slowdown": eng.step_time_s / alone,
        "neighbour_step_time_s": (sum(other_steps) / len(other_steps)) if other_steps else None,
        "neighbour_step_time_alone_s": other_alone}}


def _straggler_step(scn: Scenario, plans: list[StagePlan], wl: Workload, vs: int, seed: int,
                    trace: bool, capacity_Bps: Any,
                    clean: tuple[list[StagePlan], Any]) -> tuple[Any, dict[str, Any]]:
    """Every data-parallel replica simulated with its own draws; the slowest sets the step."""
    import numpy as np

    from .stragglers import draw_slow_devices, replica_draws, replica_jitter

    par, cfg = scn.parallelism, scn.stragglers
    assert cfg is not None
    # Every draw comes from the step's seed (--seed included): slow chips, then each replica's
    # jitter; the same seed gives the same step, another seed other slow chips.
    slow = draw_slow_devices(cfg, scn.cluster.chips, np.random.default_rng([seed, 1]))
    results = []
    for draws in replica_draws(scn, slow):
        jit = replica_jitter(scn, draws, seed)
        eng = simulate(plans, pp=par.pp, vs=vs, micro=wl.microbatches, schedule_kind=par.schedule,
                       group=par.microbatch_group,
                       jitter=jit, capacity_Bps=capacity_Bps)
        results.append((eng.step_time_s, draws, eng))
    step = max(r[0] for r in results)
    ordered = sorted(results, key=lambda r: (r[0], r[1].replica))
    median = ordered[len(ordered) // 2]
    slowest = ordered[-1]
    eng = median[2]
    if trace:
        # The trace shows the replica the breakdown reports: the median one, replayed with its
        # own draws (the same generator seeds give the same times).
        d = median[1]
        eng = simulate(plans, pp=par.pp, vs=vs, micro=wl.microbatches, schedule_kind=par.schedule,
                       group=par.microbatch_group,
                       jitter=replica_jitter(scn, d, seed), trace=True,
                       capacity_Bps=capacity_Bps)
        # (the replay plays every segment for the timeline: the same times up to rounding)
        assert abs(eng.step_time_s - median[0]) <= 1e-9 * median[0], (eng.step_time_s, median[0])
    eng.breakdown_s["straggler_wait"] += step - median[0]
    eng.step_time_s = step
    extra = {
        "straggler_slowdown": _straggler_attribution(scn, wl, vs, seed, slow, step, results,
                                                     plans, capacity_Bps, *clean),
        "straggler_replica": slowest[1].replica,
        "straggler_chips": list(slowest[1].slow_chips),
        "straggler_excess_s": step - median[0],
        "slow_chips": [int(x) for x in slow],
        "replica_step_s": {"min": ordered[0][0], "median": median[0], "max": step},
    }
    return eng, extra


def _straggler_attribution(scn: Scenario, wl: Workload, vs: int, seed: int, slow: Any, step_s: float,
                           results: list[Any], plans: list[StagePlan], capacity_Bps: Any,
                           clean_plans: list[StagePlan], clean_capacity_Bps: Any) -> dict[str, Any]:
    """The slowdown the stragglers caused and who caused it, with the definitions of the measured
    what-if (``sim.traces.whatif.slowdowns``; Lin et al. OSDI 2025, Eq. 1-4): S = step / the
    straggler-free step (no jitter, no slow chip, every link at its rate); a group's attributed
    slowdown is the step with only that group's stragglers kept.

    - ``by_stage`` / ``by_replica``: only that pipeline stage's (in every replica) / that
      data-parallel replica's compute stragglers (jitter and slow chips), on undegraded links;
    - ``by_cause``: only the jitter, only the slow chips, or only the degraded links.
    The same draws as the step itself (``replica_jitter(keep=...)``), so each is exact, not
    re-sampled. *results*: the step's (replica time, its draws, engine) per replica.
    """
    from .stragglers import replica_jitter
    from .traces.whatif import slowdowns

    par, cfg = scn.parallelism, scn.stragglers
    assert cfg is not None
    sigma = cfg.compute_jitter_sigma
    draws = [r[1] for r in results]
    links_degraded = plans is not clean_plans

    def play(plans: list[StagePlan], cap: Any, jitter: Any = None) -> float:
        return simulate(plans, pp=par.pp, vs=vs, micro=wl.microbatches, schedule_kind=par.schedule,
                        group=par.microbatch_group, jitter=jitter, capacity_Bps=cap).step_time_s

    ideal_s = play(clean_plans, clean_capacity_Bps)

    def replica_s(d: Any, keep: Any) -> float:
        """One replica on undegraded links with only the sources *keep(stage, cause)* acting."""
        if sigma <= 0 and not any(f > 1 and keep(s, "slow_chips")
                                  for s, f in enumerate(d.stage_slowdown)):
            return ideal_s                               # nothing of this replica acts
        return play(clean_plans, clean_capacity_Bps, replica_jitter(scn, d, seed, keep))

    def step_with(keep: Any) -> float:
        return max(replica_s(d, keep) for d in draws)

    # A replica alone: the others run straggler-free, so the step is the longer of the two.
    alone = ({d.replica: t for t, d, _ in results} if not links_degraded
             else {d.replica: replica_s(d, lambda s, c: True) for d in draws})
    causes: dict[str, Any] = {}
    if sigma > 0:
        causes["jitter"] = lambda s, c: c == "jitter"
    if len(slow):
        causes["slow_chips"] = lambda s, c: c == "slow_chips"
    by_cause = slowdowns(step_with, causes, ideal_s)
    if links_degraded:
        by_cause["degraded_links"] = play(plans, capacity_Bps) / ideal_s
    return {
        "slowdown": step_s / ideal_s,
        "straggler_free_step_s": ideal_s,
        "by_stage": slowdowns(step_with, {str(st): (lambda s, c, st=st: s == st)
                                          for st in range(par.pp)}, ideal_s),
        "by_replica": {str(r): max(t, ideal_s) / ideal_s for r, t in sorted(alone.items())},
        "by_cause": by_cause,
    }
