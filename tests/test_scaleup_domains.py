"""Scale-up domains beyond the 8-GPU NVSwitch node (issue 16): DGX B200, GB200 NVL72 racks (one
MNNVL NVLink domain of 72 GPUs), 4-GPU NVLink-mesh boards without NVSwitch, TPU7x pods.

Topology builds are checked against the figures in their YAML files and the catalogue (link counts,
bandwidths, domain sizes); collectives on them against closed forms; bad input through the command
line (one line, exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.calibration import LINK_EFFICIENCY
from sim.collectives import CollectiveModel, busbw_factor
from sim.collectives.sharp import NVLS, NVLS_EFFICIENCY, NVLS_TREE, nvls_efficiency
from sim.config import load_cluster
from sim.config.yamlio import parse_yaml
from sim.errors import ConfigError
from sim.hardware import get_chip
from sim.topology import GpuFabric, build_topology

REPO = Path(__file__).resolve().parent.parent
GB = 1e9


def _yaml(name: str) -> dict:
    path = REPO / "topologies" / f"{name}.yaml"
    return dict(parse_yaml(path.read_text(), path, "topology"))


def _edges(topo, kind: str, node: object) -> list[dict]:
    g = topo.graph
    return [d for _, _, d in g.edges(node, data=True) if d["kind"] == kind]


# ----------------------------------------------------------------------------- catalogue

def test_new_chips_carry_their_cited_figures() -> None:
    gb200, tpu7x, b200 = get_chip("GB200"), get_chip("TPU7x"), get_chip("B200")
    assert gb200.bf16_flops == 2500e12 and gb200.fp8_flops == 5000e12      # GK-B200, 1,200 W part
    assert gb200.hbm_bytes == 186e9 and gb200.scaleup_Bps == 900e9 and gb200.tdp_W == 1200
    assert gb200.arch == b200.arch == "blackwell" and gb200.in_network_reduction
    assert tpu7x.bf16_flops == 2307e12 and tpu7x.fp8_flops == 4614e12      # GCP-7x
    assert tpu7x.hbm_bytes == 192 * 2**30 and tpu7x.hbm_Bps == 7380e9
    assert tpu7x.scaleup_links * tpu7x.scaleup_link_Bps * 2 == 1200e9      # GCP-7x bidi per chip
    assert tpu7x.dcn_Bps == 12.5e9


# ----------------------------------------------------------------------------- topology builds

def test_dgx_b200_node_matches_its_file() -> None:
    raw = _yaml("dgx-b200")
    topo = build_topology(load_cluster("dgx-b200", 16))
    g = topo.graph
    link_GBps = get_chip("B200").scaleup_link_Bps / GB
    for dev in topo.devices:
        nv = sorted((d["cables"], d["bandwidth_GBps"]) for d in _edges(topo, "nvlink", dev))
        assert nv == sorted((k, k * link_GBps) for k in raw["node"]["gpu_switch_links"])
        (pcie,) = _edges(topo, "pcie", dev)
        assert pcie["bandwidth_GBps"] == raw["node"]["pcie_GBps"]
    nics = [n for n, k in g.nodes(data="kind") if k == "nic"]
    assert len(nics) == 2 * raw["node"]["nics"]
    assert all(_edges(topo, "ib", n)[0]["bandwidth_GBps"] == raw["node"]["nic_Gbps"] / 8 for n in nics)
    assert sum(1 for _, k in g.nodes(data="kind") if k == "nvswitch") == 2 * raw["node"]["nvswitches"]


def test_gb200_nvl72_rack_is_one_nvlink_domain() -> None:
    raw = _yaml("gb200-nvl72")
    topo = build_topology(load_cluster("gb200-nvl72", 144))
    g = topo.graph
    assert isinstance(topo.fabric, GpuFabric) and topo.fabric.nodes == 2 and topo.fabric.nvls
    domain = raw["node"]["gpus"]
    assert domain == 72
    for dev in (0, 71, 72, 143):
        nv = _edges(topo, "nvlink", dev)
        # one NVLink5 link to each of the rack's 18 switch chips, all in the GPU's own rack
        assert len(nv) == raw["node"]["nvswitches"] == 18
        assert all(d["bandwidth_GBps"] == 50.0 and d["cables"] == 1 for d in nv)
        switches = {v for _, v in g.edges(dev) if g.nodes[v]["kind"] == "nvswitch"}
        assert {g.nodes[s]["node"] for s in switches} == {dev // domain}
        assert g.nodes[dev]["host"] == dev // raw["node"]["gpus_per_host"]     # 4-GPU compute trays
    # every GPU of a rack reaches every other over one switch hop; one 400G NIC per GPU
    assert sum(1 for _, k in g.nodes(data="kind") if k == "nic") == 144
    hosts = {g.nodes[d]["host"] for d in topo.devices}
    assert len(hosts) == 144 // 4


def test_a_job_on_part_of_each_rack_sets_its_nvl_domain() -> None:
    """cluster.nvl_domain: 128 GPUs as 64 of each of two NVL72 racks (16 of 18 compute trays)."""
    topo = build_topology(load_cluster("gb200-nvl72", 128, nvl_domain=64))
    g = topo.graph
    assert topo.fabric.nodes == 2 and topo.spec.gpus_per_node == 64 and topo.spec.rack_gpus == 72
    assert {g.nodes[d]["node"] for d in range(64)} == {0} and g.nodes[64]["node"] == 1
    assert sum(1 for _, k in g.nodes(data="kind") if k == "nic") == 128
    assert all(len(_edges(topo, "nvlink", d)) == 18 for d in topo.devices)
    assert len({g.nodes[d]["host"] for d in topo.devices}) == 32
    model = CollectiveModel(topo)
    assert model.time("allreduce", 2**30).algo == "nvls_tree"


def test_hgx_h100_4gpu_is_a_full_mesh_without_nvswitch() -> None:
    raw = _yaml("hgx-h100-4gpu")
    topo = build_topology(load_cluster("hgx-h100-4gpu", 8))
    g = topo.graph
    assert not any(k == "nvswitch" for _, k in g.nodes(data="kind"))
    assert isinstance(topo.fabric, GpuFabric) and not topo.fabric.nvls
    per_pair = raw["node"]["mesh_links"] * get_chip("H100-SXM").scaleup_link_Bps / GB
    for dev in topo.devices:
        nv = _edges(topo, "nvlink", dev)
        peers = {v for u, v, d in g.edges(dev, data=True) if d["kind"] == "nvlink"}
        assert peers == {p for p in range(dev // 4 * 4, dev // 4 * 4 + 4) if p != dev}
        assert all(d["bandwidth_GBps"] == per_pair == 150.0 for d in nv)


def test_tpu7x_pod_reaches_9216_chips_in_cubes() -> None:
    """xpk's tpu7x shapes: any AxBxC of multiples of 4 up to 256 with at most 144 cubes."""
    raw = _yaml("tpu7x")
    assert raw["max_cubes"] * 64 == 9216
    assert sorted(load_cluster("tpu7x", 9216).shape) == [16, 24, 24]      # the most cubic
    assert load_cluster("tpu7x", slice_="4x8x256").chips == 8192            # 128 cubes, long axis
    with pytest.raises(ConfigError, match="is 160 cubes; a tpu7x slice has at most 144"):
        load_cluster("tpu7x", slice_="8x8x160")
    with pytest.raises(ConfigError, match="at most 144 whole cubes"):
        load_cluster("tpu7x", 9216 + 64)
    small = build_topology(load_cluster("tpu7x", 128))
    kinds = {d["kind"] for _, _, d in small.graph.edges(data=True)}
    assert {"ici", "optical"} <= kinds
    assert all(d["bandwidth_GBps"] == 100.0 for _, _, d in small.graph.edges(data=True)
               if d["kind"] in ("ici", "optical"))


