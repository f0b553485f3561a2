"""training.recompute_modules: Megatron-Core's selective recomputation by module (what the
backward runs again, what memory that frees, the refusals), and the validation rows that state
their recipe's MoE software."""

from __future__ import annotations

import pytest

from sim.cli import main
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.run import run
from sim.validate.training_rows import load_overrides
from sim.workload.memory import memory_per_chip
from sim.workload.ops import Comm, Op
from sim.workload.transformer import build_workload


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
