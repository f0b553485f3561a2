"""The step's transfers on shared links: the fluid network against closed forms, and equal to the
isolated collective times where nothing is shared."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sim.collectives import CollectiveModel
from sim.collectives.traffic import collective_traffic, p2p_traffic
from sim.collectives.tree import tree_fill_factor
from sim.config import scenario_from_dict
from sim.engine import Schedule, Segment, StagePlan, simulate
from sim.network.shared import SharedLinks
from sim.network.traffic import Traffic
from sim.topology import build_topology

GiB = 2**30


def _net(topology: str, chips: int, **cluster: object) -> CollectiveModel:
    scn = scenario_from_dict({"cluster": {"topology": topology, "chips": chips, **cluster},
                              "model": "llama3-8b"})
    return CollectiveModel(build_topology(scn.cluster))


def _play(net: CollectiveModel, *transfers: tuple[float, Traffic]) -> list[float]:
    """Start each (at, traffic) on one SharedLinks; the time each is delivered."""
    env = simpy.Environment()
    links = SharedLinks(env, net.links.capacity_Bps)
    done = [0.0] * len(transfers)

    def go(i: int, at: float, tr: Traffic):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        yield links.transfer(tr)
        done[i] = env.now

    for i, (at, tr) in enumerate(transfers):
        env.process(go(i, at, tr))
    env.run()
    return done


def test_event_log_of_two_transfers_on_one_link() -> None:
    """A: 20 B at 10 B/s from t=0; B: 5 B at 5 B/s on the same link (and 5 B/s on another) from
    t=0.5. Together they need 15 B/s of 10: both run at 2/3 of their speed alone (max-min with
    their loads as weights) until B is done at 2.0; A, alone again, ends at 2.5 = 25 B / 10 B/s
    (the link never idles). B's latency (0.1 s) is not stretched."""
    env = simpy.Environment()
    links = SharedLinks(env, np.array([10.0, 10.0]))
    a = Traffic(2.0, np.array([0]), np.array([10.0]))
    b = Traffic(1.1, np.array([0, 1]), np.array([5.0, 5.0]), latency_s=0.1)
    log: list[tuple[str, float]] = []

    def go(name: str, tr: Traffic, at: float):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        log.append((f"{name} start", env.now))
        yield links.transfer(tr)
        log.append((f"{name} end", env.now))

    env.process(go("a", a, 0.0))
    env.process(go("b", b, 0.5))
    env.run()
    assert log == [("a start", 0.0), ("b start", 0.5), ("b end", pytest.approx(2.1)),
                   ("a end", pytest.approx(2.5))]
    assert links.solves == 2 and links.slowed == 0 and not links.flows


def test_transfers_that_fit_are_their_times_alone_without_a_solve() -> None:
    env = simpy.Environment()
    links = SharedLinks(env, np.array([10.0, 10.0]))
    ends = []

    def go(tr: Traffic):  # type: ignore[no-untyped-def]
        yield links.transfer(tr)
        ends.append(env.now)

    env.process(go(Traffic(1.0, np.array([0]), np.array([6.0]))))
    env.process(go(Traffic(3.0, np.array([0, 1]), np.array([4.0, 10.0]))))
    env.run()
    assert ends == [1.0, 3.0] and links.solves == 0


@pytest.mark.parametrize("topology, chips, op, group", [
    ("dgx-h100", 32, "allreduce", list(range(32))),
    ("dgx-h100", 32, "reducescatter", [0, 8, 16, 24]),
    ("dgx-h100", 16, "allgather", list(range(8))),
    ("dgx-a100", 16, "alltoall", [0, 1, 8, 9]),
    ("tpu-v4", 64, "allreduce", list(range(64))),
    ("tpu-v5e", 256, "reducescatter", list(range(16))),
])
def test_a_collective_alone_in_the_engine_is_its_isolated_time(topology: str, chips: int, op: str,
                                                              group: list[int]) -> None:
    net = _net(topology, chips)
    for size in (4096, 64 * 2**20, GiB):
        alone = net.time(op, size, group).time_s
        tr = collective_traffic(net, op, size, [group])
        seg = (Segment("tp", alone, "tp", tr),)
        plan = StagePlan(seg, seg, 1, 0, 0, 0, 0, 0.0, 0.0, False, 0.0, 0.0, 0.0)
        step = simulate([plan], Schedule(pp=1, vs=1, micro=1, schedule_kind="1f1b"),
                        capacity_Bps=net.links.capacity_Bps)
        assert step.step_time_s == pytest.approx(2 * alone, rel=1e-12)
        assert step.network_solves == 0


