"""Scale-out fabrics beyond InfiniBand: EFA, GPUDirect-TCPX(O), RoCE, frontier-scale three tiers.

Builder facts read back from the topology files, a 2-node ring against its closed form on EFA and
TCPXO, bad fabric sections through the command line, and the three-tier pods on a small build.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from sim.calibration import LINK_EFFICIENCY, NET_LATENCY_US
from sim.collectives import CollectiveModel
from sim.config import load_cluster, load_topology_spec
from sim.topology import build_topology

REPO = Path(__file__).resolve().parent.parent
TOPOLOGIES = REPO / "topologies"
GiB = 2**30


def topo(name: str, chips: int):
    return build_topology(load_cluster(name, chips))


# --------------------------------------------------------------------------- builder facts

@pytest.mark.parametrize("name, nics, per_gpu, rails, nic_GBps, kind", [
    ("aws-p5", 32, 4, 8, 4 * 12.5, "efa"),          # 32 x 100 Gb/s, 4 striped per GPU
    ("aws-p4de", 4, 1, 4, 12.5, "efa"),             # 4 x 100 Gb/s, one per GPU pair
    ("gcp-a3-mega", 8, 1, 8, 25.0, "tcpxo"),        # 8 x 200 Gb/s
    ("gcp-a3-high", 4, 1, 4, 25.0, "tcpx"),         # 4 x 200 Gb/s
    ("gcp-a3-ultra", 8, 1, 8, 50.0, "gib"),         # 8 x 400 Gb/s, RoCE under Google's gIB
    ("gcp-a4", 8, 1, 8, 50.0, "gib"),
    ("gcp-a4-roce", 8, 1, 8, 50.0, "roce"),         # the same VMs with upstream NCCL
    ("oci-h200-roce", 16, 2, 8, 2 * 25.0, "roce"),  # 16 x 200 Gb/s
    ("oci-a100-roce", 16, 2, 8, 2 * 12.5, "roce"),  # 16 x 100 Gb/s
])
def test_nic_layout_from_the_file(name, nics, per_gpu, rails, nic_GBps, kind) -> None:
    spec = load_topology_spec(name)
    assert (spec.nics_per_node, spec.nics_per_gpu, spec.rails, spec.transport) == (nics, per_gpu, rails, kind)
    t = topo(name, 16)
    g = t.graph
    nic_nodes = [n for n, d in g.nodes(data=True) if d["kind"] == "nic" and d["node"] == 0]
    assert len(nic_nodes) == rails
    for nic in nic_nodes:
        (leaf,) = [x for x in g[nic] if g.nodes[x]["kind"] == "leaf"]
        e = g.edges[nic, leaf]
        assert e["kind"] == kind and e["bandwidth_GBps"] == pytest.approx(nic_GBps)
        assert e["cables"] == per_gpu
    # every GPU reaches exactly one NIC (its rail), GPUs share it where the node has fewer rails
    per_nic = {nic: sum(1 for x in g[nic] if g.nodes[x]["kind"] == "gpu") for nic in nic_nodes}
    assert set(per_nic.values()) == {8 // rails}


def test_net_latency_per_transport() -> None:
    """EFA: aws-ofi-nccl's tuner figures from the file; TCPXO: the calibration fit; RoCE (gIB's
    too) and InfiniBand: NCCL's own NET table (None)."""
    assert CollectiveModel(topo("aws-p5", 16)).hw.net_us == (20.0, 3.0)
    assert CollectiveModel(topo("gcp-a3-mega", 16)).hw.net_us == (NET_LATENCY_US["tcpxo"], 0.0)
    assert CollectiveModel(topo("gcp-a3-ultra", 16)).hw.net_us is None
    assert CollectiveModel(topo("oci-h200-roce", 16)).hw.net_us is None
    assert CollectiveModel(topo("dgx-h100", 16)).hw.net_us is None


