"""Topology graphs: published figures, reference switch counts, structure, and graph edits."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from graph_edits import fail_link, fail_node, fail_ocs

from sim.config import load_cluster, load_topology_spec
from sim.config.topology_specs import bundled_topologies
from sim.errors import ConfigError, TopologyError
from sim.topology import build_topology
from sim.topology.analysis import bisection_GBps, diameter_hops, summarize
from sim.topology.edits import degrade_link


def topo(name: str, chips: int | None = None, **kw):
    return build_topology(load_cluster(name, chips, **kw))


# --------------------------------------------------------------------------- published figures

@pytest.mark.parametrize(
    "name, chips, published_GBps, source",
    [
        ("tpu-v4", 4096, 24_000, "GCP-v4: bisection BW per pod 24 TB/s"),
        ("tpu-v5e", 256, 1_600, "GCP-v5e: bisection 1.6 TB/s per pod"),
        ("tpu-v6e", 256, 3_200, "GCP-v6e: bisection 3.2 TB/s per pod"),
        ("dgx-h100", 1024, 512 * 50, "SB-GPU / NV-SPOD-H100: non-blocking, 512 x 400 Gb/s"),
    ],
)
def test_bisection_matches_published_figure(name, chips, published_GBps, source) -> None:
    got = bisection_GBps(topo(name, chips))
    assert got == pytest.approx(published_GBps, rel=0.10), source


def test_two_node_bisection_is_one_nodes_nics() -> None:
    # 8 NICs x 400 Gb/s = 400 GB/s leave a node (SB-GPU "node egress 400 GB/s").
    assert bisection_GBps(topo("dgx-h100", 16)) == pytest.approx(400.0)


def test_shared_nics_halve_a_nodes_egress() -> None:
    # hgx-a100-4nic: 4 x HDR 200 Gb/s = 100 GB/s leave a node, half a DGX A100's 8 NICs.
    assert bisection_GBps(topo("hgx-a100-4nic", 16)) == pytest.approx(100.0)
    assert bisection_GBps(topo("dgx-a100", 16)) == pytest.approx(200.0)


def test_nics_must_divide_the_gpus(tmp_path: Path) -> None:
    f = tmp_path / "odd.yaml"
    f.write_text(SMALL_FABRIC.replace("nics: 8", "nics: 3"))
    with pytest.raises(ConfigError, match=r"node.nics.*divisor or a multiple of 8, got 3"):
        topo(str(f), 8)


def test_oversubscription_divides_the_cross_su_bisection() -> None:
    full = bisection_GBps(topo("dgx-h100", 1024))
    half = bisection_GBps(topo("dgx-h100", 1024, oversubscription=2.0))
    assert half == pytest.approx(full / 2)


def test_multi_pod_bisection_is_the_dcn() -> None:
    # 256 chips x 25 Gb/s DCN each = 800 GB/s per pod (GCP-v5e: 6.4 Tb/s per pod).
    assert bisection_GBps(topo("tpu-v5e", 512)) == pytest.approx(800.0)


def test_multislice_v5p_slices_meet_only_over_the_dcn() -> None:
    t = topo("tpu-v5p", 1024, slices=2)
    g = t.graph
    assert t.facts["pods"] == 2 and t.facts["shape"] == (8, 8, 8)
    # every chip's host is its node, 4 chips a host (GCP-v5p), and slices share no ICI link
    for d in t.devices:
        host = next(h for h in g[d] if g.nodes[h]["kind"] == "host")
        assert g.nodes[d]["node"] == g.nodes[d]["pod"] * 10**6 + int(host.rsplit("/", 1)[1])
    assert all(sum(1 for x in g[h] if g.nodes[x]["kind"] == "tpu") == 4
               for h in g if g.nodes[h]["kind"] == "host")
    assert not any(g.nodes[u]["pod"] != g.nodes[v]["pod"] for u, v in g.edges
                   if g.nodes[u]["kind"] == g.nodes[v]["kind"] == "tpu")
    # bisection: half the hosts' DCN uplinks, 512 chips x 6.25 GB/s (GCP-v5p: 50 Gb/s per chip)
    assert bisection_GBps(t) == pytest.approx(512 * 6.25)


def test_superpod_switch_counts_match_reference_table(specs_yaml) -> None:
    table = specs_yaml["topologies"]["dgx_superpod_h100"]["switch_counts_by_su"]
    for sus, nodes, gpus, leaf, spine, core in table:
        info = summarize(topo("dgx-h100", gpus))
        sw = info["switches"]
        assert info["nodes"] == nodes
        assert (sw.get("leaf", 0), sw.get("spine", 0), sw.get("core", 0)) == (leaf, spine, core), sus
        assert sw["nvswitch"] == 4 * nodes
        # 1:1 cabling (NV-SPOD-B200): node-leaf = leaf-spine (= spine-core) = #GPUs
        assert info["links"]["ib"] == gpus * (3 if core else 2)


def test_tpu_v4_pod_has_48_ocs_holding_all_inter_cube_circuits() -> None:
    t = topo("tpu-v4", 4096)
    info = summarize(t)
    assert info["switches"] == {"ocs": 48}
    # 64 cubes x 6 faces x 16 links = 6,144 optical link ends (GK-TPUv4) = 3,072 circuits
    assert info["links"]["optical"] * 2 == 6144
    assert info["diameter_hops"] == 24
    assert info["nodes"] == 1024          # 4 chips per host


# --------------------------------------------------------------------------- shapes and wraps

@pytest.mark.parametrize(
    "name, chips, shape",
    [("tpu-v4", 4096, "16x16x16"), ("tpu-v4", 128, "4x4x8"), ("tpu-v4", 192, "4x4x12"),
     ("tpu-v4", 32, "2x4x4"), ("tpu-v5p", 6144, "16x16x24"), ("tpu-v5e", 128, "8x16"),
     ("tpu-v6e", 4, "2x2")],
)
def test_standard_shape_from_chips(name, chips, shape) -> None:
    assert summarize(topo(name, chips))["slice"] == shape


@pytest.mark.parametrize(
    "name, kw, wraps",
    [("tpu-v4", {"slice_": "4x4x4"}, [True] * 3), ("tpu-v4", {"slice_": "2x4x4"}, [False] * 3),
     ("tpu-v5e", {"slice_": "8x16"}, [False, True]), ("tpu-v5e", {"slice_": "16x16"}, [True, True])],
)
def test_wraparound_rules(name, kw, wraps) -> None:
    assert summarize(topo(name, **kw))["wraparound"] == wraps


def test_torus_degree_and_link_count() -> None:
    t = topo("tpu-v4", slice_="8x8x8")
    ici = t.graph.edge_subgraph((u, v) for u, v, k in t.graph.edges(data="kind")
                                if k in ("ici", "optical"))
    assert {d for _, d in ici.degree()} == {6}
    assert ici.number_of_edges() == 3 * 512


def test_twisted_torus_shortens_paths_and_widens_bisection() -> None:
    plain, twisted = topo("tpu-v4", slice_="4x4x8"), topo("tpu-v4", slice_="4x4x8", twisted=True)
    assert diameter_hops(twisted) < diameter_hops(plain)
    assert bisection_GBps(twisted) > bisection_GBps(plain)
    ici = twisted.graph.edge_subgraph((u, v) for u, v, k in twisted.graph.edges(data="kind")
                                      if k in ("ici", "optical"))
    assert {d for _, d in ici.degree()} == {6}


# --------------------------------------------------------------------------- diameter oracle

def _device_diameter(t, kinds: set[str] | None = None) -> int:
    g = t.graph
    if kinds is not None:
        g = g.edge_subgraph((u, v) for u, v, k in g.edges(data="kind") if k in kinds)
    devs = set(t.devices)
    return max(d for s in t.devices for n, d in nx.single_source_shortest_path_length(g, s).items()
               if n in devs)


SMALL_FABRIC = """\
name: tiny-3tier
kind: gpu_cluster
chip: H100-SXM
node: {gpus: 8, nvswitches: 4, gpu_switch_links: [5, 4, 4, 5], nvlink_latency_us: 0.25, nics: 8,
       nic_Gbps: 400, pcie_GBps: 64, pcie_latency_us: 0.5}
