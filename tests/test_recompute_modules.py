"""What a recipe runs beyond the layout: training.recompute_modules (Megatron-Core's selective
recomputation by module: what the backward runs again, what memory that frees, the refusals),
training.logits_dtype, routed experts' state sharded over their expert-data-parallel ranks, and
the validation rows that state their recipe's MoE software."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.run import run
from sim.validate.training_rows import load_overrides
from sim.workload.memory import memory_per_chip
from sim.workload.ops import Comm, Op
from sim.workload.transformer import build_workload

REPO = Path(__file__).resolve().parents[1]


def scn(model: str, modules: list[str] | str | None, chips: int = 16, **par: int):
    training: dict = {"seq_len": 4096, "global_batch": 4 * chips, "recompute": "selective"}
    if modules is not None:
        training["recompute_modules"] = modules
    raw = {"cluster": {"topology": "dgx-h100", "chips": chips}, "model": model,
           "training": training, "parallelism": par}
    return scenario_from_dict(raw, "t.yaml")


def kind(wl, label: str):
    return next(k for k in wl.kinds if k.kind == label)


def test_moe_module_runs_the_whole_moe_block_again_with_its_transfers() -> None:
    wl = build_workload(scn("qwen3-30b-a3b", ["moe"], ep=16))
    layer = wl.layer
    names = [it.name for it in layer.recompute]
    assert names[0] == "router" and "unpermute" in names
    assert {c.name for c in layer.recompute if isinstance(c, Comm)} == {"ep-dispatch", "ep-combine"}
    # nothing of the attention block, not the norms or residual adds
    assert not {"qkv", "attention", "norm1", "norm2", "residual2"} & set(names)


def test_each_module_is_its_own_items() -> None:
    def recomputed(mods: list[str], model: str = "qwen3-30b-a3b", label: str = "attention+moe"):
        wl = build_workload(scn(model, mods, ep=16))
        return [it.name for it in kind(wl, label).recompute]
    assert recomputed(["layernorm"]) == ["norm1", "norm2"]
    assert recomputed(["moe_act"]) == ["activation"]
    assert recomputed(["core_attn"]) == ["attention-recompute"]
    # the attention core runs its forward again (a flash backward alone would charge nothing)
    wl = build_workload(scn("qwen3-30b-a3b", ["core_attn"], ep=16))
    again = wl.layer.recompute[0]
    assert isinstance(again, Op) and again.cls == "fwd"
    # modules a layer does not have are nothing for it: no attention core in a Mamba-2 layer
    assert recomputed(["core_attn", "moe"], "nemotron-3-nano", "mamba") == []
    shared = recomputed(["shared_experts"], "nemotron-3-nano", "moe")
    assert shared == ["shared-up", "activation", "shared-down"]


def test_recomputing_costs_time_and_saves_memory() -> None:
    base = scn("qwen3-30b-a3b", None, ep=16)
    moe = scn("qwen3-30b-a3b", ["moe", "layernorm"], ep=16)
    t0, t1 = run(base).step.step_time_s, run(moe).step.step_time_s
    assert t1 > t0
    m0 = memory_per_chip(build_workload(base)).activations_B
    m1 = memory_per_chip(build_workload(moe)).activations_B
    assert m1 < 0.5 * m0                # the experts' tensors and permuted copies are most of it
    act = memory_per_chip(build_workload(scn("qwen3-30b-a3b", ["moe_act"], ep=16))).activations_B
    assert m1 < act < m0


def test_a_comma_list_from_the_command_line_is_the_list() -> None:
    a = scn("qwen3-30b-a3b", "moe, layernorm", ep=16)
    b = scn("qwen3-30b-a3b", ["layernorm", "moe"], ep=16)
    assert a.training.recompute_modules == b.training.recompute_modules == ("layernorm", "moe")


@pytest.mark.parametrize("training, needle", [
    ({"recompute": "none", "recompute_modules": ["moe"]}, "training.recompute is 'none'"),
    ({"recompute": "selective", "recompute_modules": ["attention"]}, "core_attn, layernorm"),
    ({"recompute": "selective", "recompute_modules": []}, "non-empty list"),
])
def test_bad_modules_are_one_line(training: dict, needle: str) -> None:
    raw = {"cluster": {"topology": "dgx-h100", "chips": 16}, "model": "qwen3-30b-a3b",
           "training": {"seq_len": 4096, **training}, "parallelism": {"ep": 16}}
    with pytest.raises(ConfigError) as e:
        scenario_from_dict(raw, "t.yaml")
    assert needle in str(e.value) and "training.recompute_modules" in str(e.value)
    assert "\n" not in str(e.value)


def test_the_cli_refuses_a_bad_module_with_exit_2(capsys) -> None:
    rc = main(["run", "default", "--set", "training.recompute_modules=moe,bogus"])
    assert rc == 2
    assert "recompute_modules" in capsys.readouterr().err


def test_overrides_state_moe_software_only_with_valid_values(tmp_path) -> None:
    path = tmp_path / "overrides.csv"
    ids = {"r1": 2}
    path.write_text("id,field,value,reason\nr1,ep_overlap,false,recipe says so\n"
                    "r1,moe_dispatcher,deepep,recipe says so\n")
    assert load_overrides(path, ids) == {"r1": [("ep_overlap", "false", "recipe says so"),
                                                ("moe_dispatcher", "deepep", "recipe says so")]}
    for field, value in (("ep_overlap", "no"), ("moe_dispatcher", "hybrid")):
        path.write_text(f"id,field,value,reason\nr1,{field},{value},why\n")
        with pytest.raises(ConfigError, match=field):
            load_overrides(path, ids)


def test_bf16_logits_halve_the_logits_and_the_loss_traffic() -> None:
    def build(dtype: str):
        raw = {"cluster": {"topology": "dgx-h100", "chips": 8}, "model": "llama3-8b",
               "training": {"seq_len": 4096, "global_batch": 8, "logits_dtype": dtype}}
        return build_workload(scenario_from_dict(raw, "t.yaml"))
    f32, b16 = build("fp32"), build("bf16")
    assert memory_per_chip(b16).logits_B == pytest.approx(memory_per_chip(f32).logits_B / 2)
    loss = {wl: next(o for o in wl.last_forward if o.name == "cross-entropy") for wl in (f32, b16)}
    assert loss[b16].bytes == pytest.approx(loss[f32].bytes / 2)
    raw = {"cluster": {"topology": "dgx-h100", "chips": 8}, "model": "llama3-8b",
           "training": {"logits_dtype": "fp16"}}
    with pytest.raises(ConfigError, match="training.logits_dtype: got 'fp16'; valid: fp32, bf16"):
        scenario_from_dict(raw, "t.yaml")


def test_expert_state_is_sharded_over_its_expert_data_parallel_ranks() -> None:
    # EP 16 on 16 GPUs: each rank holds its own experts, which no other rank shares (EDP 1), so
    # ZeRO-1 shards only the dense parameters' optimizer state
    wl = build_workload(scn("qwen3-30b-a3b", None, ep=16))
    experts = wl.stage_expert_params(0)
    params = wl.stage_params(0) + 2 * wl.embed_params
    mem = memory_per_chip(wl)
    assert mem.optimizer_B == pytest.approx(12.0 * ((params - experts) / 16 + experts))
    # EP 8: two ranks hold each expert and split its state
    wl8 = build_workload(scn("qwen3-30b-a3b", None, ep=8))
    e8 = wl8.stage_expert_params(0)
    p8 = wl8.stage_params(0) + 2 * wl8.embed_params
    assert memory_per_chip(wl8).optimizer_B == pytest.approx(12.0 * ((p8 - e8) / 16 + e8 / 2))


def test_automodel_rows_run_their_recipes_loss_and_gate() -> None:
    from sim.validate.training_map import map_runs
    rows = [r for r in map_runs(REPO / "validation" / "training") if r.id.startswith("automodel-")
            and r.supported]
    assert rows
    for r in rows:
        assert r.scenario["training"]["logits_dtype"] == "bf16"
        assert r.scenario["model"]["moe"] == {"load_imbalance": 1.0, "routing": "round_robin"}


def test_moe_sync_idle_is_the_profiled_runs_idle_time() -> None:
    """sim.calibration.MOE_SYNC_IDLE_S re-derived from the validation row it was measured on: the
    step less the profile's GPU-active union, over its MoE layer forwards."""
    import csv
    import re

    from sim import calibration as cal
    with (REPO / "validation" / "training" / "runs.csv").open(newline="") as fh:
        row = next(r for r in csv.DictReader(fh)
                   if r["id"] == "mbridge-skill-H100-Qwen3_30B_a3B-hybridep-noovl-16")
    active = float(re.search(r"GPU-active union ([\d.]+) s", row["notes"]).group(1))
    microbatches = int(row["global_batch_seqs"]) // (int(row["dp"]) * int(row["micro_batch"]))
    layers = int(row["layers"])
    assert cal.MOE_SYNC_IDLE_S == pytest.approx((float(row["step_time_s"]) - active)
                                                / (microbatches * layers))