def test_every_transport_has_a_link_efficiency() -> None:
    """A fabric's NIC and switch links take their transport's name as link kind; a transport
    without an entry in LINK_EFFICIENCY would run at its full line rate unnoticed."""
    from sim.topology import NET_KINDS
    from sim.topology_spec import TRANSPORT_NAMES, TRANSPORTS

    assert set(TRANSPORTS) <= set(LINK_EFFICIENCY)
    assert set(TRANSPORT_NAMES) == set(TRANSPORTS)
    assert NET_KINDS == set(TRANSPORTS)
    assert all(0 < LINK_EFFICIENCY[t] <= 1 for t in TRANSPORTS)


def test_background_load_reaches_every_transport() -> None:
    t = build_topology(load_cluster("aws-p5", 16, background_load=0.5))
    g = t.graph
    e = g.edges["n0/nic0", "leaf/s0/r0"]
    assert e["bandwidth_GBps"] == pytest.approx(25.0)        # half of 4 x 12.5 GB/s


# --------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize("name, rail_Bps, net_us", [
    ("aws-p5", 4 * 12.5e9 * LINK_EFFICIENCY["efa"], 20.0 + 3.0),          # Simple: +3 us
    ("gcp-a3-mega", 25e9 * LINK_EFFICIENCY["tcpxo"], NET_LATENCY_US["tcpxo"]),
])
def test_two_node_ring_allgather_matches_closed_form(name, rail_Bps, net_us) -> None:
    """Ring all-gather over 2 nodes x 8 GPUs: 8 rings, each crossing the node boundary once per
    direction on its own rail, so a GPU sends on its rail in one ring and over NVLink in the other
    7 (its 18 x 25 GB/s x NVLink efficiency shared 7 ways); the slower bounds every step:
    t = S (n-1)/n / (8 x min(rail rate, NVLink share)). Latency:
    NCCL's ring model (base 8.4 us, 14 NVLink steps at max(3.4, 3 x 1 us net overhead) = 3.4 us,
    one network step at the transport's latency on the 1.6 us reference wire)."""
    m = CollectiveModel(topo(name, 16))
    size = 1 * GiB
    r = m.time("allgather", size, algo="ring")
    assert r.proto == "Simple"
    per_flow_Bps = min(rail_Bps, 18 * 25e9 * LINK_EFFICIENCY["nvlink"] / 7)
    assert r.transfer_s == pytest.approx(size * 15 / 16 / (8 * per_flow_Bps), rel=1e-6)
    assert r.latency_s == pytest.approx((8.4 + 14 * 3.4 + net_us) * 1e-6, rel=1e-9)


def test_efa_latency_exceeds_infiniband_by_the_plugin_latency() -> None:
    """The same 16 H100 on EFA and on InfiniBand: a small ring all-reduce (LL) differs only in
    its 2 network steps, 20 us (aws-ofi-nccl) instead of NCCL's 2.7 us."""
    efa = CollectiveModel(topo("aws-p5", 16)).time("allreduce", 1024, algo="ring")
    ib = CollectiveModel(topo("dgx-h100", 16)).time("allreduce", 1024, algo="ring")
    assert efa.proto == ib.proto == "LL"
    assert efa.latency_s - ib.latency_s == pytest.approx(2 * (20.0 - 2.7) * 1e-6, rel=1e-9)


def test_protocols_across_nodes_are_the_fabrics() -> None:
    """aws-ofi-nccl forces Simple on P4de (``net_protocols: [Simple]``): a small 2-node all-reduce
    runs the tree on Simple there, and on LL on the same nodes over InfiniBand; inside one node
    every protocol stays."""
    efa = CollectiveModel(topo("aws-p4de", 16))
    ib = CollectiveModel(topo("dgx-a100", 16))
    assert efa.time("allreduce", 1024).proto == "Simple"
    assert ib.time("allreduce", 1024).proto == "LL"
    assert CollectiveModel(topo("aws-p4de", 8)).time("allreduce", 1024).proto == "LL"
    # Polaris (A100, NICs behind the host bridge): no LL128 across nodes, LL still
    polaris = CollectiveModel(topo("polaris", 32))
    assert {polaris.time("allreduce", 2**k).proto for k in range(10, 27)} <= {"LL", "Simple"}


# --------------------------------------------------------------------------- bad input

