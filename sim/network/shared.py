"""The links of one cluster shared by every transfer of a training step, on the simpy clock.

``SharedLinks.transfer(traffic)`` admits a ``Traffic`` and returns the event that fires when it has
been delivered. While transfers overlap, each runs at a speed x in (0, 1] of its speed alone, set
by max-min fair progressive filling (Bertsekas & Gallager, "Data Networks", 2nd ed., 6.5.2) with
each transfer's load alone as its weight: all speeds rise together until a link is full (the
transfers through it freeze there) or a transfer reaches its speed alone. Speeds are recomputed
whenever a transfer starts or ends, for the whole step.

Only a link whose load alone (the sum over transfers in flight of their bytes/s at speed 1) is
over its capacity can slow anyone; while there is none, every transfer is a plain delay of its
time alone, with no solve (the common case: rail-aligned traffic, NVLink inside a node). So where
nothing is shared the step equals the one played with isolated collective times, exactly.
"""

from __future__ import annotations

import functools
import heapq

import numpy as np
import simpy
from simpy.events import NORMAL

from .traffic import Traffic

__all__ = ["SharedLinks", "succeed_after", "wake_at"]

_TOL = 1e-9


class _Flow:
    __slots__ = ("key", "ids", "rate", "cap", "left_s", "tail_s", "speed", "since", "done",
                 "version")

    def __init__(self, key: tuple[int, float], ids: np.ndarray, rate: np.ndarray, cap: np.ndarray,
                 left_s: float, tail_s: float, done: simpy.Event, now: float) -> None:
        self.key = key                # (its traffic's id, the share of its load): what it puts where
        self.ids = ids
        self.rate = rate
        self.cap = cap                # its links' capacities (+ tolerance)
        self.left_s = left_s          # seconds of transfer left at speed 1, as of ``since``
        self.tail_s = tail_s          # then its latency, which sharing does not stretch
        self.speed = 1.0
        self.since = now
        self.done = done
        self.version = 0


