"""Uneven pipeline stages: the plan resolves stage_layers / first_stage_layers / last_stage_layers
into per-chunk layers (sim/config/parallelism.py), the engine plays each stage's real layers and
fast_step still equals simulate, memory follows the busiest stage, and bad input is one
ConfigError naming the field."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from sim.collectives import CollectiveModel
from sim.config import scenario_from_dict
from sim.engine import Schedule, Segment, StagePlan, fast_step, simulate
from sim.errors import ConfigError
from sim.run import run
from sim.stages import plan_stages
from sim.topology import build_topology
from sim.workload.transformer import build_workload


def _scn(par: dict[str, Any], layers: int = 80, chips: int = 64, batch: int = 64) -> Any:
    return scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": chips},
                               "model": {"preset": "llama3-70b", "layers": layers},
                               "training": {"seq_len": 4096, "global_batch": batch},
                               "parallelism": par})


# ---------------------------------------------------------------- the plan

def test_megatron_first_last_shorthand() -> None:
    # --decoder-first/last-pipeline-num-layers: the rest spread evenly over the middle stages.
    p = _scn({"tp": 8, "pp": 4, "first_stage_layers": 19, "last_stage_layers": 19}).parallelism
    assert p.layers_of_stages == (19, 21, 21, 19)
    assert p.layers_per_stage == 21 and p.uneven
    p = _scn({"tp": 8, "pp": 4, "first_stage_layers": 17}).parallelism
    assert p.layers_of_stages == (17, 21, 21, 21)


def test_llama3_405b_layout_one_layer_chunks() -> None:
    # 126 layers, pp 16 x 8 chunks: the first chunk holds only the embedding, the last only the
    # head (Dubey et al. 2024, section 3.3.2).
    scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 16384},
                              "model": "llama3-405b",
                              "training": {"seq_len": 8192, "global_batch": 2048},
                              "parallelism": {"tp": 8, "pp": 16, "schedule": "interleaved",
                                              "virtual_stages": 8, "first_stage_layers": 7,
                                              "last_stage_layers": 7}})
    p = scn.parallelism
    assert p.model_chunk_layers == (0,) + (1,) * 126 + (0,)
    assert p.stage_chunk_layers(0) == (0, 1, 1, 1, 1, 1, 1, 1)
    assert p.stage_chunk_layers(15) == (1, 1, 1, 1, 1, 1, 1, 0)
    assert p.layers_of_stages == (7,) + (8,) * 14 + (7,)


def test_explicit_lists_per_stage_and_per_chunk() -> None:
    p = _scn({"tp": 8, "pp": 4, "stage_layers": [10, 30, 30, 10]}).parallelism
    assert p.layers_of_stages == (10, 30, 30, 10)
    chunks = [4, 10, 10, 6, 6, 10, 10, 24]                     # model order: chunk c x pp + s
    p = _scn({"tp": 8, "pp": 4, "schedule": "interleaved", "virtual_stages": 2,
              "stage_layers": chunks}).parallelism
    assert p.model_chunk_layers == tuple(chunks)
    assert p.stage_chunk_layers(0) == (4, 6) and p.stage_chunk_layers(3) == (6, 24)


def test_even_split_unchanged() -> None:
    p = _scn({"tp": 8, "pp": 4}).parallelism
    assert p.model_chunk_layers == (20,) * 4 and not p.uneven
    with pytest.raises(ConfigError, match=r"model.layers: 81 is not divisible by pp x virtual_stages"):
        _scn({"tp": 8, "pp": 4}, layers=81).parallelism.checked()


@pytest.mark.parametrize("par, match", [
    ({"pp": 4, "stage_layers": [20, 20, 20, 19]}, r"parallelism.stage_layers: \[20, 20, 20, 19\] sums "
                                                   r"to 79 but model.layers is 80; valid: 4 counts"),
    ({"pp": 4, "stage_layers": [40, 40]}, r"parallelism.stage_layers: 2 entries \[40, 40\] for pp = 4; "
                                          r"valid: 4 \(one per stage\)"),
    ({"pp": 2, "schedule": "interleaved", "virtual_stages": 2, "stage_layers": [20, 20, 40]},
     r"valid: 2 \(one per stage\) or 4 \(one per model chunk"),
    ({"pp": 4, "stage_layers": [20, 0, 40, 20]}, r"stage_layers: \[20, 0, 40, 20\] has a negative "
                                                  r"entry or an empty stage"),
    ({"pp": 4, "stage_layers": [-1, 41, 20, 20]}, r"has a negative entry"),
    ({"pp": 4, "stage_layers": [20, 20, 20, 20], "first_stage_layers": 20},
     r"stage_layers and first_stage_layers are both given"),
    ({"pp": 1, "last_stage_layers": 3}, r"parallelism.last_stage_layers: needs a pipeline"),
    ({"pp": 4, "first_stage_layers": 18, "last_stage_layers": 19},
     r"first_stage_layers \+ last_stage_layers: 37 leave 43 .* the other 2 stage\(s\)"),
    ({"pp": 4, "first_stage_layers": -1}, r"first_stage_layers: must be >= 0, got -1"),
    ({"pp": 4, "stage_layers": "20,20"}, r"stage_layers: expected a list of layer counts"),
])
def test_bad_stage_layers_is_one_config_error(par: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _scn({"tp": 8, **par}).parallelism.checked()


# ---------------------------------------------------------------- the engine

def _plan(f: float, b: float, layers: int) -> StagePlan:
    return StagePlan((Segment("compute", f),), (Segment("compute", b),), layers, 0, 0, 0, 0, 0.0,
                     0.0, False, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("layers", [[1, 2, 2, 1], [3, 4, 4, 3], [2, 1, 1, 1], [1, 3, 1, 1, 1, 1]])
@pytest.mark.parametrize("m", [4, 8, 16])
def test_gpipe_uneven_is_the_flow_shop_formula(layers: list[int], m: int) -> None:
    # Stage times proportional to layers, t_s = L_s (F + B); a flow line of stages:
    # (m - 1) max t + sum t (the slowest stage paces the micro-batches).
    f, b = 1.0, 2.0
    pp = len(layers)
    t = [n * (f + b) for n in layers]
    r = simulate([_plan(f, b, n) for n in layers], Schedule(pp=pp, vs=1, micro=m, schedule_kind="gpipe"))
    assert r.step_time_s == pytest.approx((m - 1) * max(t) + sum(t))


@pytest.mark.parametrize("layers", [[1, 1, 1, 2], [1, 2, 3], [2, 2, 2, 2, 2, 5]])
@pytest.mark.parametrize("m", [2, 8, 16])
def test_1f1b_step_with_the_slowest_stage_last(layers: list[int], m: int) -> None:
    # The last stage paces 1F1B when it is the slowest: it never idles once its first forward
    # arrives, so the step is the fill, m (F + B) of the slowest stage, and the drain:
    # sum_{s < pp-1} (F_s + B_s) + m t_max = sum t + (m - 1) t_max.
    f, b = 1.0, 2.0
    pp = len(layers)
    t = [n * (f + b) for n in layers]
    r = simulate([_plan(f, b, n) for n in layers], Schedule(pp=pp, vs=1, micro=m, schedule_kind="1f1b"))
    assert r.step_time_s == pytest.approx(sum(t) + (m - 1) * max(t))
    even = simulate([_plan(f, b, max(layers))] * pp, Schedule(pp=pp, vs=1, micro=m, schedule_kind="1f1b"))
    assert r.step_time_s <= even.step_time_s             # fewer layers never slow a step


def test_chunk_layers_scale_each_chunk() -> None:
    # A chunk of 0 layers passes its micro-batches through for free; 2 layers take twice 1.
    f, b, pp, vs, m = 1.0, 2.0, 2, 2, 4
    one = _plan(f, b, 1)
    base = simulate([one] * pp, Schedule(pp=pp, vs=vs, micro=m, schedule_kind="interleaved")).step_time_s
    doubled = [StagePlan(**{**one.__dict__, "chunk_layers": (2, 2)})] * pp
    twice = simulate(doubled, Schedule(pp=pp, vs=vs, micro=m, schedule_kind="interleaved")).step_time_s
    assert twice == pytest.approx(2 * base)


def test_fast_step_is_the_engine_on_uneven_layouts() -> None:
    topo = build_topology(_scn({"tp": 8}).cluster)
    net = CollectiveModel(topo)
    layouts: list[dict[str, Any]] = [
        {"pp": 4, "first_stage_layers": 19, "last_stage_layers": 19},
        {"pp": 4, "stage_layers": [10, 30, 30, 10]},
        {"pp": 4, "schedule": "interleaved", "virtual_stages": 2, "first_stage_layers": 19,
         "last_stage_layers": 19},
        {"pp": 2, "schedule": "interleaved", "virtual_stages": 4, "stage_layers": [0, 12, 12, 12, 12, 12, 12, 8]},
        {"pp": 4, "schedule": "gpipe", "last_stage_layers": 14},
    ]
    for par, (tp, zero) in itertools.product(layouts, [(8, 1), (2, 3)]):
        scn = _scn({"tp": tp, "zero": zero, **par})
        wl = build_workload(scn)
        plans = plan_stages(wl, net)
        p = scn.parallelism
        assert [sp.total_layers(p.virtual_stages) for sp in plans] == list(p.layers_of_stages)
        kw = Schedule(pp=p.pp, vs=p.virtual_stages, micro=wl.microbatches, schedule_kind=p.schedule)
        a, b = simulate(plans, kw), fast_step(plans, kw)
        assert b.step_time_s == pytest.approx(a.step_time_s, rel=5e-3), par
        for k, v in a.breakdown_s.items():
            assert b.breakdown_s[k] == pytest.approx(v, rel=5e-3, abs=1e-9), (par, k)


def test_lighter_end_stages_shorten_the_step_and_per_rank_agrees() -> None:
    # 80 layers on 4 stages: the end stages also run the embedding and the output head + loss
    # (128K vocabulary), so a layer off each (19, 21, 21, 19) balances the pipeline, as Llama 3
    # does; the same plan per rank gives the same step.
    even = run(_scn({"tp": 8, "pp": 4}, chips=32, batch=16)).step
    uneven_scn = _scn({"tp": 8, "pp": 4, "first_stage_layers": 19, "last_stage_layers": 19},
                      chips=32, batch=16)
    uneven = run(uneven_scn).step
    assert uneven.step_time_s < even.step_time_s
    full = run(uneven_scn, per_rank=True).step
    assert full.step_time_s == pytest.approx(uneven.step_time_s, rel=1e-12)


def test_llama3_405b_scenario_is_the_papers_layout_and_fits() -> None:
    # Dubey et al. 2024, section 3.3 / Table 4: 126 layers, TP 8, PP 16 interleaved, DP 128,
    # 38-43% BF16 MFU; the target is within 10% of that band.
    from pathlib import Path

    from sim.config import load_scenario

    scn = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" /
                        "llama3-405b-16384xh100.yaml")
    p = scn.parallelism
    assert (scn.model.layers, p.tp, p.pp, p.cp, p.dp, p.schedule) == (126, 8, 16, 1, 128, "interleaved")
    assert p.layers_of_stages[0] == p.layers_of_stages[-1] == 7
    r = run(scn).step
    assert r.memory_per_chip_GiB <= scn.cluster.chip.hbm_bytes / 2**30
    assert 0.38 * 0.9 <= r.mfu <= 0.43 * 1.1


def test_llama3_micro_batches_per_round() -> None:
    """``parallelism.microbatch_group`` (Llama 3's N, Megatron's microbatch_group_size_per_vp_stage):
    N = pp is the default schedule; a larger N runs more micro-batches through a chunk before the
    next, so the warm-up holds more of them (Megatron's depth (pp - s - 1) 2 + (v - 1) N) while
    the step plays the same work; it must divide the micro-batches and be >= pp, interleaved."""
    from sim.errors import ConfigError
    from sim.run import run
    from sim.workload.memory import memory_per_chip
    from sim.workload.transformer import build_workload

    def scn(**par: object):  # type: ignore[no-untyped-def]
        return scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 32},
                                   "model": {"preset": "llama3-8b", "layers": 16},
                                   "training": {"seq_len": 2048, "global_batch": 32},
                                   "parallelism": {"tp": 8, "pp": 4, "schedule": "interleaved",
                                                   "virtual_stages": 2, **par}})
    base, same, wide = scn(), scn(microbatch_group=4), scn(microbatch_group=8)
    assert run(same).step.step_time_s == run(base).step.step_time_s
    mem = [memory_per_chip(build_workload(s)).activations_B for s in (base, wide)]
    # stage 0's peak: Megatron's warm-up depth + 1 chunks of 2 layers in flight
    assert mem[1] / mem[0] == pytest.approx(((4 - 1) * 2 + (2 - 1) * 8 + 1)
                                            / ((4 - 1) * 2 + (2 - 1) * 4 + 1))
    r = run(wide).step
    assert r.breakdown_s["compute"] == pytest.approx(run(base).step.breakdown_s["compute"])
    for bad, msg in [({"microbatch_group": 2}, "at least pp = 4"),
                     ({"microbatch_group": 3}, "at least pp = 4")]:
        with pytest.raises(ConfigError, match=msg):
            scn(**bad)
    with pytest.raises(ConfigError, match="microbatch_group: 6 does not divide the 32"):
        run(scn(microbatch_group=6))