fabric: {ib_port_Gbps: 400, ib_latency_us: 0.3, su_nodes: 2, leaf_down_ports: 2, leaf_up_ports: 2,
         two_tier_max_sus: 1, max_gpus: 64, sharp: false, oversubscription: 1.0}
"""


@pytest.mark.parametrize("chips", [8, 16, 40, 64])
def test_fat_tree_diameter_equals_all_pairs_search(chips, tmp_path: Path) -> None:
    f = tmp_path / "tiny.yaml"
    f.write_text(SMALL_FABRIC)
    t = topo(str(f), chips)
    assert diameter_hops(t) == _device_diameter(t)


@pytest.mark.parametrize(
    "name, kw",
    [("tpu-v4", {"slice_": "2x4x4"}), ("tpu-v4", {"slice_": "4x4x8"}),
     ("tpu-v4", {"slice_": "4x8x8", "twisted": True}), ("tpu-v5e", {"slice_": "8x16"}),
     ("tpu-v5e", {"slice_": "16x16"})],
)
def test_tpu_diameter_equals_all_pairs_search(name, kw) -> None:
    t = topo(name, **kw)
    assert diameter_hops(t) == _device_diameter(t, {"ici", "optical"})


def test_every_device_reaches_every_other() -> None:
    for t in (topo("dgx-h100", 64), topo("tpu-v5e", 512), topo("tpu-v4", 32)):
        g = t.graph.subgraph(n for n in t.graph if t.graph.nodes[n]["kind"] != "ocs")
        assert nx.is_connected(g)


# --------------------------------------------------------------------------- edits

def test_edits_return_new_graphs_and_leave_the_original() -> None:
    t = topo("dgx-h100", 16)
    edges = t.graph.number_of_edges()
    bw = t.graph.edges[0, "n0/nic0"]["bandwidth_GBps"]
    a = fail_node(t, 3)
    assert a.graph.degree(3) == 0 and a.graph.nodes[3]["failed"]
    b = degrade_link(t, 0, "n0/nic0", 0.5)
    assert b.graph.edges[0, "n0/nic0"]["bandwidth_GBps"] == pytest.approx(bw / 2)
    c = fail_link(t, 0, "n0/nic0")
    assert not c.graph.has_edge(0, "n0/nic0")
    assert t.graph.number_of_edges() == edges and t.graph.edges[0, "n0/nic0"]["bandwidth_GBps"] == bw


def test_failed_ocs_takes_its_circuits_down() -> None:
    t = topo("tpu-v4", 4096)
    out = fail_ocs(t, "ocs/x/0")
    lost = t.graph.number_of_edges() - out.graph.number_of_edges()
    assert lost == 64          # 16 x-lines at that face position x 4 cube boundaries each
    assert bisection_GBps(out) < bisection_GBps(t)


def test_failing_unknown_things_is_a_clear_error() -> None:
    t = topo("dgx-h100", 8)
    with pytest.raises(TopologyError, match="no node 'gpu99'"):
        fail_node(t, "gpu99")
    with pytest.raises(TopologyError, match="no OCS"):
        fail_ocs(t, "ocs/x/0")
    with pytest.raises(TopologyError, match=r"factor must be in \(0, 1\]"):
        degrade_link(t, 0, "n0/nic0", 0.0)


def test_gpu_node_structure() -> None:
    t = topo("dgx-h100", 8)
    g = t.graph
    for dev in t.devices:
        nvl = sum(d["cables"] for _, _, d in g.edges(dev, data=True) if d["kind"] == "nvlink")
        assert nvl == 18
        assert sum(d["bandwidth_GBps"] for _, _, d in g.edges(dev, data=True)
                   if d["kind"] == "nvlink") == pytest.approx(450.0)
    a100 = topo("dgx-a100", 8)
    assert summarize(a100)["switches"]["nvswitch"] == 6
    assert not any(d.get("nvls") for _, d in a100.graph.nodes(data=True))


def test_sizes_beyond_the_limits_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"up to 16384"):
        load_cluster("dgx-h100", 16392)
    with pytest.raises(ConfigError, match=r"exceeds the largest tpu-v4 slice 16x16x16"):
        load_cluster("tpu-v4", slice_="16x16x20")


def _assert_networkx_would_hold(g: nx.Graph, name: str) -> None:
    """*g*, built by writing into its own dicts, is well formed: every node has its own
    attribute dict, every edge one attribute dict seen from both ends, and it equals (same nodes
    in the same order, same edges and attributes) the graph networkx's API builds from them."""
    adj, nodes = g._adj, g._node  # noqa: SLF001
    assert list(adj) == list(nodes)
    assert len({id(d) for d in nodes.values()}) == len(nodes)
    for u, nbrs in adj.items():
        assert all(adj[v][u] is d for v, d in nbrs.items()), (name, u)
    h = nx.Graph()
    h.add_nodes_from(g.nodes(data=True))
    h.add_edges_from(g.edges(data=True))
    assert nx.utils.graphs_equal(g, h) and h.number_of_edges() == g.number_of_edges()
    assert list(h.nodes) == list(g.nodes)