def test_a_dropless_moe_forward_waits_for_the_host_unless_overlap_fills_it() -> None:
    from sim import calibration as cal
    from sim.collectives import CollectiveModel
    from sim.stages import plan_stages
    from sim.topology import build_topology

    def waits(model: object = "qwen3-30b-a3b", batch: int = 16, **software: object) -> int:
        raw = {"cluster": {"topology": "dgx-h100", "chips": 16}, "model": model,
               "training": {"seq_len": 4096, "global_batch": batch, "recompute": "none"},
               "parallelism": {"ep": 16}, "software": software}
        s = scenario_from_dict(raw, "t.yaml")
        plan = plan_stages(build_workload(s), CollectiveModel(build_topology(s.cluster)),
                           traffic=False)[0]
        return sum(1 for x in plan.layer_fwd if x.kind == "compute"
                   and x.seconds == pytest.approx(cal.MOE_SYNC_IDLE_S))
    assert waits(ep_overlap=False) == 1
    assert waits(batch=64, ep_overlap=True) == 0          # the other micro-batch fills it
    assert waits(batch=16, ep_overlap=True) == 1          # one micro-batch: nothing to fill it
    dropping = {"preset": "qwen3-30b-a3b", "moe": {"capacity_factor": 1.25}}
    assert waits(dropping, ep_overlap=False) == 0         # static shapes: no host round trip


def test_per_tensor_fp8_experts_pay_an_amax_pass_each() -> None:
    from sim.stages import compute_model
    from sim.workload.ops import gemm
    raw = {"cluster": {"topology": "dgx-h100", "chips": 16}, "model": "qwen3-30b-a3b",
           "training": {"seq_len": 4096, "global_batch": 64, "precision": "fp8"},
           "parallelism": {"ep": 16}}
    s = scenario_from_dict(raw, "t.yaml")
    cm = compute_model(s)
    one, eight = gemm("x", 4096, 1536, 2048), gemm("x", 512, 1536, 2048, batch=8)
    q_one = cm.op_time_s(one) - cm.gemm_s(4096, 1536, 2048, "fp8") / cm.stack_efficiency
    q_eight = (cm.op_time_s(eight)
               - cm.gemm_s(512, 1536, 2048, "fp8", batch=8, grouped=True) / cm.stack_efficiency)
    # the same rows quantized: a dense input 4 bytes an element, a grouped one 6 (its amax read)
    assert q_eight == pytest.approx(q_one * 6 / 4, rel=1e-6)
