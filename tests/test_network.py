"""Max-min fair fluid sharing, the simpy event engine (tests/reference_engines.py), and routing,
against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import simpy
from graph_edits import fail_link

from sim.config import load_cluster
from sim.network.fluid import FlowSet, maxmin_rates, play_flows
from sim.network.links import LinkTable
from sim.network.routing import make_router
from sim.topology import build_topology


def matrix(entries: list[tuple[int, int, float]], links: int, flows: int) -> sp.csr_array:
    r, c, v = zip(*entries)
    return sp.csr_array((v, (r, c)), shape=(links, flows))


def test_one_flow_on_one_link() -> None:
    fs = FlowSet(1, np.array([0]), np.array([0]), np.array([1.0]), [1e6])
    t, _ = play_flows(fs, np.array([25e9]))
    assert t == pytest.approx(1e6 / 25e9)


def test_classic_maxmin_example() -> None:
    # Link A (cap 1) carries f0 and f1; link B (cap 2) carries f1 and f2. Max-min: f0 = f1 = 0.5 on
    # A (its bottleneck), then f2 takes what B has left: 1.5 (Bertsekas & Gallager 6.5.2).
    m = matrix([(0, 0, 1), (0, 1, 1), (1, 1, 1), (1, 2, 1)], 2, 3)
    assert maxmin_rates(m, np.array([1.0, 2.0])) == pytest.approx([0.5, 0.5, 1.5])


def test_split_flow_uses_both_branches() -> None:
    m = matrix([(0, 0, 0.5), (1, 0, 0.5)], 2, 1)
    assert maxmin_rates(m, np.array([1.0, 1.0])) == pytest.approx([2.0])


def test_finished_flows_hand_their_bandwidth_on() -> None:
    # Two flows share a 1 B/s link: 1 B and 3 B. Both at 0.5 until t=2 (1 B done); then the
    # second runs alone at 1 B/s for its last 2 B: done at t=4.
    fs = FlowSet(1, np.array([0, 0]), np.array([0, 1]), np.array([1.0, 1.0]), [1.0, 3.0])
    t, finish = play_flows(fs, np.array([1.0]))
    assert finish == pytest.approx([2.0, 4.0]) and t == pytest.approx(4.0)


def test_event_engine_matches_play_flows() -> None:
    from reference_engines import FluidNetwork

    topo = build_topology(load_cluster("dgx-h100", 16))
    links = LinkTable(topo)
    router = make_router(topo, links)
    pairs = [(0, 8, 3e6), (1, 9, 1e6), (0, 1, 2e6), (2, 8, 5e5)]
    env = simpy.Environment()
    net = FluidNetwork(env, links, router)
    done: list[float] = []

    def go(s: int, d: int, b: float):
        yield net.send(s, d, b)
        done.append(env.now)

    for s, d, b in pairs:
        env.process(go(s, d, b))
    env.run()
    r, c, v = router.routes_coo(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    t, finish = play_flows(FlowSet(len(links), r, c, v, [p[2] for p in pairs]), links.capacity_Bps)
    assert sorted(done) == pytest.approx(sorted(finish))


@pytest.mark.parametrize("name, chips", [("dgx-h100", 1024), ("dgx-h100", 4096), ("tpu-v4", 128),
                                          ("tpu-v5e", 512), ("hgx-a100-4nic", 64),
                                          ("tpu-v4", 4096), ("tpu-v5p", 1024), ("tpu-v5e", 64),
                                          ("tpu-v6e", 32), ("tpu-v4-twisted", 128),
                                          ("tpu-v4-edited", 128)])
def test_bulk_routes_equal_per_pair_routes(name: str, chips: int) -> None:
    # the TPU cases cover dimension-order routes over several hops (ties on wrapped axes of
    # even length split half each way), unwrapped axes, slices over the DCN, a twisted torus
    # (ECMP) and a graph missing a link (those flows leave the policy)
    base = name.removesuffix("-twisted").removesuffix("-edited")
    topo = build_topology(load_cluster(base, chips, twisted=name.endswith("-twisted")))
    if name.endswith("-edited"):
        topo = fail_link(topo, 0, 1)
    links = LinkTable(topo)
    fast = make_router(topo, links)
    rng = np.random.default_rng(0)
    a = rng.integers(0, chips, 500)
    b = (a + rng.integers(1, chips, 500)) % chips
    rows, cols, vals = fast.routes_coo(a, b)
    m = sp.coo_array((vals, (rows, cols)), shape=(len(links), len(a))).toarray()
    for i in range(len(a)):
        ids, fr = fast.route(int(a[i]), int(b[i]))
        want = np.zeros(len(links))
        np.add.at(want, ids, fr)
        assert np.array_equal(m[:, i], want), (a[i], b[i])


def test_routes_conserve_flow_and_follow_policies() -> None:
    topo = build_topology(load_cluster("dgx-h100", 512))
    links = LinkTable(topo)
    r = make_router(topo, links)
    ids, fr = r.route(0, 1)                 # same node: 2 hops, split over 4 NVSwitches 5:4:4:5
    assert fr.sum() == pytest.approx(2.0) and len(ids) == 8
    ids, fr = r.route(0, 8)                 # same rail, same leaf: GPU-NIC-leaf-NIC-GPU
    assert fr.sum() == pytest.approx(4.0)
    ids, fr = r.route(0, 9)                 # other rail: PXN over NVLink first, then rail 1
    assert fr.sum() == pytest.approx(6.0)
    ids, fr = r.route(0, 511)               # other SU: through the spines
    assert set(links.kind[ids]) == {"nvlink", "pcie", "ib"}


def test_shared_nic_routes_use_pxn_only_across_rails() -> None:
    # hgx-a100-4nic: GPUs 2k and 2k+1 of a node share NIC k (rail k).
    topo = build_topology(load_cluster("hgx-a100-4nic", 64))
    links = LinkTable(topo)
    r = make_router(topo, links)
    ids, fr = r.route(0, 9)                 # GPU 9 is local 1: rail 0 like GPU 0, no NVLink detour
    assert fr.sum() == pytest.approx(4.0) and set(links.kind[ids]) == {"pcie", "ib"}
    ids, fr = r.route(0, 10)                # local 2: rail 1, PXN over NVLink to GPU 2 first
    assert fr.sum() == pytest.approx(6.0)
    # The per-pair policy walk (used on edited fabrics: here one edited to the same graph) agrees
    # with the vectorized tables.
    slow = make_router(topo.with_graph(topo.graph), links)
    rng = np.random.default_rng(1)
    for a, b in zip(rng.integers(0, 64, 200), rng.integers(0, 64, 200)):
        if a == b:
            continue
        want = np.zeros(len(links))
        got = np.zeros(len(links))
        np.add.at(want, *r.route(int(a), int(b)))
        np.add.at(got, *slow.route(int(a), int(b)))
        assert np.allclose(got, want), (a, b)


def test_torus_routes_take_the_short_way_and_split_ties() -> None:
    topo = build_topology(load_cluster("tpu-v4", slice_="4x4x4"))
    links = LinkTable(topo)
    r = make_router(topo, links)
    ids, fr = r.route(0, 3)                  # x: 0 -> 3 is one hop backwards over the wrap
    assert len(ids) == 1 and fr.sum() == pytest.approx(1.0)
    ids, fr = r.route(0, 2)                  # x: 0 -> 2 is two hops either way: half each
    assert len(ids) == 4 and fr.sum() == pytest.approx(2.0)


def test_failed_link_is_routed_around() -> None:
    topo = build_topology(load_cluster("tpu-v4", slice_="4x4x4"))
    broken = fail_link(topo, 0, 1)
    r = make_router(broken, LinkTable(broken))
    ids, fr = r.route(0, 1)
    assert fr.sum() == pytest.approx(3.0)     # no direct link: around a neighbour ring, 3 hops


def test_twisted_slices_talk_over_the_dcn() -> None:
    # A twisted torus takes ECMP inside a slice; between slices the route is host -> DCN -> host
    # (it used to escape as an internal error).
    topo = build_topology(load_cluster("tpu-v4", slice_="4x4x8", twisted=True, slices=2))
    links = LinkTable(topo)
    ids, fr = make_router(topo, links).route(0, 200)
    assert list(links.kind[ids]) == ["pcie", "dcn", "dcn", "pcie"] and fr.sum() == pytest.approx(4.0)


@pytest.mark.parametrize("name, kw, kind", [
    ("dgx-h100", {"chips": 64}, "FatTreeRouter"), ("h100-3tier", {"chips": 8192}, "PodRouter"),
    ("slingshot-dragonfly", {"chips": 64}, "DragonflyRouter"), ("polaris", {"chips": 16}, "DragonflyRouter"),
    ("tpu-v4", {"slice_": "4x4x4"}, "TorusRouter")])
def test_each_fabric_kind_gets_its_router(name: str, kw: dict, kind: str) -> None:
    topo = build_topology(load_cluster(name, **kw))
    assert type(make_router(topo, LinkTable(topo))).__name__ == kind


def test_link_matrix_matches_scipy_csr_to_the_bit() -> None:
    """The numpy LinkMatrix (no SciPy import on a run's path) holds and multiplies what SciPy's
    CSR matrix does after sum_duplicates, in the same order: link loads and max-min rates agree
    exactly, duplicates (an ECMP branch met twice) included."""
    import scipy.sparse as sp

    from sim.network.fluid import LinkMatrix
    rng = np.random.default_rng(7)
    for _ in range(20):
        n_links, n_flows, n = int(rng.integers(1, 40)), int(rng.integers(1, 30)), int(rng.integers(1, 200))
        rows, cols = rng.integers(0, n_links, n), rng.integers(0, n_flows, n)
        vals = rng.choice([1.0, 0.5, 0.25, 1 / 3, 0.125], n) * rng.random(n)
        ref = sp.csr_array((vals, (rows, cols)), shape=(n_links, n_flows))
        ref.sum_duplicates()
        mine = LinkMatrix(rows, cols, vals, (n_links, n_flows))
        x, y = rng.random(n_flows), rng.random(n_links)
        assert np.array_equal(mine @ x, ref @ x)
        # the per-flow sums only tell which flows a link holds (> 0): equal to rounding
        assert np.allclose(mine.T @ y, ref.T @ y, rtol=1e-14)
        assert np.allclose(mine.sum(axis=0), np.asarray(ref.sum(axis=0)).ravel(), rtol=1e-14)
        cap = rng.random(n_links) + 0.1
        assert np.array_equal(maxmin_rates(mine, cap), maxmin_rates(ref, cap))


@pytest.mark.parametrize("name, chips", [("dgx-h100", 256), ("gb200-nvl72", 144), ("tpu-v4", 128),
                                         ("tpu-v5e", 512)])
def test_link_ids_follow_the_graphs_own_edge_order(name: str, chips: int) -> None:
    """The link table walks the adjacency itself (a PERF path): edge i of
    ``graph.edges(data=True)`` is link 2i one way and 2i + 1 the other, with that edge's
    bandwidth, latency and kind, also after a failure edit removed a link."""
    topo = build_topology(load_cluster(name, chips))
    for t in (topo, fail_link(topo, *next(iter(topo.graph.edges())))):
        links = LinkTable(t)
        edges = list(t.graph.edges(data=True))
        assert len(links) == 2 * len(edges)
        assert list(links.index) == [(u, v) for u, v, _ in edges] + [(v, u) for u, v, _ in edges]
        for i, (u, v, d) in enumerate(edges):
            assert links.id(u, v) == 2 * i and links.id(v, u) == 2 * i + 1
            assert links.kind[2 * i] == d["kind"]
            assert links.latency_s[2 * i + 1] == d["latency_us"] * 1e-6


@pytest.mark.parametrize("name, chips", [("dgx-h100", 256), ("tpu-v4", 128)])
def test_links_found_by_their_ends_positions_are_the_index_links(name: str, chips: int) -> None:
    """``ids`` / ``ids_at`` (the array lookups the routers use instead of the (u, v) dict) give
    every link's id, in the shape asked, and name a pair that has no edge, as ``id`` does."""
    topo = build_topology(load_cluster(name, chips))
    links = LinkTable(topo)
    pairs = list(links.index.items())
    us, vs = [u for (u, _), _ in pairs], [v for (_, v), _ in pairs]
    assert links.ids(us, vs).tolist() == [i for _, i in pairs]
    pu, pv = links.positions(us[:6]).reshape(2, 3), links.positions(vs[:6]).reshape(2, 3)
    assert links.ids_at(pu, pv).tolist() == [[i for _, i in pairs[:3]], [i for _, i in pairs[3:6]]]
    chips_only = [n for n in topo.graph if isinstance(n, int)]
    a, b = next((a, b) for a in chips_only for b in chips_only
                if a != b and not topo.graph.has_edge(a, b))
    with pytest.raises(KeyError, match=repr((a, b)).replace("(", r"\(").replace(")", r"\)")):
        links.ids([us[0], a], [vs[0], b])
    assert links.find_at(links.positions([us[0], a]), links.positions([vs[0], b])).tolist() == [
        pairs[0][1], -1]                               # no edge: -1 (``find_at``, the torus router's)
    with pytest.raises(KeyError):
        links.id(a, b)
    with pytest.raises(KeyError):
        links.id("no such node", b)
    assert links.ids([], []).shape == (0,)


@pytest.mark.parametrize("n_rows, n_links", [(10, 50), (5_000, 2_000), (5_000, 1_000_000),
                                             (70, 70)])
def test_flow_sets_find_their_links_as_np_unique_does(n_rows: int, n_links: int) -> None:
    """The links a flow set uses and each route entry's row among them (a table of the links
    where that is cheaper than sorting) are ``np.unique(rows, return_inverse=True)``'s."""
    from sim.network.fluid import unique_links
    rng = np.random.default_rng(n_rows + n_links)
    rows = rng.integers(0, n_links, n_rows)
    links, at = unique_links(rows, n_links)
    want_links, want_at = np.unique(rows, return_inverse=True)
    assert np.array_equal(links, want_links) and np.array_equal(at.reshape(-1), want_at.reshape(-1))
    assert np.array_equal(links[at], rows)


@pytest.mark.parametrize("n_rows, n_links", [(0, 10), (50, 100_000), (20_000, 3_000)])
def test_link_loads_sum_over_the_links_named_as_over_all_links(n_rows: int, n_links: int) -> None:
    """``_per_link`` sums each link's entries over the links the routes name, bit for bit what a
    ``np.bincount`` over every link gives, keeping the links whose total is > 0."""
    from sim.collectives.traffic import _per_link
    rng = np.random.default_rng(n_rows)
    rows = rng.integers(0, n_links, n_rows)
    vals = rng.random(n_rows) * (rng.random(n_rows) > 0.1)          # some zero entries
    ids, total = _per_link(rows, vals, n_links)
    dense = np.bincount(rows, weights=vals, minlength=n_links) if n_rows else np.zeros(n_links)
    want = np.flatnonzero(dense > 0)
    assert np.array_equal(ids, want) and total.tobytes() == dense[want].tobytes()
