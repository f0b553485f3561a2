"""A scenario resolved once into the job the step plays: its workload and memory (checked to
fit), the topology and collective model it runs on, the per-stage plans and schedule, and, where
the scenario asks for them, the plans on undegraded links (stragglers' degraded links) and the
second job sharing the fabric (``cluster.shared_with``). Everything downstream reads these
fields; nothing re-derives them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from .collectives import CollectiveModel
from .config import Scenario
from .engine import Schedule, StagePlan
from .errors import ConfigError
from .stages import StackEfficiency, plan_stages
from .topology import Topology, build_topology, paused_gc
from .workload.layout import Layout
from .workload.memory import MemoryBreakdown, check_fits, memory_per_chip
from .workload.transformer import Workload, build_workload

__all__ = ["Job", "Neighbour", "resolve_job", "schedule_of"]


def schedule_of(scn: Scenario, wl: Workload) -> Schedule:
    """The pipeline schedule *scn*'s parallelism runs *wl*'s micro-batches with."""
    par = scn.parallelism
    return Schedule(pp=par.pp, vs=par.virtual_stages, micro=wl.microbatches,
                    schedule_kind=par.schedule, group=par.microbatch_group)


@dataclass(frozen=True)
class Neighbour:
    """The second job on the next chips of the fabric: its scenario, work and plans."""

    scenario: Scenario
    workload: Workload
    plans: list[StagePlan]
    schedule: Schedule


@dataclass(frozen=True)
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


def resolve_job(scn: Scenario, *, topo: Topology | None = None, net: CollectiveModel | None = None,
                stack_efficiency: StackEfficiency | None = None, per_rank: bool = False,
                freeze: Callable[[], None] = lambda: None) -> Job:
    """*scn* resolved (module docstring). *topo* / *net*: a topology and collective model already
    built for ``scn.cluster`` (callers that run many scenarios on one cluster). *per_rank*: the
    step will be played rank by rank (refused with a neighbour job). *freeze* is called once the
    topology and its link tables are built (``sim.topology.frozen_gc``)."""
    wl = build_workload(scn)
    mem = memory_per_chip(wl)
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
            topo = degrade_links(topo, scn.stragglers, scn.seed)
            net = CollectiveModel(topo)
        net = net or CollectiveModel(topo)
        freeze()
    plans = plan_stages(wl, net, stack_efficiency)
    clean_plans, clean_capacity = plans, net.links.capacity_Bps
    if clean is not None and clean[0] is not topo:
        clean_plans, clean_capacity = plan_stages(wl, clean[1], stack_efficiency), clean[1].links.capacity_Bps
    neighbour = None
    if other is not None:
        owl = build_workload(other)
        check_fits(owl, memory_per_chip(owl))
        neighbour = Neighbour(other, owl, plan_stages(owl, net, stack_efficiency, offset=scn.cluster.chips),
                              schedule_of(other, owl))
    return Job(scn, wl, mem, topo, net, plans, schedule_of(scn, wl), Layout.of(scn.parallelism),
               clean_plans, clean_capacity, neighbour)