class SharedLinks:
    """Directed links with capacities (bytes/s), shared by the transfers in flight."""

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray) -> None:
        self.env = env
        self.capacity = np.asarray(capacity_Bps, float)
        self.load = np.zeros(len(self.capacity))          # bytes/s of the flows at speed 1
        # insertion-ordered (a dict, not a set: a set of these would iterate in the order of
        # their addresses, and the solve's sums with it)
        self.flows: dict[_Flow, None] = {}
        self.slowed = 0                                   # flows now below their speed alone
        self.solves = 0
        # per traffic: (the traffic, its links' capacities, whether its link ids are sorted and
        # distinct, its work_s: 0 without links); the value keeps the key's object alive
        self._caps: dict[int, tuple[Traffic, np.ndarray, bool, float]] = {}
        # PERF: every link that can be over capacity (sorted ids; a superset, pruned at each
        # solve): a link only goes over when a transfer starts on it, so while they are few a
        # solve looks them up in each flow's sorted ids instead of reading the load of all its
        # ~25,000 links; the same entries either way (benchmarks/test_bench_training.py,
        # 98,304 GPUs). None once a flow's ids are not sorted and distinct: always the scan.
        self._hot: np.ndarray | None = np.zeros(0, np.int64)
        # the speeds of each set of loads in flight solved so far (``_reshare``)
        self._solved: dict[tuple[tuple[int, float], ...], np.ndarray] = {}

    def transfer(self, traffic: Traffic, share: float = 1.0,
                 done: simpy.Event | None = None) -> simpy.Event:
        """The event of *traffic* delivered (*share* of its load: one group of several): *done*,
        an untriggered event, where given (PERF: what waits on the delivery waits on it directly)."""
        env = self.env
        hit = self._caps.get(id(traffic))
        if hit is None:
            ids = traffic.link_ids
            hit = self._caps[id(traffic)] = (traffic, self.capacity[ids] * (1 + _TOL),
                                             bool(np.all(ids[1:] > ids[:-1])),
                                             traffic.work_s if len(ids) else 0.0)
        work_s = hit[3]
        if work_s <= 0:
            if done is None:
                return env.timeout(max(0.0, traffic.seconds))
            succeed_after(env, done, max(0.0, traffic.seconds))
            return done
        if done is None:
            done = env.event()
        ids = traffic.link_ids
        rate = traffic.link_Bps if share == 1.0 else traffic.link_Bps * share
        f = _Flow((id(traffic), share), ids, rate, hit[1], work_s, traffic.latency_s, done, env.now)
        self.flows[f] = None
        load = self.load[ids] + rate                      # (one gather for both uses)
        self.load[ids] = load
        over = load > f.cap
        if not hit[2]:
            self._hot = None
        # PERF: count_nonzero, not .any(): a quarter of the cost on these short arrays
        if not np.count_nonzero(over):
            # Its links carry no more than their capacity even with every flow at full speed:
            # it runs at its speed alone and constrains nobody (rates are at most those loads).
            self._arm(f, split=f.tail_s > 0)
        else:
            if self._hot is not None:
                # both sorted: a stable sort merges the two runs in one pass
                both = np.concatenate([self._hot, f.ids[over]])
                both.sort(kind="stable")
                self._hot = both[_firsts(both)]
            self._reshare()
        return done

    def _fits(self, f: _Flow) -> bool:
        if self._few_hot([f]):
            at = self._hot_at(f)[1]
            return not np.count_nonzero(self.load[f.ids[at]] > f.cap[at])
        return not np.count_nonzero(self.load[f.ids] > f.cap)

    def _few_hot(self, flows: list[_Flow]) -> bool:
        """Whether looking the candidate links up in *flows* beats reading all their links (a
        binary search costs some 16 reads)."""
        return self._hot is not None and 16 * len(self._hot) * len(flows) < sum(
            len(f.ids) for f in flows)

    def _hot_at(self, f: _Flow) -> tuple[np.ndarray, np.ndarray]:
        """The candidate links *f* runs on: their positions in ``_hot`` and in ``f.ids``."""
        hot = self._hot
        assert hot is not None
        pos = np.searchsorted(f.ids, hot)
        k = np.flatnonzero(f.ids[np.minimum(pos, len(f.ids) - 1)] == hot)
        return k, pos[k]

    # ------------------------------------------------------------------ internals

    def _arm(self, f: _Flow, split: bool) -> None:
        """Schedule *f*'s end at its current speed: the transfer's end first (it frees its links
        then, whatever else is in flight) and its latency after it; one timer when it has none."""
        f.version += 1
        if split:
            t = self.env.timeout(f.left_s / f.speed)
            t.callbacks.append(functools.partial(self._transferred, f, f.version))
        else:
            t = self.env.timeout(f.left_s / f.speed + f.tail_s)
            t.callbacks.append(functools.partial(self._finish, f, f.version))

    def _release(self, f: _Flow) -> bool:
        """Take *f*'s load off its links; whether it touched an overloaded one (only then can
        its end speed anyone up)."""
        if f not in self.flows:
            return False
        binding = bool(self.slowed) and not self._fits(f)
        del self.flows[f]
        self.load[f.ids] -= f.rate
        return binding

    def _transferred(self, f: _Flow, version: int, _event: object = None) -> None:
        if version != f.version:
            return
        f.left_s = 0.0
        binding = self._release(f)
        if f.tail_s > 0:
            succeed_after(self.env, f.done, f.tail_s)
        else:
            f.done.succeed()
        if binding and self.slowed:
            self._reshare()

    def _finish(self, f: _Flow, version: int, _event: object = None) -> None:
        if version != f.version:
            return
        binding = self._release(f)
        f.done.succeed()
        if binding and self.slowed:
            self._reshare()

    def _reshare(self) -> None:
        """Max-min speeds of every flow in flight; re-arm those whose speed changed."""
        now = self.env.now
        self.solves += 1
        for f in list(self.flows):                        # progress so far at the old speeds
            f.left_s = max(0.0, f.left_s - f.speed * (now - f.since))
            f.since = now
            if f.left_s <= 0:                             # in its latency tail: links free
                self._release(f)
        flows = list(self.flows)
        # PERF: the speeds are a function of the loads in flight, in their order: a step meets
        # the same few sets again and again (8,364 solves, 1,109 sets at 98,304 GPUs)
        key = tuple(f.key for f in flows)
        speed = self._solved.get(key)
        if speed is None:
            speed = self._solve(flows)
            if len(self._solved) < 10_000:
                self._solved[key] = speed
        self.slowed = int(np.sum(speed < 1.0 - _TOL))
        for f, x in zip(flows, speed.tolist()):
            x = min(1.0, x) if x < 1.0 - _TOL else 1.0
            if x != f.speed or f.version == 0:
                f.speed = x
                self._arm(f, split=True)

    def _solve(self, flows: list[_Flow]) -> np.ndarray:
        """The max-min speeds of *flows* (all in flight, in order)."""
        speed = np.ones(len(flows))
        # Only links over capacity at full speed can bind: the columns of the flows through them,
        # as (flow, link index into *links*, bytes/s at speed 1) entries in flow order.
        c, r, rates, links = self._overloaded(flows)
        if len(c):
            first = _firsts(c)                            # c is sorted: its distinct flows
            used, cc = c[first], np.cumsum(first) - 1
            # bytes/s at speed 1 on the overloaded links, (link, flow) entries summed
            m = np.bincount(r * len(used) + cc, weights=rates,
                            minlength=len(links) * len(used)).reshape(len(links), len(used))
            speed[used] = _progressive_fill(m, self.capacity[links])
        return speed

    def _overloaded(self, flows: list[_Flow]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                       np.ndarray]:
        """The (flow, link) entries of *flows* on links over capacity: flow indices (sorted),
        the indices of their links into the sorted overloaded links, their bytes/s at speed 1,
        and those links."""
        empty = np.zeros(0, np.int64)
        if not flows:
            return empty, empty, np.zeros(0), empty
        if self._hot is not None:                         # prune: those over capacity now
            self._hot = self._hot[self.load[self._hot] > self.capacity[self._hot] * (1 + _TOL)]
        if not self._few_hot(flows):
            # (PERF: one vectorised pass over every flow's links instead of a loop per flow.)
            ids = np.concatenate([f.ids for f in flows])
            over = self.load[ids] > np.concatenate([f.cap for f in flows])
            c = np.repeat(np.arange(len(flows)), [len(f.ids) for f in flows])[over]
            links, r = _unique_sorted_runs(ids[over])
            if self._hot is not None:
                self._hot = links                         # the overloaded links any flow uses
            return c, r, np.concatenate([f.rate for f in flows])[over], links
        # The same entries from the candidate links: each flow's ids are sorted, so its entries
        # come out in the same (link) order as the scan of its ids gives them.
        hot = self._hot
        assert hot is not None
        cs, ks, rs = [], [], []
        for i, f in enumerate(flows):
            k, at = self._hot_at(f)
            if len(k):
                cs.append(np.full(len(k), i))
                ks.append(k)
                rs.append(f.rate[at])
        if not cs:
            return empty, empty, np.zeros(0), empty
        k = np.concatenate(ks)
        seen = np.zeros(len(hot), bool)
        seen[k] = True                                    # the candidates some flow uses
        return np.concatenate(cs), (np.cumsum(seen) - 1)[k], np.concatenate(rs), hot[seen]