def test_two_dp_groups_on_one_oversubscribed_spine() -> None:
    """Two data-parallel pairs, each GPU 0 of a node in scalable unit 0 with GPU 0 of a node in
    unit 1, so each ring step crosses the rail-0 leaves' uplinks; at 32:1 a leaf keeps one
    uplink (one NIC's rate): alone each pair has it to itself, together they split it. The
    engine's time equals the fluid model's time of the two played together (time_concurrent)
    and twice the transfer alone."""
    net = _net("dgx-h100", 512, oversubscription=32)
    a, b = [0, 32 * 8], [8, 33 * 8]
    size = GiB
    alone = net.time("allreduce", size, a)
    both = net.time_concurrent("allreduce", size, [a, b])
    tr = collective_traffic(net, "allreduce", size, [a, b])
    (end,) = _play(net, (0.0, tr))
    assert (alone.algo, alone.proto) == ("tree", "Simple")
    assert both.time_s == pytest.approx(alone.latency_s + 2 * alone.transfer_s, rel=1e-9)
    # The engine plays bytes at the shared links' rates. Alone, the tree's transfer includes its
    # pipeline fill (depth 1, 64 chunks of 512 KiB per channel: 1 + 1/64), time that moves no
    # bytes; played together the link never idles, so the engine gives the bytes' time: the
    # fluid model's, less the fill.
    fill = tree_fill_factor(size, 2, 2, 32)
    assert fill == pytest.approx(1 + 1 / 64)
    assert end == pytest.approx(alone.latency_s + 2 * alone.transfer_s / fill, rel=1e-9)
    # without the oversubscription they do not meet
    free = _net("dgx-h100", 512)
    (end_free,) = _play(free, (0.0, collective_traffic(free, "allreduce", size, [a, b])))
    assert end_free == pytest.approx(free.time("allreduce", size, a).time_s, rel=1e-12)


def test_pipeline_send_over_the_nic_a_dp_reduce_scatter_uses() -> None:
    """GPU 0 of node 0 sends P bytes to GPU 0 of node 1 (a pipeline hand-over) while the pair
    reduce-scatters S bytes: both go out through NIC 0 of node 0, each alone at the NIC's rate.
    The link never idles, so the last ends at (bytes over it) / capacity + its latency; the
    first after twice its own transfer (equal speeds while both run, equal loads)."""
    net = _net("dgx-h100", 16)
    nic = net.links.id("n0/nic0", next(x for x in net.topo.graph["n0/nic0"]
                                        if str(x).startswith("leaf")))
    cap = net.links.capacity_Bps[nic]
    S, P = GiB, GiB // 4
    rs = collective_traffic(net, "reducescatter", S, [[0, 8]])
    pp_alone = net.time("sendrecv", P, [0, 8])
    pp = p2p_traffic(net, [(0, 8)], P, pp_alone.time_s, pp_alone.latency_s)
    # premise: each alone fills the NIC link
    for tr in (rs, pp):
        assert tr.link_Bps[tr.link_ids == nic][0] == pytest.approx(cap, rel=1e-9)
    end_rs, end_pp = _play(net, (0.0, rs), (0.0, pp))
    bytes_rs, bytes_pp = S / 2, P
    assert end_pp == pytest.approx(2 * bytes_pp / cap + pp.latency_s, rel=1e-9)
    assert end_rs == pytest.approx((bytes_rs + bytes_pp) / cap + rs.latency_s, rel=1e-9)


def test_fsdp_gather_and_dp_reduce_on_one_tpu_torus_axis() -> None:
    """A ZeRO-3 weight all-gather and a gradient reduce-scatter on the same ring of 4 chips of a
    TPU v4 cube (one wrapped axis): the same links in the same directions, each alone at their
    full rate, so together they take the sum of their transfers (what the engine assumed for
    ZeRO-3 before it played links), plus the later one's latency."""
    net = _net("tpu-v4", 64)
    group = [0, 1, 2, 3]
    S = GiB // 8
    ag = collective_traffic(net, "allgather", S, [group])
    rs = collective_traffic(net, "reducescatter", S, [group])
    assert set(ag.link_ids) == set(rs.link_ids)
    end_ag, end_rs = _play(net, (0.0, ag), (0.0, rs))
    assert max(end_ag, end_rs) == pytest.approx(ag.work_s + rs.work_s + rs.latency_s, rel=1e-9)


