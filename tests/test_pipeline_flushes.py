"""parallelism.pipeline_flushes: a step that runs its micro-batches as several pipeline schedules
one after another, each filling and draining the pipeline (gradient accumulation over
torch.distributed.pipelining's schedule.step calls, as NeMo AutoModel runs it), and the ZeRO-3
gather of routed experts sharded over their expert-data-parallel ranks."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from sim.collectives import CollectiveModel
from sim.config import scenario_from_dict
from sim.engine import Schedule, Segment, StagePlan, fast_step, simulate
from sim.errors import ConfigError
from sim.run import run
from sim.stages import plan_stages
from sim.topology import build_topology
from sim.validate.training_map import map_runs
from sim.validate.training_parallel import parallelism
from sim.validate.training_rows import RowReader
from sim.workload.layout import Layout
from sim.workload.memory import memory_per_chip
from sim.workload.schedules import peak_in_flight, schedule
from sim.workload.transformer import build_workload

REPO = Path(__file__).resolve().parent.parent


def _plan(f: float, b: float) -> StagePlan:
    return StagePlan((Segment("compute", f),), (Segment("compute", b),), 1, 0, 0, 0, 0, 0.0,
                     0.0, False, 0.0, 0.0, 0.0)


def _scn(par: dict[str, Any], batch: int = 64, chips: int = 64) -> Any:
    return scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": chips},
                               "model": {"preset": "llama3-70b", "layers": 16},
                               "training": {"seq_len": 4096, "global_batch": batch},
                               "parallelism": par}, "test.yaml")


# ------------------------------------------------------------------------- the schedule

@pytest.mark.parametrize("kind, vs", [("1f1b", 1), ("interleaved", 2), ("gpipe", 1)])
def test_each_flush_is_one_schedule_of_its_share_numbered_on(kind: str, vs: int) -> None:
    pp, micro, flushes = 4, 16, 4
    for s in range(pp):
        steps = schedule(kind, s, pp, micro, vs, 0, flushes)
        one = schedule(kind, s, pp, micro // flushes, vs)
        assert len(steps) == flushes * len(one)
        for f in range(flushes):
            part = steps[f * len(one):(f + 1) * len(one)]
            assert [(k, m - f * (micro // flushes), c) for k, m, c in part] == list(one)
        # every (micro-batch, chunk) once each way, as one schedule of all of them has it
        for k in "FB":
            assert sorted((m, c) for kk, m, c in steps if kk == k) == sorted(
                (m, c) for m in range(micro) for c in range(vs))
        # a flush drains: the stage holds no more than one schedule of micro / flushes holds
        assert peak_in_flight(steps) == peak_in_flight(one)


@pytest.mark.parametrize("pp, micro, flushes", [(4, 16, 1), (4, 16, 2), (4, 16, 4), (8, 16, 2),
                                                (2, 6, 3)])
@pytest.mark.parametrize("engine", ["simulate", "fast"])
def test_1f1b_pays_its_fill_and_drain_once_a_flush(pp: int, micro: int, flushes: int,
                                                   engine: str) -> None:
    # Equal stages of t = F + B: one 1F1B schedule of m micro-batches takes (pp - 1 + m) t;
    # `flushes` of them one after another (nothing else between them) take flushes x that.
    f, b = 1.0, 2.0
    sched = Schedule(pp=pp, vs=1, micro=micro, schedule_kind="1f1b", flushes=flushes)
    plans = [_plan(f, b)] * pp
    r = simulate(plans, sched) if engine == "simulate" else fast_step(plans, sched)
    assert r.step_time_s == pytest.approx(flushes * (pp - 1 + micro // flushes) * (f + b))


def test_a_scenario_with_more_flushes_runs_longer_by_its_bubbles() -> None:
    base = run(_scn({"tp": 8, "pp": 4}))
    twice = run(_scn({"tp": 8, "pp": 4, "pipeline_flushes": 2}))
    four = run(_scn({"tp": 8, "pp": 4, "pipeline_flushes": 4}))
    assert base.step.breakdown_s["compute"] == pytest.approx(four.step.breakdown_s["compute"], rel=1e-9)
    bubbles = [x.step.breakdown_s["pipeline_bubble"] for x in (base, twice, four)]
    assert bubbles[0] < bubbles[1] < bubbles[2]
    # Each more flush adds one fill and drain: (pp - 1) micro-batch passes of a stage (32
    # micro-batches in all here); the stages' imbalance (the head on the last) stays as it was.
    fill = 3 * base.step.breakdown_s["compute"] / 32
    assert bubbles[1] - bubbles[0] == pytest.approx(fill, rel=0.05)
    assert bubbles[2] - bubbles[0] == pytest.approx(3 * fill, rel=0.05)
    # without a pipeline there is nothing to fill or drain
    flat = run(_scn({"tp": 8}, batch=16, chips=16))
    flat2 = run(_scn({"tp": 8, "pipeline_flushes": 2}, batch=16, chips=16))
    assert flat2.step.step_time_s == pytest.approx(flat.step.step_time_s, rel=1e-9)


def test_activation_memory_follows_one_schedules_micro_batches() -> None:
    # pp 4, 4 micro-batches a schedule: stage 0 holds 4 in flight; 2 a schedule: only 2.
    one = build_workload(_scn({"tp": 8, "pp": 4}, batch=8))
    two = build_workload(_scn({"tp": 8, "pp": 4, "pipeline_flushes": 4}, batch=8))
    assert memory_per_chip(two).activations_B < memory_per_chip(one).activations_B


@pytest.mark.parametrize("par, batch, match", [
    ({"pipeline_flushes": 3}, 64, r"parallelism.pipeline_flushes: 3 does not divide the 32 "
                                  r"micro-batches per step; valid: a divisor of 32"),
    ({"pipeline_flushes": 0}, 64, r"parallelism.pipeline_flushes: must be >= 1, got 0"),
    ({"pipeline_flushes": "two"}, 64, r"parallelism.pipeline_flushes: expected an integer"),
    ({"schedule": "interleaved", "virtual_stages": 2, "pipeline_flushes": 16}, 64,
     r"micro-batches per schedule divisible by pp = 4, got 2"),
])
def test_bad_flushes_are_one_line_errors(par: dict[str, Any], batch: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_workload(_scn({"tp": 8, "pp": 4, **par}, batch=batch))


# ------------------------------------------------------------------ the training suite

def _row(rid: str, **cells: str) -> dict[str, str]:
    with (REPO / "validation" / "training" / "runs.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == rid)
    return {**row, **cells}


def test_automodel_rows_flush_once_per_gradient_accumulation_step() -> None:
    runs = {r.id: r for r in map_runs(REPO / "validation" / "training")}
    got = {rid: runs[rid].scenario["parallelism"].get("pipeline_flushes", 1)
           for rid in ("automodel-h100-dsv3-1024", "automodel-h100-kimik2-256",
                       "automodel-h100-dsv3-256")}
    assert got == {"automodel-h100-dsv3-1024": 4, "automodel-h100-kimik2-256": 2,
                   "automodel-h100-dsv3-256": 1}
    assert any("pipeline_flushes = 4 (GA 4)" in a for a in runs["automodel-h100-dsv3-1024"].assumptions)


def test_megatron_accumulation_stays_in_one_schedule() -> None:
    # Megatron's GA= is the number of micro-batches its one schedule runs.
    r = RowReader(_row("mbridge-25.11-H100-LLAMA3_70B-64"), "runs.csv:1")
    par, _ = parallelism(r, 64, {"layers": 80})
    assert "pipeline_flushes" not in par
    r = RowReader(_row("mbridge-25.11-H100-LLAMA3_70B-64", notes="VP=5, GA 64"), "runs.csv:1")
    assert "pipeline_flushes" not in parallelism(r, 64, {"layers": 80})[0]


# ------------------------------------------------- ZeRO-3 gathers the sharded experts too

@pytest.mark.parametrize("dp, shard_dp, ep, expected", [
    (8, 8, 2, [[0, 2, 4, 6], [1, 3, 5, 7]]),          # edp 4, one shard group
    (8, 4, 2, [[0, 2], [4, 6], [1, 3], [5, 7]]),      # hybrid sharding: 2 replicas of 4
    (8, 8, 8, [[k] for k in range(8)]),               # edp 1: nothing to gather
])
def test_expert_shard_groups(dp: int, shard_dp: int, ep: int, expected: list[list[int]]) -> None:
    lay = Layout(1, 1, dp, 1, ep, shard_dp=shard_dp, replicas=dp // shard_dp)
    assert sorted(lay.expert_shard_groups()) == sorted(expected)


def _zero3(ep: int, chips: int) -> tuple[float, Any, CollectiveModel]:
    scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": chips},
                              "model": "mixtral-8x7b",
                              "training": {"seq_len": 4096, "global_batch": 64},
                              "parallelism": {"ep": ep, "zero": 3}}, "test.yaml")
    wl = build_workload(scn)
    net = CollectiveModel(build_topology(scn.cluster))
    return plan_stages(wl, net)[0].fsdp_layer_gather_s, wl, net


def _layer_bytes(wl: Any) -> tuple[int, int]:
    n = max(1, len(wl.stage_layers(0)))
    experts = wl.stage_expert_params(0) / n
    return round(2 * (wl.stage_params(0) / n - experts)), round(2 * experts)


@pytest.mark.parametrize("ep, chips", [(8, 32), (2, 16)])
def test_zero3_gathers_experts_over_their_shard_group(ep: int, chips: int) -> None:
    # edp = chips / ep > 1: each layer pass gathers its experts over their 4 or 8 ranks too.
    got, wl, net = _zero3(ep, chips)
    lay = Layout.of(wl.scenario.parallelism)
    dense, experts = _layer_bytes(wl)
    want = (net.time("allgather", dense, lay.shard_group(0)).time_s
            + net.time("allgather", experts, lay.expert_shard_groups(0)[0]).time_s)
    assert len(lay.expert_shard_groups(0)[0]) == chips // ep
    assert got == pytest.approx(want, rel=1e-12)


def test_zero3_experts_not_sharded_are_not_gathered() -> None:
    got, wl, net = _zero3(8, 8)              # ep = dp: edp 1, each rank holds its experts whole
    lay = Layout.of(wl.scenario.parallelism)
    dense, _ = _layer_bytes(wl)
    assert got == pytest.approx(net.time("allgather", dense, lay.shard_group(0)).time_s, rel=1e-12)