def _bad_file(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (TOPOLOGIES / f"{name}.yaml").read_text()
    assert old in text
    f = tmp_path / f"bad-{name}.yaml"
    f.write_text(text.replace(old, new))
    return f


@pytest.mark.parametrize("name, old, new, fragment", [
    ("aws-p5", "  port_Gbps: 100 ", "  # no port speed ", "fabric.port_Gbps: required"),
    ("aws-p5", "port_Gbps: 100 ", "port_Gbps: -100 ", "fabric.port_Gbps: must be > 0"),
    ("aws-p5", "link_latency_us: 0.3", "link_latency_us: -0.3", "fabric.link_latency_us: must be >= 0"),
    ("aws-p5", "net_latency_us: 20", "net_latency_us: -20", "fabric.net_latency_us: must be >= 0"),
    ("aws-p5", "  link_latency_us: 0.3", "  # no latency", "fabric.link_latency_us: required"),
    ("aws-p5", "port_Gbps: 100 ", "ib_port_Gbps: 100 ", "fabric.ib_port_Gbps: not a field of a efa fabric"),
    ("aws-p5", "transport: efa", "transport: infiniband", "fabric.transport: got 'infiniband'; valid: ib, roce"),
    ("aws-p5", "nic_Gbps: 100", "nic_Gbps: -1", "node.nic_Gbps: must be > 0"),
    ("aws-p5", "  transport: efa", "  transport: efa\n  net_protocols: [LL128]",
     "fabric.net_protocols: must include Simple"),
    ("aws-p5", "  transport: efa", "  transport: efa\n  net_protocols: [Simple, LL9]",
     "fabric.net_protocols: expected a non-empty list"),
    ("aws-p5", "tuner_plugin: aws-p5", "tuner_plugin: aws-p9", "fabric.tuner_plugin: got 'aws-p9'; valid: aws-p5"),
    # An NVL72 file whose NVLink domain, hosts or size limit do not fit together (0 is not
    # 'absent': leave the field out for that)
    ("gb200-nvl72", "max_gpus: 4608", "max_gpus: 4600",
     "fabric.max_gpus: the largest cluster is whole 72-GPU nodes"),
    ("gb200-nvl72", "gpus_per_host: 4 ", "gpus_per_host: 0 ", "node.gpus_per_host: must be >= 1, got 0"),
    ("gb200-nvl72", "gpus_per_host: 4 ", "gpus_per_host: 5 ",
     "node.gpus_per_host: must divide node.gpus (72), got 5"),
    ("gb200-nvl72", "nics: 72 ", "nics: 70 ",
     "node.nics: rail-optimized fabrics need the node's 72 GPUs spread evenly"),
    ("gb200-nvl72", "ib_latency_us: 0.3", "# no latency", "fabric.ib_latency_us: required"),
    # NCCL's channels across nodes: a whole number of channels, at most NCCL's 32
    ("hgx-h100-4gpu", "net_channels: 4 ", "net_channels: 0 ", "fabric.net_channels: must be >= 1, got 0"),
    ("hgx-h100-4gpu", "net_channels: 4 ", "net_channels: 64 ", "fabric.net_channels: must be <= 32, got 64"),
    ("hgx-h100-4gpu", "net_channels: 4 ", "net_channels: 2.5 ", "fabric.net_channels: expected an integer"),
])
def test_bad_fabric_file_is_one_line_exit_2(tmp_path, name, old, new, fragment) -> None:
    """The file, the field and what would be valid, on one line."""
    f = _bad_file(tmp_path, name, old, new)
    r = subprocess.run([sys.executable, "-m", "sim", "topo", "show", str(f)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2, r.stderr
    assert fragment in r.stderr and str(f) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


# --------------------------------------------------------------------------- frontier scale

SMALL_PODS = """
name: small-pods
kind: gpu_cluster
chip: H100-SXM
node: {gpus: 8, nvswitches: 4, gpu_switch_links: [5, 4, 4, 5], nvlink_latency_us: 0.25, nics: 8,
       nic_Gbps: 400, pcie_GBps: 64, pcie_latency_us: 0.5}
fabric: {transport: roce, port_Gbps: 400, link_latency_us: 0.3, su_nodes: 2, leaf_down_ports: 2,
         leaf_up_ports: 2, two_tier_max_sus: 1, pod_sus: 2, core_oversubscription: 7,
         max_gpus: 131072}
"""


def test_pods_and_oversubscribed_core(tmp_path) -> None:
    """3 pods of 2 SUs of 2 nodes: per pod and rail, ceil(2 SUs x 2 up / (4 / 2)) = 2 spines;
    each spine sends (4 / 2) / 7 ports' worth up, so a pod plane reaches the core with
    2 x 2/7 x 50 GB/s; a flow to another pod on the same rail is bound by that trunk."""
    f = tmp_path / "small-pods.yaml"
    f.write_text(SMALL_PODS)
    t = build_topology(load_cluster(str(f), 96))
    assert t.fabric.tiers == 3
    g = t.graph
    spines = [n for n, d in g.nodes(data=True) if d["kind"] == "spine"]
    cores = [n for n, d in g.nodes(data=True) if d["kind"] == "core"]
    assert len(spines) == 3 * 8 * 2
    assert len(cores) == math.ceil(3 * 8 * 2 * (2 / 7) / 4)
    assert all(g.nodes[x]["rail"] == g.nodes[sp]["rail"] for sp in spines for x in g[sp]
               if g.nodes[x]["kind"] == "leaf")                  # rail planes up to the spines
    m = CollectiveModel(t)
    trunk = 2 * (2 / 7) * 50e9 * LINK_EFFICIENCY["roce"]
    ids, fr = m.router.route(0, 64)                              # node 0 -> node 8 (pod 2), rail 0
    assert float(m.links.capacity_Bps[ids].min()) == pytest.approx(trunk)
    ids_same, _ = m.router.route(0, 16)                          # node 2, same pod, other SU
    assert float(m.links.capacity_Bps[ids_same].min()) == pytest.approx(50e9 * LINK_EFFICIENCY["roce"])


def test_frontier_topology_spans_131072_gpus() -> None:
    spec = load_topology_spec("h100-3tier")
    assert spec.resolve_chips(131072, "t") == 131072
    t = topo("h100-3tier", 6144)                                 # two 3,072-GPU pods
    assert t.fabric.tiers == 3 and t.nodes == 768
    cores = sum(1 for _, k in t.graph.nodes(data="kind") if k == "core")
    assert cores == math.ceil(2 * 8 * 12 * (32 / 7) / 64)


# --------------------------------------------------------------------------- dragonfly

SMALL_DRAGONFLY = """
name: small-dragonfly
kind: gpu_cluster
chip: A100-SXM-40GB
node: {gpus: 8, nvswitches: 6, gpu_switch_links: [2, 2, 2, 2, 2, 2], nvlink_latency_us: 0.25,
       nics: 2, nic_Gbps: 200, pcie_GBps: 32, pcie_latency_us: 0.5}
fabric: {transport: slingshot, layout: dragonfly, port_Gbps: 200, link_latency_us: 0.35,
         su_nodes: 2, leaf_down_ports: 4, leaf_up_ports: 60, group_switches: 3, local_links: 2,
         global_links: 3, max_gpus: 8192}
"""


def test_dragonfly_groups_and_minimal_routes(tmp_path) -> None:
    """9 switches of 2 nodes in 3 groups of 3: inside a group every switch pair has 2 local
    cables; each pair of groups 3 global cables, one from each of its switches (cable j from
    switch (b + j) of group a to switch (a + j) of group b). A flow between switches of different
    groups takes the minimal paths: at most local, global, local."""
    f = tmp_path / "small-dragonfly.yaml"
    f.write_text(SMALL_DRAGONFLY)
    t = build_topology(load_cluster(str(f), 9 * 2 * 8))
    g = t.graph
    assert t.fabric.tiers == 2
    sw = [n for n, d in g.nodes(data=True) if d["kind"] == "leaf"]
    assert len(sw) == 9 and {g.nodes[s]["group"] for s in sw} == {0, 1, 2}
    local = [(u, v, d) for u, v, d in g.edges(data=True) if u in sw and v in sw
             and g.nodes[u]["group"] == g.nodes[v]["group"]]
    glob = [(u, v, d) for u, v, d in g.edges(data=True) if u in sw and v in sw
            and g.nodes[u]["group"] != g.nodes[v]["group"]]
    assert len(local) == 3 * 3 and all(d["cables"] == 2 for *_, d in local)
    assert sum(d["cables"] for *_, d in glob) == 3 * 3              # 3 pairs x 3 cables
    assert all(d["kind"] == "slingshot" for *_, d in local + glob)
    m = CollectiveModel(t)
    ids, fr = m.router.route(0, 8 * 2 * 8)                          # node 0 (sw 0) -> node 16 (sw 8)
    kinds = [(m.links.kind[i]) for i in ids]
    assert kinds.count("pcie") == 2 and kinds.count("slingshot") >= 3
    # the flow's switch-to-switch share: every path's hops carry the whole flow once, <= 3 hops
    sw_links = [i for i in ids if m.links.kind[i] == "slingshot"]
    assert 1.0 <= sum(fr[ids.tolist().index(i)] for i in sw_links) - 2.0 <= 3.0   # minus NIC links


def test_dragonfly_fields_only_on_a_dragonfly(tmp_path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(SMALL_PODS.replace("max_gpus: 131072", "max_gpus: 131072, global_links: 4"))
    with pytest.raises(Exception, match=r"fabric.global_links: a field of a dragonfly"):
        load_topology_spec(str(f))
    f.write_text(SMALL_DRAGONFLY.replace(" global_links: 3,", ""))
    with pytest.raises(Exception, match=r"fabric.global_links: required"):
        load_topology_spec(str(f))


def _small_machine(tmp_path, system_groups: int) -> Path:
    f = tmp_path / f"machine-{system_groups}.yaml"
    f.write_text(SMALL_DRAGONFLY.replace("global_links: 3,", f"global_ports: 2, "
                                         f"system_groups: {system_groups},"))
    return f


def test_dragonfly_cables_from_the_port_budget_and_other_groups_carry_traffic(tmp_path) -> None:
    """global_ports x group_switches over the other system_groups - 1 groups: 2 x 3 / 2 = 3
    cables a pair on a 3-group machine. A job on 2 of 7 groups sends 5/6 of its inter-group
    flow through the other 5 (one transit node each), 1/6 minimally; on a 2-group machine, all
    minimally."""
    spec = load_topology_spec(str(_small_machine(tmp_path, 3)))
    assert spec.global_links == 3 and spec.system_groups == 3
    job = 6 * 2 * 8                                           # 6 switches: 2 groups of 3
    for groups, share in ((2, 0.0), (7, 5 / 6)):
        t = build_topology(load_cluster(str(_small_machine(tmp_path, groups)), job))
        m = CollectiveModel(t)
        transit = [n for n, d in t.graph.nodes(data=True) if d["kind"] == "transit"]
        assert len(transit) == groups - 2
        assert m.router.nonminimal_share == pytest.approx(share)
        ids, fr = m.router._switch_route("sw/0", "sw/4")
        into = {m.links.id(u, v) for v in transit for u in t.graph[v]}
        via = sum(f for i, f in zip(ids.tolist(), fr.tolist()) if i in into)
        assert via == pytest.approx(share)                   # every transit path enters once
        leaving = {m.links.id(u, v) for (u, v) in m.links.index if u == "sw/0"}
        out = sum(f for i, f in zip(ids.tolist(), fr.tolist()) if i in leaving)
        assert out == pytest.approx(1.0)                      # the whole flow leaves its switch
    # the same 3 cables a pair, more groups to pass through: a two-group all-to-all runs faster
    times = []
    for groups in (2, 7):
        f = tmp_path / f"fixed-{groups}.yaml"
        f.write_text(SMALL_DRAGONFLY.replace("global_links: 3,",
                                             f"global_links: 3, system_groups: {groups},"))
        times.append(CollectiveModel(build_topology(load_cluster(str(f), job)))
                     .time("alltoall", 2**28).time_s)
    assert times[1] < 0.7 * times[0]


def test_dragonfly_port_budget_errors(tmp_path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(SMALL_DRAGONFLY.replace("global_links: 3,", "global_links: 3, global_ports: 2,"))
    with pytest.raises(Exception, match=r"fabric.global_ports: global_links is given too"):
        load_topology_spec(str(f))
    f.write_text(SMALL_DRAGONFLY.replace("global_links: 3,", "global_ports: 1, system_groups: 9,"))
    with pytest.raises(Exception, match=r"fabric.global_ports: 1 a switch leave no cable"):
        load_topology_spec(str(f))
    with pytest.raises(Exception, match=r"cluster.chips: .* 3 groups of 3 but the machine has "
                                        r"system_groups = 2"):
        build_topology(load_cluster(str(_small_machine(tmp_path, 2)), 9 * 2 * 8))


# --------------------------------------------------------------------------- plugin tuner

def test_aws_plugin_tuner_regions_pick_by_size_and_ranks() -> None:
    """aws-ofi-nccl's P5 table for whole nodes: tree/LL128 up to 30 MiB at 16 ranks, NVLSTree
    above (a degenerate region along 16 ranks, its edge counting as inside); other layouts and
    points beyond the tables' 100 GiB are NCCL's."""
    from sim.collectives.plugin_tuner import _extend, plugin_choice
    assert plugin_choice("aws-p5", "allreduce", 8, 16, 2) == ("tree", "LL128")
    assert plugin_choice("aws-p5", "allreduce", 31457280, 16, 2) == ("tree", "LL128")
    assert plugin_choice("aws-p5", "allreduce", 31457281, 16, 2) == ("nvls_tree", "Simple")
    assert plugin_choice("aws-p5", "allreduce", 1 << 20, 8, 2) is None          # 4 GPUs a node
    assert plugin_choice("aws-p5", "allgather", 1 << 20, 16, 2) is None         # no table
    assert plugin_choice("aws-p5", "allreduce", 200 * 2**30, 16, 2) is None     # past 100 GiB
    assert plugin_choice("aws-p6", "allreduce", 65536, 32, 4) == ("tree", "LL")
    # the extension of (8053063680, 160)-(9663676416, 192), a slope-1 line in log2 space, meets
    # the 100 GiB bound at 160 x 100 GiB / 8053063680 ranks
    x, y = _extend((8053063680, 160), (9663676416, 192))
    assert 2 ** x == pytest.approx(100 * 2**30) and 2 ** y == pytest.approx(160 * 100 * 2**30 / 8053063680)


def test_aws_plugin_tuner_drives_p5_calls_from_nccl_2_19() -> None:
    """On P5 a small 2-node all-reduce runs the plugin's tree/LL128: latency 14 + 2 x (7 x 1.25
    + 20 us + the wire's excess over NCCL's reference) instead of NCCL's own pick, tree/LL; with
    NCCL 2.18 (no tuner plugins yet) NCCL's pick stands."""
    from sim.collectives import CollectiveModel as CM
    t = topo("aws-p5", 16)
    new, old = CM(t).time("allreduce", 1024), CM(t, nccl_version=(2, 18)).time("allreduce", 1024)
    assert (new.algo, new.proto) == ("tree", "LL128") and (old.algo, old.proto) == ("tree", "LL")
    wire_excess = (new.latency_s * 1e6 - 14 - 2 * (7 * 1.25 + 20)) / 2
    assert 0 <= wire_excess < 1.0


def test_aws_whole_node_tables_cover_the_plane() -> None:
    """A transcription check: AWS's whole-node tables leave no call from 16 to 4,096 ranks and
    8 B to 16 GiB to NCCL (a vertex typed wrong opens a hole or makes an edge cross)."""
    from sim.collectives.plugin_tuner import PLATFORMS, plugin_choice
    for platform, table in PLATFORMS.items():
        for op, ppn in table:
            if ppn != 8:
                continue
            for ranks in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
                for k in range(3, 35):
                    assert plugin_choice(platform, op, 2**k, ranks, ranks // 8) is not None, \
                        (platform, op, ranks, 2**k)


def test_tuner_plugin_names_are_the_tables() -> None:
    from sim.collectives.plugin_tuner import PLATFORMS
    from sim.config.topology_specs import TUNER_PLUGINS
    assert set(TUNER_PLUGINS) == set(PLATFORMS)