def test_step_on_a_fabric_with_nothing_shared_equals_isolated_times() -> None:
    """TP inside nodes, rail-aligned data parallelism, no pipeline: the engine plays every
    transfer on the links and the step equals the one with every transfer a plain delay."""
    from sim.stages import plan_stages
    from sim.workload.transformer import build_workload

    scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 64},
                              "model": "llama3-8b", "training": {"seq_len": 2048, "global_batch": 32},
                              "parallelism": {"tp": 8, "zero": 1}})
    net = CollectiveModel(build_topology(scn.cluster))
    wl = build_workload(scn)
    plans = plan_stages(wl, net)
    kw = Schedule(pp=1, vs=1, micro=wl.microbatches, schedule_kind="1f1b")
    shared = simulate(plans, kw, capacity_Bps=net.links.capacity_Bps)
    alone = simulate(plans, kw)
    assert shared.step_time_s == pytest.approx(alone.step_time_s, rel=1e-12)   # up to rounding
    assert shared.network_solves == 0


def test_per_rank_equals_one_rank_per_stage_where_transfers_meet() -> None:
    """GPipe over 4 stages of 4 GPUs: pipeline sends meet the data-parallel reductions on the
    NICs (the engine solves the sharing). Every rank admitting its own group's share of the load
    gives the step the representative ranks give with the loads of all groups."""
    from sim.run import run

    scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 16},
                              "model": {"preset": "llama3-8b", "layers": 8},
                              "training": {"seq_len": 2048, "global_batch": 16},
                              "parallelism": {"tp": 1, "pp": 4, "schedule": "gpipe"}})
    one = run(scn).step
    every = run(scn, per_rank=True).step
    assert one.network_solves > 0 and every.network_solves > 0
    assert every.step_time_s == pytest.approx(one.step_time_s, rel=1e-12)


class _Checked(SharedLinks):
    """Shared links that also solve every step by reading all links, and compare."""

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray) -> None:
        super().__init__(env, capacity_Bps)
        self.looked_up = 0                            # solves that took the candidate lookup

    def _overloaded(self, flows):  # type: ignore[no-untyped-def]
        fast = super()._overloaded(flows)
        hot, self._hot = self._hot, None
        if hot is not None and self._few_hot_of(hot, flows):
            self.looked_up += 1
        scan = super()._overloaded(flows)             # every flow's links read
        self._hot = hot
        for a, b in zip(fast, scan, strict=True):
            assert a.tolist() == b.tolist()
        return fast

    def _few_hot_of(self, hot: np.ndarray, flows) -> bool:  # type: ignore[no-untyped-def]
        self._hot = hot
        try:
            return self._few_hot(flows)
        finally:
            self._hot = None


@pytest.mark.parametrize("seed, top_Bps", [(0, 3.0), (1, 3.0), (2, 8.0)])
def test_candidate_link_lookup_finds_the_entries_of_the_scan(seed: int, top_Bps: float) -> None:
    """The solve's lookup of the few links that can be over capacity (PERF, ``_hot``) finds the
    same (flow, link, load) entries in the same order as reading every flow's links, at every
    solve of random overlapping transfers (a few links over capacity, most not; with the lower
    loads some solves find none: a transfer's end that frees every link)."""
    rng = np.random.default_rng(seed)
    n_links = 5000
    capacity = rng.uniform(5.0, 20.0, n_links)
    env = simpy.Environment()
    links = _Checked(env, capacity)

    def go(at: float, tr: Traffic):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        yield links.transfer(tr)

    for _ in range(40):
        ids = np.sort(rng.choice(n_links, int(rng.integers(200, 1500)), replace=False))
        tr = Traffic(float(rng.uniform(0.5, 2.0)), ids, rng.uniform(0.5, top_Bps, len(ids)),
                     latency_s=float(rng.uniform(0.0, 0.1)))
        env.process(go(float(rng.uniform(0.0, 3.0)), tr))
    env.run()
    assert links.solves > 10 and links.looked_up > 0 and not links.flows