# ----------------------------------------------------------------------------- collectives

def test_nvls_over_nvl72_matches_the_in_switch_closed_form() -> None:
    """NVLS all-reduce in one NVL72 domain: each GPU sends S(1 + 1/n) into the switches and takes
    as much back, on its 18 x 50 GB/s at the NVLink efficiency, slowed by NVLS's per-chunk sync
    cost at the chunk NCCL gives a 1 GiB call on 72 GPUs (nvls_efficiency: NCCL's Blackwell
    nvlsEfficiency at 128 KiB chunks); latency is NCCL's NVLS term (hwLat NVLink Simple)."""
    model = CollectiveModel(build_topology(load_cluster("gb200-nvl72", 72)))
    size, n = 2**30, 72
    r = model.time("allreduce", size)
    assert r.algo == "nvls"
    bw = 18 * 50e9 * LINK_EFFICIENCY["nvlink"]
    chunk = NVLS.chunk_bytes(size, n, 1)
    assert chunk == 64 * 1024                    # 1 GiB < 64 x (16 channels x 72 heads) x 128 KiB
    eff = nvls_efficiency("blackwell", chunk)
    assert eff == pytest.approx(65536 / (65536 + 131072 * (1 / NVLS_EFFICIENCY["blackwell"] - 1)))
    assert r.transfer_s == pytest.approx(size * (1 + 1 / n) / bw / eff, rel=1e-6)
    assert r.busbw_GBps > 18 * 50 * LINK_EFFICIENCY["nvlink"]     # beyond any ring on the same links
    ring = model.time("allreduce", size, algo="ring")
    assert ring.time_s > r.time_s


