"""Training-step engine: schedules against closed forms, per-class = per-rank, breakdowns, traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import scenario_from_dict
from sim.engine import Schedule, Segment, StagePlan, simulate, step_floor
from sim.run import run
from sim.workload.schedules import schedule

REPO = Path(__file__).resolve().parent.parent


def plan(f: float, b: float, p2p: float = 0.0, layers: int = 1) -> StagePlan:
    return StagePlan((Segment("compute", f),), (Segment("compute", b),), layers, 0, 0, 0, 0, p2p,
                     0.0, False, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
@pytest.mark.parametrize("pp, m", [(1, 4), (2, 4), (4, 8), (8, 8)])
def test_pipeline_step_is_the_textbook_formula(kind: str, pp: int, m: int) -> None:
    # Uniform stages, free transfers: (m + pp - 1) (F + B) (Narayanan et al. 2021, section 2.2).
    f, b = 1.0, 2.0
    kw = Schedule(pp=pp, vs=1, micro=m, schedule_kind=kind)
    r = simulate([plan(f, b)] * pp, kw)
    assert r.step_time_s == pytest.approx((m + pp - 1) * (f + b))
    assert r.breakdown_s["pipeline_bubble"] == pytest.approx((pp - 1) * (f + b))
    # the plan screen's floor from the last stage alone: its m (F + B), after the first
    # micro-batch's forward through the pp - 1 stages before it and before its last gradient's
    # way back through them: the whole step here, the bubble included
    assert step_floor([plan(f, b)], kw, [pp - 1], [(f, b)] * pp) == pytest.approx(r.step_time_s)
    assert step_floor([plan(f, b)], kw, [pp - 1]) == pytest.approx(m * (f + b))


def test_interleaving_shrinks_the_bubble_by_the_virtual_stages() -> None:
    # Bubble (pp - 1)(F + B) / v with v chunks per stage (Narayanan et al. 2021, section 2.2.2).
    pp, m, v = 4, 8, 2
    f, b = 1.0, 2.0
    chunk = [plan(f / v, b / v)] * pp
    r = simulate(chunk, Schedule(pp=pp, vs=v, micro=m, schedule_kind="interleaved"))
    assert r.step_time_s == pytest.approx(m * (f + b) + (pp - 1) * (f + b) / v)


def test_transfers_delay_the_pipeline() -> None:
    base = simulate([plan(1, 2)] * 4, Schedule(pp=4, vs=1, micro=4, schedule_kind="1f1b")).step_time_s
    slow = simulate([plan(1, 2, p2p=0.5)] * 4, Schedule(pp=4, vs=1, micro=4, schedule_kind="1f1b")).step_time_s
    assert slow > base


def test_every_stage_runs_every_microbatch_once() -> None:
    for kind, vs in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 4)):
        for stage in range(4):
            steps = schedule(kind, stage, 4, 8, vs)
            for k in "FB":
                got = sorted((m, c) for kk, m, c in steps if kk == k)
                assert got == sorted((m, c) for m in range(8) for c in range(vs)), (kind, vs, stage)


SMALL = {
    "cluster": {"topology": "dgx-h100", "chips": 16},
    "model": {"preset": "llama3-8b", "layers": 8},
    "training": {"seq_len": 2048, "global_batch": 16, "micro_batch": 1},
}


@pytest.mark.parametrize("par", [
    {"tp": 2, "pp": 2},
    {"tp": 4, "pp": 2, "schedule": "interleaved", "virtual_stages": 2},
    {"tp": 2, "pp": 1, "zero": 3},
    {"tp": 1, "pp": 4, "schedule": "gpipe"},
    {"tp": 2, "pp": 2, "cp": 2},
    {"tp": 2, "pp": 1, "zero": 3, "zero_group": 2},
    {"tp": 1, "pp": 2, "zero": 1, "zero_group": 4},
])
def test_one_rank_per_stage_equals_every_rank(par: dict) -> None:
    scn = scenario_from_dict({**SMALL, "parallelism": par})
    cls = run(scn).step
    full = run(scn, per_rank=True).step
    assert full.step_time_s == pytest.approx(cls.step_time_s, rel=1e-12)
    assert sum(cls.breakdown_s.values()) == pytest.approx(cls.step_time_s, rel=1e-9)


def test_mfu_is_palm_model_flops_over_peak() -> None:
    scn = scenario_from_dict({**SMALL, "parallelism": {"tp": 2}})
    r = run(scn).step
    m = scn.model
    per_token = 6 * m.non_embedding_params() + 12 * m.layers * m.heads * m.head_dim * 2048
    assert r.model_flops_per_step == pytest.approx(per_token * 16 * 2048)
    assert r.mfu == pytest.approx(r.model_flops_per_step / (r.step_time_s * 16 * 989.4e12))
    assert 0 < r.mfu < 1


def test_more_bandwidth_never_slows_a_step() -> None:
    fast = scenario_from_dict({**SMALL, "parallelism": {"tp": 1, "zero": 3}})
    slow = scenario_from_dict({**SMALL, "cluster": {"topology": "dgx-h100", "chips": 16,
                                                     "oversubscription": 4.0},
                               "parallelism": {"tp": 1, "zero": 3}})
    assert run(slow).step.step_time_s >= run(fast).step.step_time_s


def test_run_cli_json_fields_and_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    r = subprocess.run([sys.executable, "-m", "sim", "run", str(REPO / "scenarios" / "default.yaml"),
                        "--json", "--trace", str(out)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    for k in ("scenario", "chips", "step_time_s", "tokens_per_s", "tokens_per_s_per_chip", "mfu",
              "model_flops_per_step", "memory_per_chip_GiB", "breakdown_s"):
        assert k in res
    assert sum(res["breakdown_s"].values()) == pytest.approx(res["step_time_s"], rel=1e-9)
    trace = json.loads(out.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert spans and max(e["ts"] + e["dur"] for e in spans) <= res["step_time_s"] * 1e6 * (1 + 1e-9)


def test_every_bundled_scenario_runs() -> None:
    """Every bundled scenario runs (exit 0) with an MFU in (0, 1). tests/test_golden.py plays each
    one's ``run --json`` (or, for the straggler scenario, its table) and holds it to its golden
    file byte for byte, so the golden files are what it prints: read them rather than run every
    scenario a second time (~40 s)."""
    golden = REPO / "tests" / "golden"
    for f in sorted((REPO / "scenarios").glob("*.yaml")):
        as_json = golden / f"run-json-{f.stem}.txt"
        played = (as_json if as_json.exists() else golden / f"run-{f.stem}.txt").read_text()
        head, rest = played.split("\n--- stdout\n", 1)
        stdout, stderr = rest.split("--- stderr\n", 1)
        assert head.endswith("\nexit 0") and stderr == "", (f.name, stderr)
        mfu = (json.loads(stdout)["mfu"] if as_json.exists()
               else float(next(x for x in stdout.splitlines() if "MFU" in x).split()[1]) / 100)
        assert 0 < mfu < 1, f.name


def test_fast_step_is_the_engine_over_a_grid_of_layouts() -> None:
    """The closed-form screening path (sim.engine.fast_step) plays the same schedule as simpy:
    equal step time and breakdown over schedules, pipeline depths, virtual stages, ZeRO stages."""
    import itertools

    from sim.collectives import CollectiveModel
    from sim.config import scenario_from_dict
    from sim.engine import fast_step, simulate, step_floor
    from sim.stage_floors import pass_floors
    from sim.stages import plan_stages
    from sim.topology import build_topology
    from sim.workload.transformer import build_workload

    checked = 0
    topo = build_topology(scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 64},
                                              "model": "llama3-70b"}).cluster)
    net = CollectiveModel(topo)
    for tp, pp, sched, vs, zero in itertools.product([2, 8], [1, 2, 4], ["1f1b", "interleaved", "gpipe"],
                                                     [1, 2, 5], [1, 3]):
        if (sched == "interleaved") != (vs > 1) or (sched == "interleaved" and pp == 1):
            continue
        scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 64}, "model": "llama3-70b",
                                  "training": {"seq_len": 4096, "global_batch": 64},
                                  "parallelism": {"tp": tp, "pp": pp, "zero": zero, "schedule": sched,
                                                  "virtual_stages": vs}})
        wl = build_workload(scn)
        plans = plan_stages(wl, net)
        kw = Schedule(pp=pp, vs=vs if sched == "interleaved" else 1, micro=wl.microbatches,
                  schedule_kind=sched)
        a, b = simulate(plans, kw), fast_step(plans, kw)
        assert b.step_time_s == pytest.approx(a.step_time_s, rel=5e-3)
        # the plan search's floor: below the step, above the critical stage's compute and
        # optimizer; any stage's alone is a floor too
        floor = step_floor(plans, kw)
        assert b.breakdown_s["compute"] + b.breakdown_s["optimizer"] <= floor * (1 + 1e-8)
        assert floor <= b.step_time_s
        assert step_floor(plans[-1:], kw, [pp - 1]) <= floor
        # with the pipeline's fill and drain: still below the step, above the floor without
        # them wherever there is a pipeline
        filled = step_floor(plans[-1:], kw, [pp - 1], pass_floors(wl))
        assert step_floor(plans[-1:], kw, [pp - 1]) * (pp > 1) < filled <= b.step_time_s
        for k, v in a.breakdown_s.items():
            assert b.breakdown_s[k] == pytest.approx(v, rel=5e-3, abs=1e-9), k
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("name, over", [
    ("deepseek-v3-256xh100", {}),                                   # uneven, dense-first, MTP
    ("nemotron-3-nano-16xh100", {"pp": 2}),                         # Mamba-2 hybrid
    ("nemotron-3-nano-16xh100", {"pp": 2, "schedule": "interleaved", "virtual_stages": 2}),
    ("qwen3-30b-a3b-16xh100", {"pp": 2, "ep": 4}),                  # MoE, overlapped dispatch
])
def test_the_pipeline_fill_floor_holds_on_mixed_stacks(name: str, over: dict) -> None:
    """The plan screen's floor with the pipeline's fill and drain (``sim.stage_floors.pass_floors``)
    stays under the step where stages hold different layer kinds, numbers of layers, MTP
    modules or overlapped expert traffic, and lies above the floor without them."""
    from sim.config import load_scenario
    from sim.engine import fast_step
    from sim.job import network_of, schedule_of
    from sim.stage_floors import pass_floors
    from sim.stages import plan_stages
    from sim.workload.transformer import build_workload

    raw = dict(load_scenario(REPO / "scenarios" / f"{name}.yaml").raw)
    raw["parallelism"] = {**raw.get("parallelism", {}), **over}
    scn = scenario_from_dict(raw)
    wl = build_workload(scn)
    plans = plan_stages(wl, network_of(scn.cluster)[1], traffic=False)
    kw, last = schedule_of(scn, wl), [scn.parallelism.pp - 1]
    step = fast_step(plans, kw).step_time_s
    assert step_floor(plans[-1:], kw, last) < step_floor(plans[-1:], kw, last, pass_floors(wl)) <= step


def test_exact_event_log_of_a_two_stage_pipeline() -> None:
    """Two stages, 1F1B, two micro-batches, F = 1 s, B = 2 s, 0.5 s pipeline transfers: the
    intervals each process records, worked out by hand. Stage 0 runs F0, F1 (one warm-up forward),
    then waits for B0's gradient (stage 1 finishes B0 at 4.5, + 0.5 s), and B1's (7.5 + 0.5)."""
    r = simulate([plan(1.0, 2.0, p2p=0.5)] * 2, Schedule(pp=2, vs=1, micro=2, schedule_kind="1f1b"),
                 trace=True)
    got = [(i.stage, i.kind, i.label, i.start_s, i.end_s) for i in r.intervals]
    want = [
        (0, "compute", "F0.0", 0.0, 1.0), (0, "compute", "F1.0", 1.0, 2.0),
        (0, "pipeline_bubble", "wait", 2.0, 5.0), (0, "compute", "B0.0", 5.0, 7.0),
        (0, "pipeline_bubble", "wait", 7.0, 8.0), (0, "compute", "B1.0", 8.0, 10.0),
        (0, "optimizer", "optimizer", 10.0, 10.0),
        (1, "pipeline_bubble", "wait", 0.0, 1.5), (1, "compute", "F0.1", 1.5, 2.5),
        (1, "compute", "B0.1", 2.5, 4.5), (1, "compute", "F1.1", 4.5, 5.5),
        (1, "compute", "B1.1", 5.5, 7.5), (1, "optimizer", "optimizer", 7.5, 7.5),
    ]
    assert sorted(got) == sorted(want)
    assert r.step_time_s == 10.0 and r.critical_stage == 0
    assert r.breakdown_s["pipeline_bubble"] == 4.0 and r.breakdown_s["compute"] == 6.0


def test_slices_all_reduce_the_gradients_after_the_backward() -> None:
    """TPU Multislice under MaxText: the replica all-reduce across slices runs once, on the
    step's whole gradient shard in the weights' dtype (fp32), after the backward pass, and each
    layer adds its DCN ring steps (2 (slices - 1) at ``TPU_DCN_LAYER_STEP_S``), so the step grows
    with the slice count at a fixed batch per chip (MaxText's configs/v5e/README.md tables do);
    replicas inside one slice keep the per-layer reduction behind the backward. The screen's
    closed form plays it as the engine does."""
    from sim.calibration import TPU_DCN_LAYER_STEP_S
    from sim.collectives import CollectiveModel
    from sim.engine import fast_step, step_floor
    from sim.stages import plan_stages
    from sim.topology import build_topology
    from sim.workload.transformer import build_workload

    def scn(slices: int, zero_group: int = 16) -> dict:
        return {"cluster": {"topology": "tpu-v5e", "chips": 16 * slices, "slices": slices},
                "model": {"preset": "llama3-8b", "layers": 4},
                "training": {"seq_len": 2048, "global_batch": 16 * slices, "micro_batch": 1},
                "parallelism": {"tp": 1, "pp": 1, "zero": 3, "zero_group": zero_group}}

    steps = []
    for slices in (1, 2, 4):
        s = scenario_from_dict(scn(slices))
        wl = build_workload(s)
        net = CollectiveModel(build_topology(s.cluster))
        plans = plan_stages(wl, net)
        sp = plans[0]
        kw = Schedule(pp=1, vs=1, micro=wl.microbatches, schedule_kind="1f1b")
        a, b = simulate(plans, kw), fast_step(plans, kw)
        assert b.step_time_s == pytest.approx(a.step_time_s, rel=1e-9)
        assert step_floor(plans, kw) <= b.step_time_s
        if slices == 1:
            assert sp.replica_tail_s == 0 and sp.replica_layer_s == 0
        else:
            assert sp.replica_layer_s == 0 and sp.replica_tail_s > 0
            shard = (wl.stage_params(0) + 2 * wl.embed_params) * 4 // 16
            alone = net.time("allreduce", shard, list(range(0, 16 * slices, 16))).time_s
            assert sp.replica_tail_s >= alone * (1 - 1e-9)      # every shard position at once
            groups = [list(range(i, 16 * slices, 16)) for i in range(16)]
            ring_steps = 4 * 2 * (slices - 1) * TPU_DCN_LAYER_STEP_S     # 4 layers
            assert TPU_DCN_LAYER_STEP_S > 0
            assert sp.replica_tail_s == pytest.approx(
                net.time_concurrent("allreduce", shard, groups).time_s + ring_steps, rel=1e-9)
            assert a.breakdown_s["exposed_comm"] >= sp.replica_tail_s * (1 - 1e-9)
        steps.append(a.step_time_s)
    assert steps[0] < steps[1] < steps[2]
    # replicas inside one slice (2 shard groups of 16 on one 32-chip slice): no DCN, per layer
    inside = scenario_from_dict({**scn(2, 16), "cluster": {"topology": "tpu-v5e", "chips": 32}})
    sp = plan_stages(build_workload(inside), CollectiveModel(build_topology(inside.cluster)))[0]
    assert sp.replica_tail_s == 0 and sp.replica_layer_s > 0