def _deliveries(few_links: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], int]:
    """Delivery times of random transfers on one SharedLinks (some repeated, some sharing links,
    some alone over capacity, some wider than *few_links*), and how many ran without load
    bookkeeping."""
    import sim.network.shared as shared

    monkeypatch.setattr(shared, "_FEW_LINKS", few_links)
    rng = np.random.default_rng(seed)
    n_links = 400
    capacity = rng.uniform(5.0, 20.0, n_links)
    env = simpy.Environment()
    links = SharedLinks(env, capacity)
    lazy = 0
    loads = []
    for _ in range(12):
        ids = np.sort(rng.choice(n_links, int(rng.integers(2, 60)), replace=False))
        top = 30.0 if len(loads) == 0 else 8.0                    # the first one alone over
        loads.append(Traffic(float(rng.uniform(0.2, 1.0)), ids,
                             rng.uniform(0.5, top, len(ids)), latency_s=float(rng.uniform(0, 0.05))))
    done: list[float] = []

    def go(at: float, tr: Traffic, share: float):  # type: ignore[no-untyped-def]
        nonlocal lazy
        yield env.timeout(at)
        ev = links.transfer(tr, share)
        lazy += len(links._lazy)                          # noqa: SLF001
        yield ev
        done.append(env.now)

    for _ in range(200):
        tr = loads[int(rng.integers(len(loads)))]
        env.process(go(float(rng.uniform(0.0, 100.0)), tr, float(rng.choice([1.0, 0.5]))))
    env.run()
    assert not links.flows and not links._lazy          # noqa: SLF001
    return done, lazy


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_transfers_alone_on_their_links_skip_the_bookkeeping_exactly(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transfer nobody in flight shares a link with runs without touching the link loads
    (PERF); the deliveries are those of the full bookkeeping to the bit, with wide traffics
    (counted as sharing with everyone) among them or not."""
    reference, none = _deliveries(-1, seed, monkeypatch)           # every traffic is wide
    assert none == 0
    for few in (40, 4096):
        fast, lazy = _deliveries(few, seed, monkeypatch)
        assert lazy > 0, few
        assert fast == reference


@pytest.mark.parametrize("framework,parallelism", [
    ("deepspeed", {"tp": 4, "pp": 4, "schedule": "1f1b", "zero": 1}),
    ("megatron", {"tp": 4, "pp": 2, "schedule": "interleaved", "virtual_stages": 2})])
def test_loads_only_their_own_gradient_stream_meets_play_alone_while_it_is_idle_exactly(
        framework: str, parallelism: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensor-parallel traffic on NVLink that the stage's own data-parallel ring also crosses
    (``step_loads``' quiet loads) is played as the links play it alone while that stream has nothing queued
    or in flight, with no transfer through the shared links (PERF): the step, its breakdown and
    the solves are those of playing every such transfer through the shared links, to the bit."""
    import sim.engine.step as step
    from sim.stages import plan_stages
    from sim.workload.transformer import build_workload

    scn = scenario_from_dict({"cluster": {"topology": "hgx-a100-4nic", "chips": 64},
                              "model": {"preset": "llama3-8b", "layers": 8},
                              "training": {"seq_len": 2048, "global_batch": 64},
                              "parallelism": parallelism, "software": {"framework": framework}})
    net = CollectiveModel(build_topology(scn.cluster))
    wl = build_workload(scn)
    plans = plan_stages(wl, net)
    p = scn.parallelism
    kw = Schedule(pp=p.pp, vs=p.virtual_stages if p.schedule == "interleaved" else 1,
                  micro=wl.microbatches, schedule_kind=p.schedule)
    private, quiet = step.step_loads(plans, net.links.capacity_Bps, wl.microbatches * kw.vs)
    assert all(q - private for q in quiet)             # every stage has such loads
    fast = simulate(plans, kw, capacity_Bps=net.links.capacity_Bps)
    real = step.step_loads
    monkeypatch.setattr(step, "step_loads", lambda plan, *a: (real(plan, *a)[0], [set()] * len(plan)))
    full = simulate(plans, kw, capacity_Bps=net.links.capacity_Bps)
    assert full.network_solves > 0                     # the gradient ring does meet them
    assert fast.events < full.events
    assert (fast.step_time_s, fast.breakdown_s, fast.network_solves) == (
        full.step_time_s, full.breakdown_s, full.network_solves)


def test_a_runs_second_question_about_its_loads_takes_the_first_answer_only_for_the_same_plan(
        ) -> None:
    """``step_loads`` keeps its last answer for the next question (the work estimate's, then the
    engine's): the same stages, capacities and sends get it once, then it is forgotten; any
    other question is worked out afresh, and every answer is the one worked out afresh."""
    from sim.engine.loads import step_loads
    from sim.stages import plan_stages
    from sim.workload.transformer import build_workload

    scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 32},
                              "model": {"preset": "llama3-8b", "layers": 4},
                              "training": {"seq_len": 2048, "global_batch": 32},
                              "parallelism": {"tp": 8, "pp": 2}})
    net = CollectiveModel(build_topology(scn.cluster))
    plans = plan_stages(build_workload(scn), net)
    cap = net.links.capacity_Bps
    first = step_loads(plans, cap, 4)
    kept = step_loads(plans, cap, 4)
    assert kept[0] is first[0] and kept[1] is first[1]          # the kept answer, once
    again = step_loads(plans, cap, 4)
    assert again[0] is not first[0] and again == first          # then worked out afresh
    for other in ((plans, cap * 0.01, 4), (plans, cap, 5), (list(reversed(plans)), cap, 4)):
        got = step_loads(*other)
        assert got[0] is not again[0]
        step_loads(plans, cap, 99)                               # forget it
        assert got == step_loads(*other)


