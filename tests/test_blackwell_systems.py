"""Issue 27, systems: the Blackwell Ultra chips (B300, GB300) and their topologies, Grace host
memory and NVLink-C2C offload, ``cluster.chip`` and scenarios without a price."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.config import Scenario, load_scenario, scenario_from_dict
from sim.errors import ConfigError
from sim.hardware import CATALOGUE
from sim.units import GB, TFLOPS
from sim.workload.activations import layer_activation_bytes, offload_exposed_s

REPO = Path(__file__).resolve().parent.parent
GB200_SCENARIO = REPO / "scenarios" / "llama3-70b-288xgb200-nvl72.yaml"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def small(topology: str, chips: int, **extra: object) -> dict:
    """Llama 3 70B on *chips* GPUs of *topology*, TP 8 x PP 2, one sequence per replica."""
    raw: dict = {"name": f"t-{topology}", "cluster": {"topology": topology, "chips": chips},
                 "model": "llama3-70b",
                 "training": {"seq_len": 8192, "global_batch": chips // 16, "recompute": "selective"},
                 "parallelism": {"tp": 8, "pp": 2}}
    for key, value in extra.items():
        raw[key] = {**raw.get(key, {}), **value}       # type: ignore[dict-item]
    return raw


# ----------------------------------------------------------------------------- the catalogue

def test_blackwell_ultra_chips_are_in_the_catalogue_with_their_dense_peaks() -> None:
    b300, gb300 = CATALOGUE["B300"], CATALOGUE["GB300"]
    assert (b300.bf16_flops, b300.fp8_flops, b300.fp4_flops) == (
        2250 * TFLOPS, 4500 * TFLOPS, 14000 * TFLOPS)
    assert (gb300.bf16_flops, gb300.fp8_flops, gb300.fp4_flops) == (
        2500 * TFLOPS, 5000 * TFLOPS, 15000 * TFLOPS)
    for chip in (b300, gb300):
        assert chip.arch == "blackwell" and chip.family == "B300"
        assert chip.hbm_bytes == 288 * GB and chip.hbm_Bps == 8000 * GB
        assert chip.scaleup_links == 18 and chip.scaleup_Bps == 900 * GB
        assert chip.in_network_reduction and chip.sms
    assert (b300.tdp_W, gb300.tdp_W) == (1100, 1400)
    assert b300.usd_per_chip_hour == pytest.approx(142.416 / 8) and gb300.usd_per_chip_hour is None


def test_fp4_peaks_of_the_first_blackwells() -> None:
    assert CATALOGUE["B200"].fp4_flops == 9000 * TFLOPS
    assert CATALOGUE["GB200"].fp4_flops == 10000 * TFLOPS
    assert CATALOGUE["H100-SXM"].fp4_flops is None        # Hopper has no FP4 tensor-core path


def test_grace_parts_have_host_memory_and_a_c2c_link_x86_parts_none() -> None:
    for name in ("GB200", "GB300"):
        chip = CATALOGUE[name]
        assert chip.host_memory_bytes == 240 * GB           # one Grace's 480 GB per two GPUs
        assert chip.host_link_Bps == 225 * GB               # 900 GB/s bidi C2C, two GPUs
    for name in ("B200", "B300", "H100-SXM"):
        assert CATALOGUE[name].host_link_Bps is None        # the topology's PCIe
    assert CATALOGUE["B300"].host_memory_bytes == 512 * GB


# ----------------------------------------------------------------------------- topologies

@pytest.mark.parametrize(("topology", "chip", "gpus", "nic_Gbps"),
                         [("dgx-b300", "B300", 8, 800), ("gb300-nvl72", "GB300", 72, 800)])
def test_topologies_build_and_show(topology: str, chip: str, gpus: int, nic_Gbps: int) -> None:
    from sim.config import load_topology_spec

    spec = load_topology_spec(topology)
    assert spec.chip.name == chip and spec.gpus_per_node == gpus
    assert spec.nic_Bps == nic_Gbps * 1e9 / 8
    code, out, err = cli("topo", "show", topology, "--chips", str(gpus * 4))
    assert code == 0 and err == ""
    assert out.startswith(f"{topology}: {gpus * 4} x {chip}")


def test_dgx_b300_superpod_bisection_is_one_xdr_port_per_gpu() -> None:
    code, out, _ = cli("topo", "show", "dgx-b300", "--chips", "1024", "--json")
    assert code == 0
    # 512 GPUs' worth of 800 Gb/s ports across the cut, non-blocking
    assert json.loads(out)["bisection_GBps"] == pytest.approx(512 * 100)


@pytest.mark.parametrize(("topology", "chips"), [("dgx-b300", 32), ("gb300-nvl72", 144)])
def test_a_llama3_70b_scenario_runs_on_each(topology: str, chips: int) -> None:
    from sim.run import run

    step = run(scenario_from_dict(small(topology, chips), "t.yaml")).step
    assert step.chip == CATALOGUE[{"dgx-b300": "B300", "gb300-nvl72": "GB300"}[topology]].name
    assert 0 < step.mfu < 1 and step.step_time_s > 0


# ----------------------------------------------------------------------------- cluster.chip

def test_cluster_chip_equal_to_the_topologys_is_accepted() -> None:
    s = scenario_from_dict(small("gb300-nvl72", 144, cluster={"chip": "GB300"}), "t.yaml")
    assert s.cluster.chip.name == "GB300"


def test_a_gb300_scenario_on_a_b200_topology_is_one_line_exit_2() -> None:
    code, out, err = cli("run", str(REPO / "scenarios" / "llama3-405b-2048xb200.yaml"),
                         "--set", "cluster.chip=GB300")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert ("cluster.chip: GB300 does not match topology dgx-b200 (built for B200); valid: B200, "
            "or a topology built for GB300: gb300-nvl72") in err


def test_an_unknown_cluster_chip_lists_the_catalogue() -> None:
    with pytest.raises(ConfigError, match=r"cluster.chip: unknown chip 'B400'; valid: .*B300, GB200, GB300"):
        scenario_from_dict(small("dgx-b300", 32, cluster={"chip": "B400"}), "t.yaml")


# ----------------------------------------------------------------------------- offload

def _offloading(topology: str, chips: int) -> Scenario:
    return scenario_from_dict(small(topology, chips, training={"remat_policy": "qkv_proj_offloaded"},
                                    software={"framework": "pytorch-fsdp"}), "t.yaml")


def test_offload_on_gb200_crosses_nvlink_c2c_not_pcie() -> None:
    scn = _offloading("gb200-nvl72", 144)
    host_B = layer_activation_bytes(scn).host_B
    topo = scn.cluster.topology
    c2c = offload_exposed_s(scn, 0.0)
    assert c2c == pytest.approx(topo.pcie_latency_s + host_B / (225 * GB))
    assert c2c < topo.pcie_latency_s + host_B / topo.pcie_Bps       # faster than the NIC's PCIe
    # an x86 node (DGX B300) copies over the topology's PCIe
    b300 = _offloading("dgx-b300", 32)
    pcie = b300.cluster.topology
    assert offload_exposed_s(b300, 0.0) == pytest.approx(
        pcie.pcie_latency_s + layer_activation_bytes(b300).host_B / pcie.pcie_Bps)


def test_offload_on_a_chip_without_host_memory_is_refused_naming_field_value_and_valid() -> None:
    # TPU v4 is the catalogue's chip with no host memory (every NVIDIA system now has its own)
    raw = {"cluster": {"topology": "tpu-v4", "chips": 64}, "model": "llama3-8b",
           "training": {"seq_len": 8192, "global_batch": 64, "remat_policy": "qkv_proj_offloaded"}}
    with pytest.raises(ConfigError) as e:
        scenario_from_dict(raw, "t.yaml")
    msg = str(e.value)
    assert "\n" not in msg
    assert ("training.remat_policy: 'qkv_proj_offloaded' offloads activations to host memory, but "
            "the catalogue has no host memory for TPU-v4; valid here: device or remat") in msg
    # DGX B200's 2 TB of system memory lets a B200 offload
    assert _offloading("dgx-b200", 32).cluster.chip.host_memory_bytes == pytest.approx(250e9)


# ----------------------------------------------------------------------------- cost optional

# Two racks, TP 8 x PP 2 (the bundled scenario's 288 GPUs take a minute a run)
_SMALLER = ("--set", "cluster.chips=144", "--set", "training.global_batch=144", "--set",
            "parallelism.pp=2", "--set", "parallelism.virtual_stages=1", "--set",
            "parallelism.schedule=1f1b")


def _no_price_argv(*more: str) -> list[str]:
    # the bundled GB200 scenario gives a price; without it the catalogue has none for GB200
    return ["run", str(GB200_SCENARIO), *_SMALLER, *more]


@pytest.fixture
def no_price_scenario(tmp_path: Path) -> Path:
    text = GB200_SCENARIO.read_text().replace("cost: {usd_per_chip_hour: 14.24}\n", "")
    assert "\ncost:" not in text
    path = tmp_path / "gb200-no-price.yaml"
    path.write_text(text)
    return path


def test_a_gb200_scenario_without_a_price_loads(no_price_scenario: Path) -> None:
    assert load_scenario(no_price_scenario).cost.usd_per_chip_hour is None


def test_a_gb200_scenario_without_a_price_runs_and_says_so_once(no_price_scenario: Path) -> None:
    argv = _no_price_argv("--set", "training.tokens=1T")
    argv[1] = str(no_price_scenario)
    code, out, err = cli(*argv)
    assert code == 0 and err == ""
    assert out.count("no price known for GB200; set cost.usd_per_chip_hour") == 1
    assert "$" not in out
    assert "chip-hours" in out and "MWh" in out                # all but the dollars

    code, out, _ = cli(*argv, "--json")
    d = json.loads(out)
    assert code == 0
    for key in ("cost_usd_per_million_tokens", "usd_per_chip_hour", "cost_usd"):
        assert key not in d
    assert d["price_source"] == "no price known for GB200; set cost.usd_per_chip_hour"
    assert d["chip_hours"] > 0 and d["step_time_s"] > 0


def test_a_price_given_still_costs_the_run(no_price_scenario: Path) -> None:
    argv = _no_price_argv("--set", "cost.usd_per_chip_hour=20", "--json")
    argv[1] = str(no_price_scenario)
    code, out, _ = cli(*argv)
    d = json.loads(out)
    assert code == 0 and d["usd_per_chip_hour"] == 20
    assert d["price_source"] == "scenario cost.usd_per_chip_hour"
    assert d["cost_usd_per_million_tokens"] > 0


def test_a_sweep_leaves_the_cost_cells_blank_without_a_price(no_price_scenario: Path,
                                                             tmp_path: Path) -> None:
    import csv

    out_csv = tmp_path / "s.csv"
    code, _, err = cli("sweep", str(no_price_scenario), "--over",
                       "cluster.topology=gb200-nvl72,gb300-nvl72", *_SMALLER, "--workers", "1",
                       "--out", str(out_csv))
    assert code == 0, err
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for r in rows:
        assert r.get("cost_usd_per_million_tokens", "") == ""
        assert r["price_source"].startswith("no price known for GB")


def test_plan_without_a_price_reports_the_smallest_cluster_and_no_cheapest() -> None:
    from sim.plan import PlanRequest, plan
    from sim.report.plan import plan_json, plan_text

    req = PlanRequest(model="llama3-8b", tokens=1e12, days=30, topologies=("gb200-nvl72",),
                      max_chips=72, batch_tokens=72 * 8 * 8192)
    plans = plan(req)
    p = plans[0]
    assert p.usd_per_chip_hour is None and p.smallest is not None and p.cheapest is None
    e = plan_json(plans, req)["gb200-nvl72"]
    assert "usd_per_chip_hour" not in e and "cost_usd" not in e and e["chips"] == 72
    assert e["price_source"] == "no price known for GB200; give --price gb200-nvl72=USD"
    text = plan_text(plans, req)
    assert "smallest" in text and "cheapest" not in text and "$" not in text
    priced = plan(PlanRequest(**{**req.__dict__, "prices": {"gb200-nvl72": 10.0}}))[0]
    assert priced.cheapest is not None and priced.cheapest.cost_usd == pytest.approx(
        priced.cheapest.chip_hours * 10.0)
