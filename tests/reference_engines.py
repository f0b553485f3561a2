"""Event-driven references that tests compare sim's fast paths with (code only tests use).

``FluidNetwork`` keeps every flow in flight on one simpy clock, gives them max-min fair rates over
the links (``sim.network.fluid.maxmin_rates``) and recomputes the rates whenever a flow starts or
finishes, so flows of different collectives that overlap in time share the links they have in
common; ``run_stages`` plays an algorithm's stages step by step (each step's flows start together;
the next step starts when all are delivered). ``sim.collectives`` solves one step and multiplies;
tests/test_collectives.py and tests/test_network.py check the two agree.

``simpy_replay_step`` plays a measured trace's program (``sim.traces.Program``) as simpy processes:
one process per op of one step of one dp rank; an op starts when its dependencies have ended, and a
group op (p2p pair, collective) ends at its group's latest arrival plus its own transfer time.
``sim.traces.replay`` evaluates the same thing as a longest path with numpy;
tests/test_traces.py compares them on small traces.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import simpy

from sim.network.fluid import maxmin_rates
from sim.network.links import LinkTable
from sim.network.routing import Router
from sim.traces import Program

__all__ = ["FluidNetwork", "run_stages", "simpy_replay_step"]

ProcGen = Generator[simpy.Event, Any, Any]


class FluidNetwork:
    """Links shared max-min fairly by all flows in flight on one simpy clock."""

    def __init__(self, env: simpy.Environment, links: LinkTable, router: Router) -> None:
        self.env = env
        self.links = links
        self.router = router
        self._flows: dict[int, dict[str, Any]] = {}
        self._next_id = 0
        self._last = 0.0
        self._version = 0
        self._pending = False

    def send(self, src: Hashable, dst: Hashable, nbytes: float) -> simpy.Event:
        """An event that fires when *nbytes* from *src* have reached *dst*."""
        done = self.env.event()
        ids, fr = self.router.route(src, dst)
        if nbytes <= 0 or len(ids) == 0:
            done.succeed()
            return done
        self._advance()
        self._flows[self._next_id] = {"ids": ids, "fr": fr, "left": float(nbytes), "done": done,
                                      "rate": 0.0}
        self._next_id += 1
        if not self._pending:       # flows started at one instant cost one rate update
            self._pending = True
            self.env.process(self._settle())
        return done

    def _settle(self) -> ProcGen:
        yield self.env.timeout(0)
        self._pending = False
        self._advance()
        self._reschedule()

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0:
            for f in self._flows.values():
                f["left"] -= f["rate"] * dt
        self._last = self.env.now

    def _reschedule(self) -> None:
        self._version += 1
        if not self._flows:
            return
        keys = list(self._flows)
        rows = np.concatenate([self._flows[k]["ids"] for k in keys])
        vals = np.concatenate([self._flows[k]["fr"] for k in keys])
        cols = np.repeat(np.arange(len(keys)), [len(self._flows[k]["ids"]) for k in keys])
        m = sp.csr_array((vals, (rows, cols)), shape=(len(self.links), len(keys)))
        m.sum_duplicates()
        used = np.flatnonzero(np.diff(m.indptr))           # a link no flow uses constrains nothing
        rates = maxmin_rates(m[used], np.asarray(self.links.capacity_Bps)[used])
        for k, r in zip(keys, rates):
            self._flows[k]["rate"] = float(r)
        wait = min(max(self._flows[k]["left"], 0.0) / self._flows[k]["rate"] for k in keys)
        self.env.process(self._wake(self._version, wait))

    def _wake(self, version: int, wait: float) -> ProcGen:
        yield self.env.timeout(wait)
        if version != self._version:
            return
        self._advance()
        # Flows due now (up to rounding) finish together, so identical flows cost one update.
        due = {k: max(f["left"], 0.0) / f["rate"] for k, f in self._flows.items()}
        least = min(due.values())
        finished = [k for k, t in due.items() if t <= least + 1e-9 * max(wait, 1e-12)]
        for k in finished:
            self._flows.pop(k)["done"].succeed()
        self._reschedule()


def run_stages(env: simpy.Environment, net: FluidNetwork, stages: Sequence[Sequence[Any]]) -> ProcGen:
    """Play an algorithm's stages (``sim.collectives.algorithms``): phases of a stage at once,
    steps of a phase one after another, flows of a step together."""
    for stage in stages:
        yield env.all_of([env.process(_run_phase(env, net, p)) for p in stage])


def _run_phase(env: simpy.Environment, net: FluidNetwork, phase: Any) -> ProcGen:
    phase = phase.explicit()
    for _ in range(phase.steps):
        events = [net.send(int(s), int(d), float(b))
                  for s, d, b in zip(phase.src, phase.dst, phase.nbytes)]
        events += [net.send(s, d, b) for s, d, b in phase.extra]
        g = net.router.g
        if phase.to_switch is not None:
            devs, vol = phase.to_switch
            events += [net.send(int(d), ("nvls", g.nodes[int(d)]["node"]), vol) for d in devs]
        if phase.from_switch is not None:
            devs, vol = phase.from_switch
            events += [net.send(("nvls", g.nodes[int(d)]["node"]), int(d), vol) for d in devs]
        yield env.all_of(events)


def simpy_replay_step(prog: Program, own_s: np.ndarray, step_index: int) -> np.ndarray:
    """Ends (ops, dp ranks) of step *step_index* replayed with per-op times *own_s* (ops, steps, dp)."""
    env = simpy.Environment()
    K, D = prog.n_ops, prog.n_dp
    done = [[env.event() for _ in range(D)] for _ in range(K)]
    end = np.zeros((K, D))
    # a group instance: (group, dp rank) or (group, -1) when it spans the dp ranks
    arrived: dict[tuple[int, int], list[float]] = {}
    met: dict[tuple[int, int], simpy.Event] = {}
    size = {g: len(grp.members) * (D if grp.across_dp else 1) for g, grp in enumerate(prog.groups)}

    def op(k: int, d: int) -> Generator[simpy.Event, Any, None]:
        if prog.deps[k]:
            yield simpy.AllOf(env, [done[j][d] for j in prog.deps[k]])
        g = int(prog.group_of[k])
        if g >= 0:
            key = (g, -1 if prog.groups[g].across_dp else d)
            arrived.setdefault(key, []).append(env.now)
            ev = met.setdefault(key, env.event())
            if len(arrived[key]) == size[g]:
                ev.succeed()
            yield ev                                            # the group's last arrival
        yield env.timeout(float(own_s[k, step_index, d]))
        end[k, d] = env.now
        done[k][d].succeed()

    for d in range(D):                                          # fixed creation order: fixed ties
        for k in range(K):
            env.process(op(k, d))
    env.run()
    return end
