"""Workload arithmetic, memory model and the plan checks (bad input gets one clear message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import scenario_from_dict
from sim.errors import ConfigError, InfeasibleError
from sim.workload.memory import check_fits, memory_per_chip
from sim.workload.transformer import Comm, Op, build_workload

REPO = Path(__file__).resolve().parent.parent


def scn(par=None, training=None, model="llama3-8b", cluster=None):
    raw = {"cluster": cluster or {"topology": "dgx-h100", "chips": 64}, "model": model,
           "training": training or {"seq_len": 4096, "global_batch": 64},
           "parallelism": par or {"tp": 8}}
    return scenario_from_dict(raw, "t.yaml")


def test_layer_gemm_flops_are_six_n_per_token() -> None:
    # Forward + backward GEMM FLOPs of a layer = 6 x (layer weights) x tokens, split over TP ranks.
    s = scn({"tp": 4})
    wl = build_workload(s)
    gemm = sum(o.flops for o in wl.layer.forward + wl.layer.backward
               if isinstance(o, Op) and o.kind == "gemm")
    m = s.model
    tokens = 1 * 4096
    weights = m.attention_params() + m.mlp_params()
    assert gemm == pytest.approx(6 * weights * tokens / 4, rel=1e-9)


def test_sequence_parallel_collectives_per_layer() -> None:
    wl = build_workload(scn({"tp": 8}))
    fwd = [c.op for c in wl.layer.forward if isinstance(c, Comm)]
    bwd = [c.op for c in wl.layer.backward if isinstance(c, Comm)]
    assert sorted(fwd) == ["allgather", "allgather", "reducescatter", "reducescatter"]
    assert sorted(bwd) == sorted(fwd)
    no_sp = build_workload(scn({"tp": 8, "sequence_parallel": False}))
    assert [c.op for c in no_sp.layer.forward if isinstance(c, Comm)] == ["allreduce"] * 2


def test_gpt3_activation_memory_matches_korthikanti() -> None:
    # GPT-3 175B, s=2048, b=1, t=8 with SP, no recompute: s b h (34 - 2 dropout masks) / t per layer.
    s = scn({"tp": 8, "pp": 8}, {"seq_len": 2048, "global_batch": 64, "recompute": "none"},
            model="gpt3-175b")
    wl = build_workload(s)
    mem = memory_per_chip(wl)
    per_layer = 2048 * 12288 * 32 / 8
    assert mem.activations_B == pytest.approx(per_layer * 12 * 8)    # 12 layers x 8 in flight


def test_zero_stages_shard_what_they_should() -> None:
    m0 = memory_per_chip(build_workload(scn({"tp": 8, "zero": 0})))
    m1 = memory_per_chip(build_workload(scn({"tp": 8, "zero": 1})))
    m3 = memory_per_chip(build_workload(scn({"tp": 8, "zero": 3})))
    assert m1.optimizer_B == pytest.approx(m0.optimizer_B / 8)
    assert m1.weights_B == m0.weights_B and m3.weights_B == pytest.approx(m0.weights_B / 8)


def test_hybrid_sharding_shards_over_the_group_and_reduces_across_replicas() -> None:
    from sim.run import run

    cluster = {"topology": "tpu-v5p", "chips": 128, "slices": 2}
    training = {"seq_len": 2048, "global_batch": 64}
    full = scn({"tp": 4, "zero": 3, "zero_group": 32}, training, cluster=cluster)   # over both slices
    hybrid = scn({"tp": 4, "zero": 3, "zero_group": 16}, training, cluster=cluster)
    # unsaid, the slices are data-parallel replicas (MaxText's DCN default): FSDP within a slice
    assert scn({"tp": 4, "zero": 3}, training, cluster=cluster).parallelism == hybrid.parallelism
    # a pipeline stage within one slice (pp = slices) keeps its whole data-parallel group; two
    # stages over four slices shard within the two slices each spans
    assert scn({"tp": 4, "pp": 2, "zero": 3}, training, cluster=cluster).parallelism.zero_group == 0
    four = {"topology": "tpu-v5p", "chips": 256, "slices": 4}
    assert scn({"tp": 4, "pp": 2, "zero": 3}, training, cluster=four).parallelism.zero_group == 16
    mf, mh = (memory_per_chip(build_workload(x)) for x in (full, hybrid))
    assert mh.optimizer_B == pytest.approx(2 * mf.optimizer_B)               # 16 shards, not 32
    assert mh.weights_B == pytest.approx(2 * mf.weights_B)
    rf, rh = run(full).step, run(hybrid).step
    # FSDP gathers cross the DCN every layer; hybrid keeps them in the slice and sends only the
    # gradient shards across, overlapped with the backward pass.
    assert rh.step_time_s < rf.step_time_s
    one = run(scn({"tp": 4, "zero": 3}, {"seq_len": 2048, "global_batch": 32},
                       cluster={"topology": "tpu-v5p", "chips": 64})).step
    assert rh.step_time_s >= one.step_time_s


@pytest.mark.parametrize("cluster, par", [
    ({"topology": "dgx-h100", "chips": 32, "sharp": True}, {"tp": 1, "zero": 1, "zero_group": 8}),
    ({"topology": "dgx-h100", "chips": 48}, {"tp": 1, "zero": 1, "zero_group": 6}),   # uneven nodes
    ({"topology": "dgx-h100", "chips": 48}, {"tp": 1, "zero": 3, "zero_group": 3}),
    ({"topology": "tpu-v4", "chips": 384, "slices": 2}, {"tp": 1, "zero": 3, "zero_group": 128}),
])
def test_hybrid_sharding_runs_on_any_group_shape(cluster, par) -> None:
    """Replica groups that sit unevenly on nodes or slices fall back to algorithms that allow it."""
    from sim.run import run

    s = scn(par, {"seq_len": 2048, "global_batch": 768}, {"preset": "llama3-8b", "layers": 4}, cluster)
    r = run(s).step
    assert r.step_time_s > 0 and r.parallelism["zero_group"] == par["zero_group"]


def test_a_plan_that_does_not_fit_is_infeasible_with_a_hint() -> None:
    s = scn({"tp": 1}, {"seq_len": 8192, "global_batch": 64, "recompute": "none"}, model="llama3-70b")
    wl = build_workload(s)
    with pytest.raises(InfeasibleError,
                       match=r"needs \d+\.\d GiB per chip .* has 79\.2 GiB; try: raise parallelism.zero"):
        check_fits(wl, memory_per_chip(wl))


@pytest.mark.parametrize("par, training, model, match", [
    ({"tp": 8}, {"seq_len": 4096, "global_batch": 60}, "llama3-8b",
     r"training.global_batch: 60 is not divisible by micro_batch x dp = 1 x 8"),
    ({"tp": 8, "pp": 3}, None, "llama3-8b", r"tp\*pp\*cp = 8\*3\*1 = 24 does not divide"),
    ({"tp": 2, "pp": 4, "schedule": "interleaved", "virtual_stages": 3}, None, "llama3-8b",
     r"model.layers: 32 is not divisible by pp x virtual_stages = 4 x 3"),
    ({"tp": 64}, None, "llama3-8b", r"parallelism.tp: 64 does not divide model.heads = 32"),
    ({"tp": 8, "ep": 4}, None, "llama3-8b", r"parallelism.ep: 4 needs an MoE model"),
    ({"tp": 1, "ep": 3}, None, "mixtral-8x7b", r"parallelism.ep: 3 does not divide model.moe.experts = 8"),
])
def test_plan_checks(par, training, model, match) -> None:
    with pytest.raises(ConfigError, match=match):
        build_workload(scn(par, training, model))


def test_cli_exit_codes_for_bad_plans(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {topology: dgx-h100, chips: 8}\nmodel: llama3-8b\n"
                   "training: {global_batch: 12}\nparallelism: {tp: 1}\n")
    r = subprocess.run([sys.executable, "-m", "sim", "run", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "global_batch: 12 is not divisible" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    big = tmp_path / "big.yaml"
    big.write_text("cluster: {topology: dgx-h100, chips: 8}\nmodel: llama3-70b\n"
                   "training: {seq_len: 8192, global_batch: 8, recompute: none}\nparallelism: {tp: 1}\n")
    r = subprocess.run([sys.executable, "-m", "sim", "run", str(big)], capture_output=True, text=True)
    assert r.returncode == 3 and "infeasible" in r.stderr and "Traceback" not in r.stderr


def test_qwen3_moe_presets_have_their_published_sizes() -> None:
    """The Hugging Face model cards (Qwen/Qwen3-235B-A22B, Qwen/Qwen3-30B-A3B, "Number of
    Parameters"): 235B in total and 22B activated; 30.5B and 3.3B (activated counts include the
    embedding and the head)."""
    from sim.models import PRESETS
    for name, total, active in (("qwen3-235b-a22b", 235e9, 22e9), ("qwen3-30b-a3b", 30.5e9, 3.3e9)):
        m = PRESETS[name]
        embed = 2 * m.vocab * m.hidden
        assert m.total_params() == pytest.approx(total, rel=0.01)
        assert m.non_embedding_params(active_only=True) + embed == pytest.approx(active, rel=0.03)


def test_memoised_layer_work_and_compute_models_change_no_answer() -> None:
    """The per-process memos (a layer's work, a compute model per chip and stack) give every
    bundled scenario the workload and op times it gets in a fresh process, whatever ran before
    it: played forwards with the memos warm, then backwards after clearing them."""
    import sim.stages as stages
    import sim.workload.transformer as transformer
    from sim.config.scenario import load_scenario
    from sim.stages import compute_model

    paths = sorted((REPO / "scenarios").glob("*.yaml"))
    assert len(paths) >= 10

    def answers(order):
        out = {}
        for p in order:
            s = load_scenario(p)
            wl = build_workload(s)
            cm = compute_model(s)
            ops = [o for k in wl.kinds for o in (*k.forward, *k.backward, *k.recompute)
                   if isinstance(o, Op)]
            out[p.name] = (wl.kinds, [cm.op_time_s(o) for o in ops])
        return out

    warm = answers(paths)
    transformer._LAYER_WORK.clear()
    stages._compute_model.cache_clear()
    cold = {}
    for p in reversed(paths):            # each alone: memos cleared before every scenario
        transformer._LAYER_WORK.clear()
        stages._compute_model.cache_clear()
        cold.update(answers([p]))
    assert warm == cold
    s = load_scenario(paths[0])
    assert compute_model(s) is compute_model(s)
    assert compute_model(s, {}) is not compute_model(s)


def test_memoised_activation_peak_changes_no_answer() -> None:
    """The schedule's activation peak (``stage_activation_peak_B``, memoised per process) is the
    same warm as worked out afresh, over plans that differ only in one fact it reads: schedule,
    depth, virtual stages, micro-batches, round size, flushes, uneven chunks."""
    import sim.workload.schedules as schedules

    base = {"tp": 1, "pp": 4, "zero": 1}
    plans = [dict(base), {**base, "schedule": "gpipe"},
             {**base, "schedule": "interleaved", "virtual_stages": 2},
             {**base, "schedule": "interleaved", "virtual_stages": 2, "microbatch_group": 8},
             {**base, "pipeline_flushes": 2}, {**base, "pp": 2}, {**base, "pp": 1},
             {**base, "stage_layers": [10, 8, 8, 6]}]
    batches = (64, 128)
    cases = [(p, b) for p in plans for b in batches]

    def peaks(order, cold):
        out = {}
        for i in order:
            plan, batch = cases[i]
            s = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 32},
                                    "model": "llama3-8b", "parallelism": plan,
                                    "training": {"seq_len": 2048, "global_batch": batch,
                                                 "micro_batch": 1}})
            par = s.parallelism
            got = []
            for args in ((3.0e8, 7.0e7), (3.0e8,), (1.0,)):
                if cold:
                    schedules._peak_B.cache_clear()
                got.append(schedules.stage_activation_peak_B(par, *args))
            out[i] = tuple(got)
        return out

    schedules._peak_B.cache_clear()
    warm = peaks(range(len(cases)), cold=False)
    cold = peaks(reversed(range(len(cases))), cold=True)
    assert warm == cold
    assert len(set(warm.values())) >= 6          # the plans do differ in their peaks