GPU_FABRICS = [t for t in bundled_topologies() if not load_topology_spec(t).chip.is_tpu]


@pytest.mark.parametrize("name", GPU_FABRICS)
def test_gpu_graphs_are_what_networkx_itself_would_hold(name: str) -> None:
    """The GPU builder writes its edges into the graph's own dicts (a PERF path beside
    ``nx.Graph.add_edge``): every node has its attribute dict, every edge one attribute dict seen
    from both ends, and the graph equals one rebuilt through networkx's own API, at one node and
    at a size with the switch tiers."""
    gpn = load_topology_spec(name).gpus_per_node
    for chips in (gpn, 64 * gpn):
        _assert_networkx_would_hold(topo(name, min(chips, load_topology_spec(name).max_gpus)).graph,
                                    name)


TPU_FABRICS = [t for t in bundled_topologies() if load_topology_spec(t).chip.is_tpu]


@pytest.mark.parametrize("name", TPU_FABRICS)
def test_tpu_graphs_are_what_networkx_itself_would_hold(name: str) -> None:
    """The TPU builder writes its nodes and edges into the graph's own dicts (a PERF path beside
    ``nx.Graph.add_node`` / ``add_edge``): every node has its own attribute dict, every edge one
    attribute dict seen from both ends, and the graph equals one rebuilt through networkx's API,
    at one host, at the default slice and (where the generation joins pods over the DCN) on two
    pods."""
    spec = load_topology_spec(name)
    sizes = [4, spec.default_chips] + ([2 * 256] if name in ("tpu-v5e", "tpu-v6e") else [])
    for chips in sizes:
        _assert_networkx_would_hold(topo(name, chips).graph, name)


