"""Issue 11's mechanisms, one test each: seeds redraw everything random, traces show what the
result reports, topology latencies are used, work limits refuse before running, YAML is strict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.collectives import CollectiveModel
from sim.config import load_cluster, scenario_from_dict
from sim.errors import ConfigError
from sim.run import run

REPO = Path(__file__).resolve().parent.parent
STRAGGLERS = str(REPO / "scenarios" / "llama3-70b-1024xh100-stragglers.yaml")


def _json(argv: list[str], capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow  # five runs of the straggler scenario on 128 GPUs (~25 s)
def test_same_seed_same_output_other_seed_other_slow_chips(capsys) -> None:
    # 128 GPUs (4 replicas) with one slow chip among them: the same draws as on 1,024, cheaper.
    small = ["--set", "cluster.chips=128", "--set", "stragglers.slow_fraction=0.01", "--json"]
    a = _json(["run", STRAGGLERS, "--seed", "5", *small], capsys)
    b = _json(["run", STRAGGLERS, "--seed", "5", *small], capsys)
    assert a == b and len(a["slow_chips"]) == 1
    others = {tuple(_json(["run", STRAGGLERS, "--seed", str(s), *small], capsys)["slow_chips"])
              for s in (6, 7, 8)}
    assert len(others | {tuple(a["slow_chips"])}) > 1


@pytest.mark.slow  # the 1,024-GPU straggler scenario (~10 s)
def test_the_straggler_trace_is_the_replica_the_breakdown_reports(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.json"
    assert main(["run", STRAGGLERS, "--trace", str(path)]) == 0
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert events
    end_s = max(e["ts"] + e["dur"] for e in events) / 1e6
    out = capsys.readouterr().out
    median = float(next(line for line in out.splitlines() if "step time" in line).split()[2])
    assert end_s <= median + 1e-6      # the median replica ends before the slowest one


def test_trace_ranks_all_traces_every_rank(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.json"
    default = str(REPO / "scenarios" / "default.yaml")
    assert main(["run", default, "--trace", str(path), "--trace-ranks", "all"]) == 0
    tids = {e["tid"].split()[1] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"}
    assert len(tids) == 8                      # tp 2 x dp 4 ranks of the one stage
    assert main(["run", STRAGGLERS, "--trace", str(path), "--trace-ranks", "all"]) == 2


@pytest.mark.parametrize("field, scale", [("ib_latency_us: 0.3 ", "ib_latency_us: 300 "),
                                          ("nvlink_latency_us: 0.25 ", "nvlink_latency_us: 250 ")])
def test_gpu_link_latencies_feed_the_collective_model(tmp_path: Path, field, scale) -> None:
    text = (REPO / "topologies" / "dgx-h100.yaml").read_text()
    assert field in text
    slow = tmp_path / "slow.yaml"
    slow.write_text(text.replace(field, scale))
    stock = CollectiveModel(_topo("dgx-h100")).time("allreduce", 1024).time_s
    slower = CollectiveModel(_topo(str(slow))).time("allreduce", 1024).time_s
    assert slower > stock + 100e-6             # hundreds of us more per step, several steps


def _topo(name: str):
    from sim.topology import build_topology

    return build_topology(load_cluster(name, 16))


def test_work_limit_refuses_before_running() -> None:
    scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 8}, "model": "llama3-8b",
                              "training": {"global_batch": 1_000_000}}, "big.yaml")
    with pytest.raises(ConfigError, match=r"would process ~[\d,]+ simulation events .* pass --max-events"):
        run(scn, max_events=1_000_000)


def test_yaml_duplicate_keys_and_depth(tmp_path: Path) -> None:
    from sim.config import load_scenario

    p = tmp_path / "d.yaml"
    p.write_text("model: llama3-8b\ncluster: {topology: dgx-h100}\ncluster: {chips: 8}\n")
    with pytest.raises(ConfigError, match=r"line 3: duplicate key 'cluster' \(first on line 2\)"):
        load_scenario(p)
    p.write_text("model: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(ConfigError, match=r"nested deeper than 50 levels"):
        load_scenario(p)


def test_internal_errors_are_one_line_unless_debug(monkeypatch, capsys) -> None:
    import sim.commands

    def boom(args):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(sim.commands, "cmd_topo_show", boom)
    assert main(["topo", "show", "dgx-h100"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "please report" in err and "Traceback" not in err
    assert main(["--debug", "topo", "show", "dgx-h100"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.slow  # every bundled scenario's step (~20 s)
def test_the_work_estimate_is_within_a_factor_two_of_the_events_played() -> None:
    """``estimate_events`` (what the work limit refuses on) against the events the engine plays,
    for every bundled scenario that runs one engine per step, and per-rank."""
    from sim.collectives import CollectiveModel
    from sim.config import load_scenario
    from sim.engine import estimate_events, step_loads
    from sim.run import run
    from sim.stages import plan_stages
    from sim.topology import build_topology
    from sim.workload.transformer import build_workload

    scenarios = [load_scenario(f) for f in sorted((REPO / "scenarios").glob("*.yaml"))]
    small = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 16},
                                "model": {"preset": "llama3-8b", "layers": 4},
                                "training": {"seq_len": 2048, "global_batch": 16},
                                "parallelism": {"tp": 2, "pp": 2}})
    # tensor-parallel traffic that its stage's gradient ring also crosses (``step_loads``' quiet)
    quiet = scenario_from_dict({"cluster": {"topology": "hgx-a100-4nic", "chips": 64},
                                "model": {"preset": "llama3-8b", "layers": 32},
                                "training": {"seq_len": 2048, "global_batch": 256},
                                "parallelism": {"tp": 4, "pp": 4, "zero": 1},
                                "software": {"framework": "deepspeed"}})
    checked = 0
    for scn, per_rank in [(s, False) for s in scenarios if s.stragglers is None
                          and not s.cluster.shared_with] + [(small, True), (quiet, False)]:
        wl = build_workload(scn)
        topo = build_topology(scn.cluster)
        net = CollectiveModel(topo)
        plans = plan_stages(wl, net)
        p = scn.parallelism
        vs = p.virtual_stages if p.schedule == "interleaved" else 1
        ranks = p.tp * p.cp * p.dp if per_rank else 1
        delays, quiet = step_loads(plans, net.links.capacity_Bps, wl.microbatches * vs)
        est = estimate_events(plans, vs=vs, micro=wl.microbatches, ranks_per_stage=ranks,
                              delays=delays, quiet=quiet)
        played = run(scn, topo=topo, net=net, per_rank=per_rank).step.engine_events
        assert played / 2 <= est <= 2 * played or max(est, played) < 1000, (scn.name, est, played)
        checked += 1
    assert checked >= 8


def test_the_work_limit_refuses_before_the_neighbour_job_is_planned(tmp_path: Path, capsys) -> None:
    """The work guard answers as soon as the job's own plans are known: a job over --max-events
    is refused as such (exit 2) even when its cluster.shared_with neighbour would not fit in
    memory (exit 3 once it is planned)."""
    (tmp_path / "other.yaml").write_text(
        "name: other\ncluster: {topology: dgx-h100, chips: 8}\nmodel: llama3-70b\n"
        "training: {seq_len: 8192, global_batch: 8}\nparallelism: {tp: 1}\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: job\ncluster: {topology: dgx-h100, chips: 8, shared_with: other.yaml}\n"
                   "model: llama3-8b\ntraining: {seq_len: 4096, global_batch: 8}\nparallelism: {tp: 8}\n")
    assert main(["run", str(job), "--max-events", "10"]) == 2
    assert "simulation events" in capsys.readouterr().err
    assert main(["run", str(job)]) == 3
    assert "GiB per chip" in capsys.readouterr().err
