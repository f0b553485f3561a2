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
from collections.abc import Iterable

import numpy as np
import simpy
from simpy.events import NORMAL

from .fill import TOL, firsts, progressive_fill, unique_sorted_runs
from .link_classes import LinkClasses
from .traffic import Traffic

__all__ = ["SharedLinks", "succeed_after", "wake_at"]

# PERF: traffics on at most this many links are looked up link by link for whom they share a link
# with (``SharedLinks._register``: a dict entry a link, once per traffic); wider ones (a data-
# parallel ring over thousands of nodes) would cost more to look up than their bookkeeping saves
_FEW_LINKS = 4096

# (traffic, capacities + tolerance, ids sorted and distinct, work_s, may run alone, ids, bytes/s)
_Registered = tuple[Traffic, np.ndarray, bool, float, bool, np.ndarray, np.ndarray]


class _Flow:
    __slots__ = ("key", "ids", "rate", "cap", "left_s", "tail_s", "speed", "since", "done",
                 "version", "lazy")

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
        self.lazy = False             # its load not yet in ``SharedLinks.load`` (``transfer``)


class SharedLinks:
    """Directed links with capacities (bytes/s), shared by the transfers in flight."""

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray,
                 loads: Iterable[Traffic] | None = None) -> None:
        """*loads* given (every load that may be played on them): their links are kept by class
        (``LinkClasses``; ``capacity``, ``load`` and a flow's ids are then per class)."""
        self.env = env
        self._classes = None if loads is None else LinkClasses(loads, capacity_Bps)
        self.capacity = (np.asarray(capacity_Bps, float) if self._classes is None
                         else self._classes.capacity_Bps)
        self.load = np.zeros(len(self.capacity))          # bytes/s of the flows at speed 1
        # insertion-ordered (a dict, not a set: a set of these would iterate in the order of
        # their addresses, and the solve's sums with it)
        self.flows: dict[_Flow, None] = {}
        self.slowed = 0                                   # flows now below their speed alone
        self.solves = 0
        # per traffic: (the traffic, its links' capacities, whether its link ids are sorted and
        # distinct, its work_s: 0 without links, whether it may run without load bookkeeping,
        # its link ids and bytes/s here: ``_register``); the value keeps the key's object alive
        self._caps: dict[int, _Registered] = {}
        # PERF: every link that can be over capacity (sorted ids; a superset, pruned at each
        # solve): a link only goes over when a transfer starts on it, so while they are few a
        # solve looks them up in each flow's sorted ids instead of reading the load of all its
        # ~25,000 links; the same entries either way (benchmarks/test_bench_training.py,
        # 98,304 GPUs). None once a flow's ids are not sorted and distinct: always the scan;
        # None from the start where links are kept by class and few (a flow's classes are
        # fewer than its lookup would cost)
        few = self._classes is not None and len(self.capacity) <= _FEW_LINKS
        self._hot: np.ndarray | None = None if few else np.zeros(0, np.int64)
        # the speeds of each set of loads in flight solved so far (``_reshare``)
        self._solved: dict[tuple[tuple[int, float], ...], tuple[list[float], int]] = {}
        # PERF: a transfer with nothing in flight on any of its links, whose load alone fits,
        # runs at its speed alone with no load bookkeeping (``transfer``): for each traffic, the
        # traffics it shares a link with (itself included), found once through the users of each
        # link; how many flows of each are in flight; the flows in flight whose load is not yet
        # in ``load`` (added, in the order they started, before anyone who shares a link is
        # admitted, so ``load`` then holds what it would have held).
        self._users: dict[int, list[int]] = {}
        self._conflicts: dict[int, list[int]] = {}
        self._active: dict[int, int] = {}
        self._lazy: dict[_Flow, None] = {}
        # traffics over _FEW_LINKS links are not looked up link by link: they count as sharing
        # a link with everyone (never admitted so; while one is in flight, nobody is)
        self._wide_keys: set[int] = set()
        self._wide = 0                                    # flows of those in flight

    def transfer(self, traffic: Traffic, share: float = 1.0,
                 done: simpy.Event | None = None) -> simpy.Event:
        """The event of *traffic* delivered (*share* of its load: one group of several): *done*,
        an untriggered event, where given (PERF: what waits on the delivery waits on it directly)."""
        env = self.env
        key = id(traffic)
        hit = self._caps.get(key)
        if hit is None:
            hit = self._register(traffic)
        work_s = hit[3]
        if work_s <= 0:
            if done is None:
                return env.timeout(max(0.0, traffic.seconds))
            succeed_after(env, done, max(0.0, traffic.seconds))
            return done
        if done is None:
            done = env.event()
        ids = hit[5]
        rate = hit[6] if share == 1.0 else hit[6] * share
        f = _Flow((key, share), ids, rate, hit[1], work_s, traffic.latency_s, done, env.now)
        self.flows[f] = None
        if not hit[2]:
            self._hot = None
        active = self._active
        alone = hit[4] and not self._wide and not any(map(active.__getitem__, self._conflicts[key]))
        active[key] += 1
        if alone:
            # Nobody in flight shares a link with it and its load alone fits (a share of it all
            # the more): it runs at its speed alone and constrains nobody, as below, without
            # touching ``load`` until someone who shares a link arrives.
            f.lazy = True
            self._lazy[f] = None
            self._arm(f, split=f.tail_s > 0)
            return done
        if key in self._wide_keys:
            self._wide += 1
        if self._lazy:
            self._materialize(key)
        load = self.load[ids] + rate                      # (one gather for both uses)
        self.load[ids] = load
        over = load > f.cap
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
                self._hot = both[firsts(both)]
            self._reshare()
        return done

    def _register(self, traffic: Traffic) -> _Registered:
        """A traffic seen for the first time: its links' capacities (+ tolerance), whether its
        link ids are sorted and distinct, its work_s (0 without links), whether a flow of it may
        run without load bookkeeping while nobody shares its links (its load alone fits every
        link, and it is not wide), its link ids and bytes/s here (per class where links are kept
        by class); and the traffics it shares a link with, both ways."""
        key = id(traffic)
        ids, rate = ((traffic.link_ids, traffic.link_Bps) if self._classes is None
                     else self._classes.of(traffic))
        cap = self.capacity[ids] * (1 + TOL)
        wide = len(ids) > _FEW_LINKS
        hit = self._caps[key] = (traffic, cap, bool(np.all(ids[1:] > ids[:-1])),
                                 traffic.work_s if len(ids) else 0.0,
                                 not wide and not np.count_nonzero(rate > cap), ids, rate)
        self._active[key] = 0
        if wide:
            self._wide_keys.add(key)
            self._conflicts[key] = []
            return hit
        seen: dict[int, None] = {key: None}
        users = self._users
        for link in ids.tolist():
            was = users.get(link)
            if was is None:
                users[link] = [key]
            else:
                seen.update(dict.fromkeys(was))
                if was[-1] != key:
                    was.append(key)
        for other in seen:
            if other != key:
                self._conflicts[other].append(key)
        self._conflicts[key] = list(seen)
        return hit

    def _materialize(self, key: int) -> None:
        """Add to ``load``, in the order they started, the loads of the flows in flight that
        share a link with traffic *key* and were admitted without it (``transfer``)."""
        near = None if key in self._wide_keys else set(self._conflicts[key])
        for g in [g for g in self._lazy if near is None or g.key[0] in near]:
            del self._lazy[g]
            g.lazy = False
            self.load[g.ids] += g.rate

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
        self._active[f.key[0]] -= 1
        if f.key[0] in self._wide_keys:
            self._wide -= 1
        if f.lazy:                                        # alone on its links: binds nobody
            del self.flows[f]
            del self._lazy[f]
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
        hit = self._solved.get(key)
        if hit is None:
            speed = self._solve(flows)
            # each speed within the tolerance of 1 is 1; how many are below
            hit = ([x if x < 1.0 - TOL else 1.0 for x in speed.tolist()],
                   int(np.count_nonzero(speed < 1.0 - TOL)))
            if len(self._solved) < 10_000:
                self._solved[key] = hit
        self.slowed = hit[1]
        for f, x in zip(flows, hit[0]):
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
            first = firsts(c)                            # c is sorted: its distinct flows
            used, cc = c[first], np.cumsum(first) - 1
            # bytes/s at speed 1 on the overloaded links, (link, flow) entries summed
            m = np.bincount(r * len(used) + cc, weights=rates,
                            minlength=len(links) * len(used)).reshape(len(links), len(used))
            speed[used] = progressive_fill(m, self.capacity[links])
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
            self._hot = self._hot[self.load[self._hot] > self.capacity[self._hot] * (1 + TOL)]
        if not self._few_hot(flows):
            # (PERF: one vectorised pass over every flow's links instead of a loop per flow.)
            ids = np.concatenate([f.ids for f in flows])
            over = self.load[ids] > np.concatenate([f.cap for f in flows])
            c = np.repeat(np.arange(len(flows)), [len(f.ids) for f in flows])[over]
            links, r = unique_sorted_runs(ids[over])
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