@pytest.mark.parametrize("name, chips", [("dgx-h100", 64), ("dgx-h100", 8), ("hgx-h100-4gpu", 16),
                                         ("tpu-v4", 128), ("tpu-v5e", 512)])
def test_each_devices_island_and_the_gpu_list_are_the_graphs(name: str, chips: int) -> None:
    """``Topology.islands`` (read once) holds each device's GPU node or TPU slice as the graph
    does, ``island_of_devices`` answers from it, and ``first_gpus`` (read from the islands) finds
    the first GPU node of the graph and the next on its node and on another, as a scan of every
    GPU node does."""
    from sim.collectives.stages import first_gpus, island_of_devices
    t = topo(name, chips)
    key = "pod" if t.is_tpu else "node"
    assert t.islands.tolist() == [t.graph.nodes[d][key] for d in t.devices]
    assert island_of_devices(t) == {d: t.graph.nodes[d][key] for d in t.devices}
    assert island_of_devices(t, [5, 1]) == {5: t.graph.nodes[5][key], 1: t.graph.nodes[1][key]}
    gpus = sorted(n for n, k in t.graph.nodes(data="kind") if k == "gpu")
    node = {d: t.graph.nodes[d]["node"] for d in gpus}
    want = ((gpus[0], next((d for d in gpus[1:] if node[d] == node[gpus[0]]), None),
             next((d for d in gpus[1:] if node[d] != node[gpus[0]]), None)) if gpus else
            (None, None, None))
    assert first_gpus(t) == want
    assert len(set(t.islands.tolist())) == (t.pods if t.is_tpu else t.nodes)