def _symmetric_loads(rng: np.random.Generator, copies: int) -> tuple[np.ndarray, list[Traffic]]:
    """Loads over *copies* translated copies of a small fabric (as a pipeline send of many pairs
    or a data-parallel ring over many nodes crosses them), with a few links each copy shares
    (spines), so that loads meet and links go over capacity."""
    n_own, n_shared = 30, 6
    capacity = np.concatenate([np.tile(rng.choice([5.0, 10.0, 20.0], n_own), copies),
                               rng.choice([10.0, 40.0], n_shared)])
    loads = []
    for _ in range(10):
        own = np.sort(rng.choice(n_own, int(rng.integers(2, 12)), replace=False))
        own_rate = rng.choice([1.0, 2.5, 4.0, 8.0], len(own))
        spine = np.sort(rng.choice(n_shared, int(rng.integers(0, 3)), replace=False))
        ids = np.concatenate([own + k * n_own for k in range(copies)] + [copies * n_own + spine])
        rate = np.concatenate([own_rate] * copies + [rng.uniform(1.0, 30.0, len(spine))])
        loads.append(Traffic(float(rng.uniform(0.2, 1.0)), ids.astype(np.int64), rate,
                             latency_s=float(rng.uniform(0.0, 0.05))))
    return capacity, loads


def _delivered(capacity: np.ndarray, loads: list[Traffic], by_class: bool, seed: int
               ) -> tuple[list[float], int]:
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    links = SharedLinks(env, capacity, loads if by_class else None)
    done: list[float] = []

    def go(at: float, tr: Traffic, share: float):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        yield links.transfer(tr, share)
        done.append(env.now)

    for _ in range(150):
        tr = loads[int(rng.integers(len(loads)))]
        env.process(go(float(rng.uniform(0.0, 30.0)), tr, float(rng.choice([1.0, 0.25]))))
    env.run()
    return done, links.solves


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_links_kept_by_class_deliver_as_links_kept_one_by_one(seed: int) -> None:
    """Links no load tells apart are kept as one (``LinkClasses``, PERF): every delivery time is
    the same to the bit as with every link kept, over loads that meet and slow each other."""
    from sim.network.link_classes import LinkClasses

    capacity, loads = _symmetric_loads(np.random.default_rng(seed), copies=16)
    assert len(LinkClasses(loads, capacity)) < len(capacity) / 8
    each, solves = _delivered(capacity, loads, False, seed)
    assert solves > 10
    assert _delivered(capacity, loads, True, seed) == (each, solves)


def test_link_classes_split_by_every_load_and_refuse_a_stranger() -> None:
    """Two links are one class only with the same capacity and the same rate from every load; a
    load that tells links of a class apart, or crosses links no load crossed, is refused."""
    from sim.network.link_classes import LinkClasses

    capacity = np.array([10.0, 10.0, 10.0, 10.0, 20.0, 10.0])
    a = Traffic(1.0, np.array([0, 1, 2, 3, 4]), np.array([2.0, 2.0, 2.0, 3.0, 2.0]))
    b = Traffic(1.0, np.array([1, 2]), np.array([1.0, 1.0]))
    classes = LinkClasses([a, b], capacity)
    # {0}, {1, 2}, {3}, {4}: 3 has a's other rate, 4 another capacity, 0 lacks b
    assert len(classes) == 4
    ids, rate = classes.of(b)
    assert len(ids) == 1 and rate.tolist() == [1.0]
    assert sorted(classes.of(a)[1].tolist()) == [2.0, 2.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="tells apart"):
        classes.of(Traffic(1.0, np.array([1]), np.array([1.0])))
    with pytest.raises(ValueError, match="none of the step's loads"):
        classes.of(Traffic(1.0, np.array([5]), np.array([1.0])))
