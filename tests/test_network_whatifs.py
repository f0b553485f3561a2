"""What-ifs the shared-link engine answers: fat-tree oversubscription, degraded and failed links,
and a second job on the same fabric (scenario fields, each with its effect on a step)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.collectives import CollectiveModel
from sim.config import load_scenario, scenario_from_dict
from sim.errors import ConfigError, SimError
from sim.run import run
from sim.topology import build_topology

GiB = 2**30


def _step(raw: dict) -> float:
    return run(scenario_from_dict(raw)).step.step_time_s


@pytest.mark.slow  # two 1,024-GPU ZeRO-3 steps (~8 s)
def test_oversubscription_leaves_rail_aligned_rings_and_trees_alone_but_slows_all_to_all() -> None:
    """Which answer is right for rail-aligned NCCL traffic. A ZeRO-3 step with TP 8 inside each
    node runs every data-parallel collective as rings of one GPU per node on one rail; a ring
    visits the nodes in order, so it leaves a leaf switch only where it crosses from one
    scalable unit (32 nodes) to the next: one flow of one NIC's rate per boundary. At 4:1 a leaf
    keeps 8 uplinks, and the 8 rails' rings use 8 different leaves: nothing is over capacity and
    the step is unchanged, rightly. NCCL's double binary tree is in rank order too: of each tree's
    127 edges over 128 nodes only 5 cross a scalable unit, so a 1 GiB all-reduce over all 1,024
    GPUs (NVLSTree) keeps its time. An all-to-all is another matter: 3/4 of every unit's bytes
    leave it, through a quarter of the NICs' rate at 4:1, so it takes 4 x 3/4 = 3 times as long."""
    from sim.collectives.tree import tree_edges
    base = {"cluster": {"topology": "dgx-h100", "chips": 1024}, "model": "llama3-70b",
            "training": {"seq_len": 8192, "global_batch": 512},
            "parallelism": {"tp": 8, "zero": 3}}
    over = {**base, "cluster": {**base["cluster"], "oversubscription": 4}}
    flat, thin = run(scenario_from_dict(base)).step, run(scenario_from_dict(over)).step
    assert thin.step_time_s == flat.step_time_s
    assert thin.network_solves == 0
    assert [sum(c // 32 != p // 32 for c, p in t) for t in tree_edges(128)] == [5, 5]
    nets = [CollectiveModel(build_topology(scenario_from_dict(r).cluster)) for r in (base, over)]
    a, b = (n.time("allreduce", GiB) for n in nets)
    assert a.algo == b.algo == "nvls_tree" and b.time_s == pytest.approx(a.time_s, rel=0.01)
    x, y = (n.time("alltoall", GiB) for n in nets)
    assert y.time_s / x.time_s == pytest.approx(3.0, rel=0.05)


def test_oversubscription_slows_pipeline_sends_across_scalable_units() -> None:
    """PP 4 over 1,024 GPUs puts each stage on one scalable unit, so every pipeline send of all
    256 ranks of a stage leaves its leaves at once: at N:1 the uplinks carry a quarter, an
    eighth... of it and the bubble grows; monotone in N."""
    steps = [run(load_scenario("llama3-70b-1024xh100", [f"cluster.oversubscription={n}"])).step
             for n in (1, 2, 4, 8)]
    times = [r.step_time_s for r in steps]
    assert times == sorted(times) and times[-1] > times[0] * 1.01
    assert steps[-1].link_sharing_s is not None and steps[-1].link_sharing_s > 0
    assert steps[-1].breakdown_s["compute"] == pytest.approx(steps[0].breakdown_s["compute"])


SMALL = {"cluster": {"topology": "dgx-h100", "chips": 32}, "model": "llama3-8b",
         "training": {"seq_len": 4096, "global_batch": 32}, "parallelism": {"tp": 8, "zero": 1}}


def _with_links(edits: list) -> dict:
    return {**SMALL, "cluster": {**SMALL["cluster"], "degraded_links": edits}}


def test_a_degraded_link_slows_exactly_the_groups_routed_through_it() -> None:
    half = [{"link": ["n0/nic0", "leaf/s0/r0"], "factor": 0.5}]
    net = CollectiveModel(build_topology(scenario_from_dict(_with_links(half)).cluster))
    ok = CollectiveModel(build_topology(scenario_from_dict(SMALL).cluster))
    through, beside = [0, 8, 16, 24], [1, 9, 17, 25]        # rail 0 (node 0's NIC 0) vs rail 1
    # healthy: a ring, 1.5 S through each NIC; at half rate the tree, which puts S through node
    # 0's NIC (one edge in each tree, half the data each way), is the faster: 2 / 1.5 = 4/3, and
    # the tree's pipeline fills first: depth 2 (one rank on each of 4 nodes), 64 chunks of
    # 512 KiB on each of 32 channels, 1 + 3/64
    slow, fast = net.time("allreduce", GiB, through), ok.time("allreduce", GiB, through)
    assert (fast.algo, slow.algo) == ("ring", "tree")
    assert slow.time_s / fast.time_s == pytest.approx(4 / 3 * (1 + 3 / 64), rel=0.02)
    assert net.time("allreduce", GiB, beside).time_s == ok.time("allreduce", GiB, beside).time_s
    # in a step: the data-parallel ring of TP rank 0 crosses it, the other seven do not, and
    # the step waits for the slow one at the next tensor-parallel collective
    assert _step(_with_links(half)) > _step(SMALL)


def test_a_failed_link_is_routed_around() -> None:
    down = [{"link": ["n0/nic0", "leaf/s0/r0"], "factor": 0}]
    topo = build_topology(scenario_from_dict(_with_links(down)).cluster)
    assert not topo.graph.has_edge("n0/nic0", "leaf/s0/r0")
    net = CollectiveModel(topo)
    r = net.time("allreduce", GiB, [0, 8, 16, 24])          # GPU 0 leaves through other NICs
    assert 0 < r.time_s < float("inf")
    # the detour puts rail 0's traffic on the other rails' NICs, which their own rings use
    assert _step(_with_links(down)) >= _step(SMALL)


@pytest.mark.parametrize("edits, msg", [
    ([{"link": ["n0/nic0", "leaf/s0/r1"], "factor": 0.5}], "no link between 'n0/nic0' and 'leaf/s0/r1'"),
    ([{"link": ["n0/nic0"], "factor": 0.5}], "degraded_links[0].link: expected two different"),
    ([{"link": ["n0/nic0", "leaf/s0/r0"], "factor": 1.5}], "degraded_links[0].factor: must be <= 1"),
    ([{"link": ["n0/nic0", "leaf/s0/r0"], "factor": 1.0}], "to below 1"),
    ([{"link": ["n0/nic0", "leaf/s0/r0"]}], "degraded_links[0].factor: required"),
    ({"link": ["a", "b"]}, "degraded_links: expected a list"),
    ([{"link": ["n0/nic0", "leaf/s0/r0"], "factor": 0.5, "why": 1}], "unknown key"),
])
def test_bad_degraded_links_are_one_clear_error(edits: object, msg: str) -> None:
    with pytest.raises(SimError, match=None) as e:
        run(scenario_from_dict(_with_links(edits)))    # type: ignore[arg-type]
    assert msg in str(e.value)


def _write(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path


def _pair(tmp_path: Path, over: float, job_chips: int = 384, other_chips: int = 256) -> Path:
    """Two data-parallel jobs on one fat-tree: the job on nodes 0-47 (scalable unit 0 and half of
    unit 1), its neighbour on the next nodes (the rest of unit 1 and unit 2): their rings both
    cross unit 1's leaves."""
    def job(name: str, chips: int) -> dict:
        return {"name": name, "cluster": {"topology": "dgx-h100", "chips": chips,
                                          "oversubscription": over},
                "model": "llama3-8b", "training": {"seq_len": 4096, "global_batch": chips // 4},
                "parallelism": {"tp": 8, "zero": 0}}
    _write(tmp_path / "other.yaml", job("neighbour", other_chips))
    raw = job("job", job_chips)
    raw["cluster"]["shared_with"] = "other.yaml"
    return _write(tmp_path / "job.yaml", raw)


def test_a_second_job_on_the_fabric_slows_this_one_where_they_share_uplinks(tmp_path: Path) -> None:
    """At 32:1 a leaf keeps one uplink: each job's ring alone puts one flow on unit 1's
    uplinks, both jobs two, so both slow down; on a non-blocking fabric neither does."""
    r = run(load_scenario(_pair(tmp_path, 32)))
    n = r.shared
    assert n is not None and n.scenario == "neighbour" and n.chips == 256
    assert n.slowdown > 1.1 and r.step.step_time_s == pytest.approx(n.step_time_alone_s * n.slowdown)
    assert n.neighbour_step_time_s is not None
    assert n.neighbour_step_time_s > n.neighbour_step_time_alone_s
    free = run(load_scenario(_pair(tmp_path, 1))).shared
    assert free is not None and free.slowdown == 1.0
    # the job alone on the same fabric: what it would do without the neighbour
    alone = dict(yaml.safe_load((tmp_path / "job.yaml").read_text()))
    del alone["cluster"]["shared_with"]
    alone["cluster"]["oversubscription"] = 32
    assert run(scenario_from_dict(alone)).step.step_time_s == pytest.approx(n.step_time_alone_s)


def test_shared_with_errors_name_the_field(tmp_path: Path) -> None:
    job = _pair(tmp_path, 1)
    raw = yaml.safe_load(job.read_text())
    for value, msg in [("missing.yaml", "is neither a scenario file"),
                       ("llama3-70b-tpu-v5p-1024", "both jobs must be on one fabric"),
                       (3, "expected a scenario file")]:
        raw["cluster"]["shared_with"] = value
        with pytest.raises(ConfigError, match="cluster.shared_with") as e:
            load_scenario(_write(tmp_path / "bad.yaml", raw))
        assert msg in str(e.value)
    big = _pair(tmp_path, 1, job_chips=16384)
    with pytest.raises(ConfigError, match="the two jobs need 16640 chips together"):
        load_scenario(big)


def test_a_neighbour_with_stragglers_is_refused_not_ignored(tmp_path: Path) -> None:
    job = _pair(tmp_path, 1)
    other = yaml.safe_load((tmp_path / "other.yaml").read_text())
    other["stragglers"] = {"compute_jitter_sigma": 0.05}
    _write(tmp_path / "other.yaml", other)
    with pytest.raises(ConfigError, match="cluster.shared_with: .* has a stragglers section"):
        load_scenario(job)
