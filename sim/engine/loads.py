"""Which loads of a step can never meet another on a link over capacity (so the engine plays them
as plain delays): a bound per stream of each stage on what it can put on each link at once."""

from __future__ import annotations

import numpy as np

from ..network.traffic import Traffic
from .records import StagePlan

__all__ = ["played_loads", "private_loads", "step_loads"]


def _compute_loads(sp: StagePlan) -> list[Traffic]:
    """The compute stream's: blocking collectives, ZeRO-3 exposure, the final parameter gather."""
    compute = [seg.traffic for seg in sp.layer_fwd + sp.layer_bwd if seg.traffic is not None]
    return compute + [t for t in (sp.fsdp_fwd, sp.fsdp_bwd, sp.param_traffic) if t is not None]


def _dp_loads(sp: StagePlan) -> list[Traffic]:
    """The data-parallel stream's: gradient reductions and the replica all-reduce."""
    return [t for t in (sp.dp_traffic, sp.replica_traffic, sp.replica_tail) if t is not None]


def _streams(sp: StagePlan, sends: int) -> list[tuple[list[Traffic], int]]:
    """A stage's link loads by the stream that plays them, with how many of that stream's loads
    can be in flight at once: the compute stream (blocking collectives, ZeRO-3 exposure, the
    final parameter gather) and the data-parallel stream one at a time; pipeline sends are
    handed over without waiting, so up to *sends* (its passes) of one direction may overlap."""
    out = [(_compute_loads(sp), 1), (_dp_loads(sp), 1)]
    out += [([t], sends) for t in (sp.p2p_fwd, sp.p2p_bwd) if t is not None]
    return [(loads, n) for loads, n in out if loads]


def played_loads(plan: list[StagePlan], private: set[int]) -> list[Traffic]:
    """Every load of *plan* the engine may play on the shared links: all but the *private* ones
    (``private_loads``), which it plays as plain delays."""
    return [t for sp in plan for loads, _ in _streams(sp, 1) for t in loads if id(t) not in private]


def private_loads(plan: list[StagePlan], capacity_Bps: np.ndarray, sends: int = 1) -> set[int]:
    """Ids of the loads that can never be slowed nor slow anyone: on each of their links, the
    most every stream of the step could put there at once (per stream, its largest load on that
    link times how many of its loads can be in flight) fits in the capacity, e.g. tensor-parallel
    traffic on a node's NVLink while data parallelism is rail-aligned. They are played as plain
    delays (PERF: no load bookkeeping for most transfers; exact, since no link they use can
    ever be over capacity)."""
    return _bound(plan, capacity_Bps, sends)[0]


def step_loads(plan: list[StagePlan], capacity_Bps: np.ndarray, sends: int = 1
               ) -> tuple[set[int], list[set[int]]]:
    """(``private_loads``, and per stage the ids of its other compute-stream loads that only its
    own data-parallel stream can meet on a link over capacity: the bound fits on each of their
    links once that stream is left out, e.g. tensor-parallel traffic on NVLink that the gradient
    reduction also crosses). While that stream has nothing queued or in flight, such a quiet load
    runs alone: the engine plays it as the shared links would (``Traffic.end_alone``)."""
    hit = _last_hit(plan, capacity_Bps, sends)
    if hit is not None:
        return hit
    private, worst, cap = _bound(plan, capacity_Bps, sends)
    quiet: list[set[int]] = []
    for sp in plan:
        compute = [t for t in _compute_loads(sp) if id(t) not in private]
        dp = _dp_loads(sp)
        rest = worst - _worst([(dp, 1)], len(capacity_Bps)) if compute and dp else None
        quiet.append(set() if rest is None else
                     {id(t) for t in compute if np.all(rest[t.link_ids] <= cap[t.link_ids])})
    _LAST[:] = [(list(plan), capacity_Bps, sends, (private, quiet))]
    return private, quiet


# PERF: the last answer, kept until the next call asks for it: a run's work estimate
# (``sim.job``) and then its engine ask about the same plan (0.2 s at 98,304 GPUs,
# benchmarks/release.py run-98k). It holds the plan's stages, so the traffic ids stay theirs.
_LAST: list[tuple[list[StagePlan], np.ndarray, int, tuple[set[int], list[set[int]]]]] = []


def _last_hit(plan: list[StagePlan], capacity_Bps: np.ndarray, sends: int
              ) -> tuple[set[int], list[set[int]]] | None:
    """The last answer if it was for these very stages, capacities and sends (then forgotten)."""
    if not _LAST:
        return None
    stages, cap, n, out = _LAST[0]
    same = (n == sends and len(stages) == len(plan) and all(a is b for a, b in zip(stages, plan))
            and (cap is capacity_Bps or np.array_equal(cap, capacity_Bps)))
    if not same:
        return None
    _LAST.clear()
    return out


def _bound(plan: list[StagePlan], capacity_Bps: np.ndarray, sends: int
           ) -> tuple[set[int], np.ndarray, np.ndarray]:
    """(the private loads, the bound per link, the capacities with their tolerance)."""
    streams = [st for sp in plan for st in _streams(sp, sends)]
    cap = capacity_Bps * (1 + 1e-9)
    worst = _worst(streams, len(capacity_Bps))
    ok = worst <= cap
    return {id(t) for loads, _ in streams for t in loads if np.all(ok[t.link_ids])}, worst, cap


def _worst(streams: list[tuple[list[Traffic], int]], n_links: int) -> np.ndarray:
    """Per link, the most the *streams* could put there at once."""
    worst = np.zeros(n_links)
    for loads, n in streams:
        most = np.zeros(n_links)
        for t in loads:
            np.maximum.at(most, t.link_ids, t.link_Bps)
        worst += n * most
    return worst