def test_nvl72_racks_use_nvls_tree_and_the_rails_between_them() -> None:
    model = CollectiveModel(build_topology(load_cluster("gb200-nvl72", 288)))
    r = model.time("allreduce", 2**30)
    assert r.algo == "nvls_tree" and r.ranks == 288
    assert model.group_info(None).nodes == 4 and model.group_info(None).ppn == 72


def test_ring_on_a_4gpu_mesh_uses_every_nvlink() -> None:
    """Rings over every Hamiltonian cycle of the 4-GPU mesh, both ways: each directed pair link
    carries 2 of the 6 rings, so the bus bandwidth is 3 pair links' worth (6 x 25 GB/s each)."""
    model = CollectiveModel(build_topology(load_cluster("hgx-h100-4gpu", 4)))
    size = 2**31
    r = model.time("allreduce", size, algo="ring")
    assert r.proto == "Simple"
    pair_Bps = 6 * 25e9 * LINK_EFFICIENCY["nvlink"]
    assert r.transfer_s == pytest.approx(busbw_factor("allreduce", 4) * size / (3 * pair_Bps), rel=1e-6)
    ag = model.time("allgather", size, algo="ring")
    assert ag.transfer_s == pytest.approx(busbw_factor("allgather", 4) * size / (3 * pair_Bps), rel=1e-6)


def test_mesh_nodes_offer_no_nvls() -> None:
    model = CollectiveModel(build_topology(load_cluster("hgx-h100-4gpu", 8)))
    assert "nvls" not in model.algorithms("allreduce", model.group_info([0, 1, 2, 3]))
    assert "nvls_tree" not in model.algorithms("allreduce", model.group_info(None))


def test_tpu7x_cube_allgather_matches_the_scaling_book() -> None:
    """SB-SHARD: an all-gather over 3 wrapped axes takes V / (3 W_bidi) in the bandwidth regime;
    W_bidi = 2 x 100 GB/s per TPU7x link (GCP-7x). The ICI links carry no efficiency factor."""
    model = CollectiveModel(build_topology(load_cluster("tpu7x", 64)))
    size = 2**30
    r = model.time("allgather", size)
    assert r.algo == "torus"
    assert r.transfer_s == pytest.approx(size * 63 / 64 / (3 * 2 * 100e9), rel=0.02)


# ----------------------------------------------------------------------------- bad input

def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim", *argv], capture_output=True, text=True, cwd=REPO)


