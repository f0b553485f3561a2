"""The plan search's screen of one cluster size: every layout read, fitted and given a floor
under its step, then timed in the order of its floor until the ranked ones are exact.

A layout's floor comes from its last stage's plan alone, without its transfers, plus the
pipeline's fill and drain (``sim.engine.step_floor`` with ``sim.stage_floors.pass_floors``).
Layouts are timed by the screening path (``sim.engine.fast_step``) in the order of their floors
until a floor lies above the ``RANKED``-th best step, so the pick and its runners-up are those of
timing every layout (tests/test_plan.py checks it).

XLA's rematerialization (``sim.workload.xla_remat``) makes a TPU layout over its memory fit by
recomputing tensors, one greedy round of trials after another. Whether it can is one trial; which
tensors it picks matters only to a layout that is timed. Such a layout of a uniform stack is
screened on that one trial, its floor taken with no recomputation at all (every tensor XLA may
recompute only adds kernels to the backward, and its offloaded tensors, hence its host memory,
stay as they are), and fitted when its turn to be timed comes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from .config import scenario_from_dict, with_layout
from .errors import SimError

__all__ = ["RANKED", "Screened", "Timed", "screen_size", "ranked"]

RANKED = 4                         # layouts of a size ranked exactly: the pick and 3 runners-up


class Screened(NamedTuple):
    """A layout of one size that divides and fits, ready to time: the floor under its step, its
    place in the search's order, and what ``fast_step`` needs (its workload and memory before
    XLA's fit where ``refit``: ``xla_fit`` gives them when it is timed)."""

    floor_s: float
    order: int
    layout: Mapping[str, Any]
    scenario: Any
    wl: Any
    mem: Any
    schedule: Any
    refit: bool = False


class Timed(NamedTuple):
    """A timed layout: its step by the screening path, its workload and memory as it runs."""

    step_s: float
    layout: Mapping[str, Any]
    wl: Any
    mem: Any


def screen_size(layouts: Iterable[Mapping[str, Any]], raw_of: Callable[[Mapping[str, Any]], dict[str, Any]]
                ) -> tuple[list[Screened], list[str], Any, Any]:
    """Every layout of one size read (*raw_of* gives its scenario mapping), fitted and floored:
    (the screened layouts, why the others were refused, the size's topology and collective
    model; None, None where no layout was screened)."""
    from .job import network_of, schedule_of
    from .workload.memory import check_fits, memory_per_chip
    from .workload.transformer import build_workload
    from .workload.xla_remat import xla_fit, xla_refits

    screened: list[Screened] = []
    reasons: list[str] = []
    topo = net = read = None
    for lay in layouts:
        refit = False
        try:
            raw = raw_of(lay)
            # the size's first scenario read whole, the others' training and parallelism
            scn = scenario_from_dict(raw, "plan") if read is None else with_layout(read, raw)
            read = read or scn
            wl = build_workload(scn)
            mem = memory_per_chip(wl)
            refit = _deferred(scn, wl, mem) and xla_refits(scn, mem)
            if not refit:
                scn, wl, mem = xla_fit(scn, wl, mem)
                check_fits(wl, mem)
        except SimError as e:
            reasons.append(str(e))
            continue
        if topo is None:
            topo, net = network_of(scn.cluster)
        sched = schedule_of(scn, wl)
        floor_wl = build_workload(_no_recompute(scn)) if refit else wl
        screened.append(Screened(_floor(floor_wl, net, sched), len(screened), lay, scn, wl, mem,
                                 sched, refit))
    return screened, reasons, topo, net


def _deferred(scn: Any, wl: Any, mem: Any) -> bool:
    """Whether XLA's fit of this layout may wait until it is timed: a uniform stack (its memory
    is its first stage's, whose offloaded tensors the fit keeps) without overlapped expert
    traffic (whose hiding a longer backward changes), its host memory within the chip's."""
    host = scn.cluster.chip.host_memory_bytes
    return (len(wl.kinds) == 1 and not wl.mtp_layers and not scn.software.ep_comm_overlap
            and not (mem.offloaded_B and host is not None and mem.offloaded_B > host))


def _no_recompute(scn: Any) -> Any:
    """*scn* recomputing nothing in its backward (and offloading nothing)."""
    return replace(scn, training=replace(scn.training, recompute="none", recompute_modules=(),
                                         remat_policy=(), remat_policy_name=""))


def _floor(wl: Any, net: Any, schedule: Any) -> float:
    """The floor under *wl*'s step in *schedule*: its last stage alone (its layers, the head and
    the loss, the pipeline's fill before it and drain after it), its transfers left out."""
    from .engine import step_floor
    from .stage_floors import pass_floors
    from .stages import plan_stages

    ends = [wl.scenario.parallelism.pp - 1]
    return step_floor(plan_stages(wl, net, traffic=False, stages=ends, floor_only=True),
                      schedule, ends, pass_floors(wl))


def ranked(screened: Sequence[Screened], net: Any) -> list[Timed]:
    """The layouts of a size timed by the screening path, best first (by step, then the fewer
    model-parallel chips): the first ``RANKED`` exactly as if every layout were timed. Layouts are
    timed in the order of their floors; once a floor lies above the ``RANKED``-th best step so
    far, it and every layout after it would rank below that and are left untimed."""
    from .engine import fast_step
    from .stages import plan_stages
    from .workload.xla_remat import xla_fit

    timed: list[tuple[float, int, int, Timed]] = []         # (step, tp x pp, order, timed)
    for s in sorted(screened, key=lambda x: (x.floor_s, x.order)):
        if len(timed) >= RANKED and s.floor_s > timed[RANKED - 1][0]:
            break
        wl, mem = (xla_fit(s.scenario, s.wl, s.mem)[1:] if s.refit else (s.wl, s.mem))
        step_s = fast_step(plan_stages(wl, net, traffic=False), s.schedule).step_time_s
        lay = s.layout
        timed.append((step_s, lay["tp"] * lay["pp"], s.order, Timed(step_s, lay, wl, mem)))
        timed.sort(key=lambda x: x[:3])
    return [x[3] for x in timed]
