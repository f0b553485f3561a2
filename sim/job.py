"""A scenario resolved once into the job the step plays: its workload and memory (checked to
fit), the topology and collective model it runs on, the per-stage plans and schedule, and, where
the scenario asks for them, the plans on undegraded links (stragglers' degraded links) and the
second job sharing the fabric (``cluster.shared_with``). Everything downstream reads these
fields; nothing re-derives them.

Also the work guard: a job whose steps would process more simulation events than the command
allows is refused as soon as its plans are known, with the estimate, before anything else is
planned or played.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from .collectives import CollectiveModel
from .config import ClusterConfig, Scenario
from .engine import Schedule, StagePlan, estimate_events, step_loads
from .errors import ConfigError
from .stages import StackEfficiency, plan_stages
from .topology import Topology, build_topology, paused_gc
from .workload.layout import Layout
from .workload.memory import MemoryBreakdown, check_fits, memory_per_chip
from .workload.transformer import Workload, build_workload
from .workload.xla_remat import xla_fit

__all__ = ["Job", "Neighbour", "resolve_job", "schedule_of", "EVENTS_PER_S", "DEFAULT_MAX_EVENTS"]

# The engine's events per second on a 2-core machine where a step's transfers share links (the
# common case: each event then carries the links' bookkeeping), which turns the work estimate into
# the seconds a refusal quotes. The bundled scenarios whose transfers share links play 225-330 k/s
# since links are kept by class (110-210 k/s before); the figure stays below them, on the safe
# side (benchmarks/test_bench_estimate.py holds the estimate within 3x of the played step on
# three sizes); bare simpy ~0.9 M/s.
# The default work limit of a command, ~1 minute of simulation: larger plans are refused up front
# with the estimate, and run with --max-events.
EVENTS_PER_S = 150_000
DEFAULT_MAX_EVENTS = 8_000_000


def schedule_of(scn: Scenario, wl: Workload) -> Schedule:
    """The pipeline schedule *scn*'s parallelism runs *wl*'s micro-batches with."""
    par = scn.parallelism
    return Schedule(pp=par.pp, vs=par.virtual_stages, micro=wl.microbatches,
                    schedule_kind=par.schedule, group=par.microbatch_group,
                    flushes=par.pipeline_flushes)


@dataclass(frozen=True, eq=False)
class Neighbour:
    """The second job on the next chips of the fabric: its scenario, plans and schedule."""

    scenario: Scenario
    plans: list[StagePlan]
    schedule: Schedule


@dataclass(frozen=True, eq=False)
class Job:
    """A scenario resolved for the step (module docstring). *clean_plans* / *clean_capacity_Bps*:
    the plans and link capacities before the stragglers' degraded links (the same objects where
    no link is degraded)."""

    scenario: Scenario
    workload: Workload
    memory: MemoryBreakdown
    topology: Topology
    net: CollectiveModel
    plans: list[StagePlan]
    schedule: Schedule
    layout: Layout
    clean_plans: list[StagePlan]
    clean_capacity_Bps: np.ndarray
    neighbour: Neighbour | None = None

    @property
    def capacity_Bps(self) -> np.ndarray:
        return self.net.links.capacity_Bps

    def ranks_per_stage(self, per_rank: bool) -> int:
        return ranks_per_stage(self.scenario, per_rank)


def network_of(cluster: ClusterConfig) -> tuple[Topology, CollectiveModel]:
    """The graph of *cluster* and its collective model: what a run builds, and what the points
    of a sweep or the runs of a validation suite on one cluster share."""
    topo = build_topology(cluster)
    return topo, CollectiveModel(topo)


def ranks_per_stage(scn: Scenario, per_rank: bool) -> int:
    """Ranks the engine plays per pipeline stage: all of them (tp x cp x dp) when *per_rank*,
    else one representative."""
    par = scn.parallelism
    return par.tp * par.cp * par.dp if per_rank else 1


def _check_work(scn: Scenario, plans: list[StagePlan], schedule: Schedule, capacity_Bps: np.ndarray,
                max_events: int, steps: int, per_rank: bool, trace: bool) -> None:
    """Refuse (ConfigError) when *steps* steps would process more simpy events than *max_events*
    (``sim.engine.estimate_events``), with the time they would take."""
    par = scn.parallelism
    sims = par.dp if scn.stragglers is not None and not per_rank else 1
    delays, quiet = (step_loads(plans, capacity_Bps, schedule.micro * schedule.vs) if not trace
                     else (None, None))
    events = steps * estimate_events(plans, vs=schedule.vs, micro=schedule.micro,
                                     ranks_per_stage=ranks_per_stage(scn, per_rank), simulations=sims,
                                     delays=delays, quiet=quiet)
    if events > max_events:
        what = f"{scn.source}: {steps} steps" if steps > 1 else f"{scn.source}: this step"
        minutes = events / EVENTS_PER_S / 60
        took = f"~{minutes:.0f} minutes" if minutes >= 1 else f"~{minutes * 60:.0f} s"
        raise ConfigError(f"{what} would process ~{events:,} simulation events ({took}), over the "
                          f"limit of {max_events:,}; pass --max-events {events} (or --yes) to run "
                          "it anyway, or shrink training.global_batch / --steps")


def resolve_job(scn: Scenario, *, topo: Topology | None = None, net: CollectiveModel | None = None,
                stack_efficiency: StackEfficiency | None = None, per_rank: bool = False,
                trace: bool = False, steps: int = 1, max_events: int | None = None,
                freeze: Callable[[], None] = lambda: None) -> Job:
    """*scn* resolved (module docstring). *topo* / *net*: a topology and collective model already
    built for ``scn.cluster`` (callers that run many scenarios on one cluster; a job sharing its
    fabric builds its own, for both jobs' chips). *per_rank*, *trace*, *steps*: how the job will
    be played, for the work guard; *max_events*: its limit (None: none). *freeze* is called once
    the topology and its link tables are built (``sim.topology.frozen_gc``)."""
    wl = build_workload(scn)
    scn, wl, mem = xla_fit(scn, wl, memory_per_chip(wl))
    check_fits(wl, mem)
    other = scn.neighbour
    with paused_gc():
        if other is not None:
            if per_rank or scn.stragglers is not None:
                raise ConfigError(f"{scn.source}: cluster.shared_with plays both jobs with one rank "
                                  "per stage; drop stragglers / per-rank tracing to use it")
            topo = build_topology(replace(scn.cluster,
                                          chips=scn.cluster.chips + other.cluster.chips,
                                          shared_with=None))
            net = None
        topo = topo or build_topology(scn.cluster)
        clean: tuple[Topology, CollectiveModel] | None = None     # the links before degradation
        if scn.stragglers is not None and scn.stragglers.link_degrade_fraction > 0:
            from .stragglers import degrade_links

            clean = (topo, net or CollectiveModel(topo))
            # The degraded links are the scenario's (its seed), the same for every --seed / step.
            topo = degrade_links(topo, scn.stragglers, scn.seed)
            net = CollectiveModel(topo)
        net = net or CollectiveModel(topo)
        freeze()
    plans = plan_stages(wl, net, stack_efficiency)
    schedule = schedule_of(scn, wl)
    if max_events is not None:
        _check_work(scn, plans, schedule, net.links.capacity_Bps, max_events, steps, per_rank, trace)
    clean_plans, clean_capacity = plans, net.links.capacity_Bps
    if clean is not None and clean[0] is not topo and not per_rank:      # only stragglers read them
        clean_plans, clean_capacity = plan_stages(wl, clean[1], stack_efficiency), clean[1].links.capacity_Bps
    neighbour = None
    if other is not None:
        owl = build_workload(other)
        check_fits(owl, memory_per_chip(owl))
        neighbour = Neighbour(other, plan_stages(owl, net, stack_efficiency, offset=scn.cluster.chips),
                              schedule_of(other, owl))
    return Job(scn, wl, mem, topo, net, plans, schedule, Layout.of(scn.parallelism),
               clean_plans, clean_capacity, neighbour)