def _one_line_exit_2(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in r.stderr, r.stderr


def test_nvl_domain_that_does_not_divide_the_gpus_is_one_line() -> None:
    r = _cli("collective", "--topology", "gb200-nvl72", "--chips", "128", "--op", "allreduce")
    _one_line_exit_2(r, "128 GPUs is not a whole number of 72-GPU NVLink domains (node.gpus)",
                     "valid: 72, 144")
    r = _cli("topo", "show", "gb200-nvl72", "--chips", "120", "--nvl-domain", "64")
    _one_line_exit_2(r, "120 GPUs is not a whole number of 64-GPU NVLink domains (cluster.nvl_domain)")
    r = _cli("topo", "show", "gb200-nvl72", "--chips", "124", "--nvl-domain", "62")
    _one_line_exit_2(r, "nvl_domain: 62 GPUs per NVLink domain", "a multiple of 4 (whole hosts) up to 72")
    r = _cli("topo", "show", "tpu7x", "--nvl-domain", "64")
    _one_line_exit_2(r, "only GPU topologies have NVLink domains")


@pytest.mark.parametrize("edit, fragments", [
    (("nic_Gbps: 400", "nic_Gbps: -400"), ("node.nic_Gbps", "must be > 0", "-400")),
    (("  nic_Gbps: 400\n", ""), ("node.nic_Gbps", "required")),
    (("  ib_latency_us: 0.3\n", ""), ("fabric.ib_latency_us", "required")),
    (("  nvlink_latency_us: 0.25 ", "  nvlink_latency_us: -1 "), ("node.nvlink_latency_us", ">= 0")),
    (("  ib_port_Gbps: 400 ", "  ib_port_Gbps_typo: 400 "), ("unknown key", "ib_port_Gbps_typo")),
    (("  gpus_per_host: 4 ", "  gpus_per_host: 5 "), ("node.gpus_per_host", "must divide node.gpus (72)")),
    (("default_chips: 72", "default_chips: 100"),
     ("default_chips: 100 GPUs is not a whole number of 72-GPU NVLink domains",)),
])
def test_bad_nvl72_file_is_one_line_naming_file_and_field(tmp_path: Path, edit, fragments) -> None:
    text = (REPO / "topologies" / "gb200-nvl72.yaml").read_text()
    old, new = edit
    assert old in text, old
    bad = tmp_path / "bad-nvl72.yaml"
    bad.write_text(text.replace(old, new, 1))
    _one_line_exit_2(_cli("topo", "show", str(bad)), str(bad), *fragments)


def test_bad_mesh_file_is_one_line(tmp_path: Path) -> None:
    text = (REPO / "topologies" / "hgx-h100-4gpu.yaml").read_text()
    bad = tmp_path / "mesh.yaml"
    bad.write_text(text.replace("  mesh_links: 6 ", "  mesh_links: 4 ", 1))
    _one_line_exit_2(_cli("topo", "show", str(bad)), str(bad), "node.mesh_links",
                     "12 in all, but a H100-SXM has 18 NVLink links")


def test_racks_cross_the_network_on_the_nvls_heads_and_ring_rails() -> None:
    """An NVL72 rack is one node to NCCL, but its rings, trees and NVLSTree cross the network on
    NET_RAILS of its 72 NICs (NCCL's graph channels: one NIC per channel pair, one NVLS head per
    NVLS channel), not on all of them."""
    from sim.collectives.ring import _rings
    from sim.collectives.stages import NET_RAILS

    topo = build_topology(load_cluster("gb200-nvl72", 128, nvl_domain=64))
    model = CollectiveModel(topo)
    gi = model.group_info(None)
    rings = _rings(gi)
    assert len(rings) == NET_RAILS == 8
    assert all(sorted(r) == list(range(128)) for r in rings)
    # NVLSTree, two racks, 16 GiB: each head's NIC carries S/16 per tree each way (S/8 in all),
    # slower than the NVLS part (S(1 + 1/64) on 18 x 50 GB/s at NVLS's 128 KiB-chunk efficiency)
    size = 16 * 2**30
    r = model.time("allreduce", size, algo="nvls_tree")
    nic = 50e9 * LINK_EFFICIENCY["ib"]
    net = size / NET_RAILS / nic
    switch = size * (1 + 1 / 64) / (18 * 50e9 * LINK_EFFICIENCY["nvlink"]) / NVLS_EFFICIENCY["blackwell"]
    assert switch < net
    fill = NVLS_TREE.fill_s(size, 128, 2, nic)
    ceiling = busbw_factor("allreduce", 128) * size / (NVLS_TREE.busbw_cap_GBps("Simple", "blackwell", 2) * 1e9)
    assert r.transfer_s == pytest.approx(max(net, ceiling) + fill, rel=1e-3)
    assert net == pytest.approx(ceiling, rel=0.01)     # 8 NICs' worth is NCCL's own 8 x 96 GB/s
    # DGX H100 nodes (8 GPUs, 8 NICs): every GPU is a head, the NVLS part is slower than the
    # network, so NCCL's NVLS efficiency stretches the call (and NCCL's ceiling caps it)
    dgx = CollectiveModel(build_topology(load_cluster("dgx-h100", 16)))
    d = dgx.time("allreduce", size, algo="nvls_tree")
    dnet = size / 8 / (50e9 * LINK_EFFICIENCY["ib"])
    dswitch = size * (1 + 1 / 8) / (18 * 25e9 * LINK_EFFICIENCY["nvlink"]) / NVLS_EFFICIENCY["hopper"]
    assert dswitch > dnet
    dceiling = busbw_factor("allreduce", 16) * size / (NVLS_TREE.busbw_cap_GBps("Simple", "hopper", 2) * 1e9)
    dfill = NVLS_TREE.fill_s(size, 16, 2, 50e9 * LINK_EFFICIENCY["ib"])
    assert d.transfer_s == pytest.approx(max(dswitch, dceiling) + dfill, rel=1e-3)