def succeed_after(env: simpy.Environment, event: simpy.Event, delay: float) -> None:
    """*event* succeeds *delay* s from now: scheduled as a timeout is, without a timer of its own
    (PERF: one simpy event fewer per transfer with a latency; the same time, ``now + delay``)."""
    _triggered(event)
    env.schedule(event, delay=delay)


def wake_at(env: simpy.Environment, t: float) -> simpy.Event:
    """An event that fires at time *t* exactly (>= now): pushed on simpy's queue as a timeout is,
    at *t* itself rather than at ``now + (t - now)``, which can round to another time."""
    assert t >= env.now, (t, env.now)
    event = _triggered(env.event())
    heapq.heappush(env._queue, (t, NORMAL, next(env._eid), event))  # noqa: SLF001
    return event


def _triggered(event: simpy.Event) -> simpy.Event:
    """*event* marked as succeeded (what ``Event.succeed`` sets before it schedules the event)."""
    event._ok = True                      # noqa: SLF001
    event._value = None                   # noqa: SLF001
    return event


def _firsts(x: np.ndarray) -> np.ndarray:
    """Where each run of equal values of sorted *x* starts (PERF: ``np.r_`` costs more than the
    comparison on these short arrays)."""
    first = np.empty(len(x), bool)
    first[:1] = True
    np.not_equal(x[1:], x[:-1], out=first[1:])
    return first


def _unique_sorted_runs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` for *x* made of a few sorted runs (each flow's links).

    PERF: a stable sort merges the runs in one pass where ``np.unique``'s quicksort starts over
    (benchmarks/test_bench_training.py, 98,304 GPUs); the values and the inverse are the same."""
    order = np.argsort(x, kind="stable")
    s = x[order]
    first = _firsts(s)
    inverse = np.empty(len(x), np.int64)
    inverse[order] = np.cumsum(first) - 1
    return s[first], inverse


def _progressive_fill(m: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Speeds x (0..1] of the columns of *m* (load at speed 1 on each row's link): all rise
    together; a full link freezes its columns; a column stops at 1."""
    x = np.ones(m.shape[1])
    free = (m > 0).any(axis=0)
    level = 0.0
    residual = capacity.astype(float).copy()
    while np.count_nonzero(free):
        load = m[:, free].sum(axis=1)
        used = np.flatnonzero(load > 0)
        ratio = residual[used] / load[used]
        k = int(np.argmin(ratio))
        inc = max(0.0, float(ratio[k]))
        if level + inc >= 1.0:                            # the rest reach their speed alone
            break
        level += inc
        residual[used] -= inc * load[used]
        is_full = residual[used] <= _TOL * capacity[used]
        is_full[k] = True                                 # at least the tightest link
        hit = free & (m[used[is_full]] > 0).any(axis=0)
        x[hit] = level
        free &= ~hit
    return x
