"""software: profiles and their bad inputs (one ConfigError naming field, value and choices)."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.hardware import get_chip
from sim.software import ATTENTION_KERNELS, FRAMEWORKS, resolve_software

REQUIRED = ("megatron-te", "pytorch-eager", "torch-compile", "pytorch-fsdp", "deepspeed",
            "llm-foundry", "maxtext", "paxml")


def scn(software, topology="dgx-h100", chips=8, precision="bf16"):
    return scenario_from_dict({"cluster": {"topology": topology, "chips": chips}, "model": "llama3-8b",
                               "training": {"precision": precision}, "software": software}, "t.yaml")


def test_the_issue_names_are_all_there() -> None:
    assert set(REQUIRED) <= set(FRAMEWORKS)
    assert {"cudnn", "flash-attention-2", "flash-attention-3", "xla"} <= set(ATTENTION_KERNELS)


@pytest.mark.parametrize("framework", REQUIRED)
def test_every_framework_loads_where_it_runs(framework) -> None:
    tpu = FRAMEWORKS[framework].runs_on_tpu
    s = scn({"framework": framework}, "tpu-v5p" if tpu else "dgx-h100", 64 if tpu else 8)
    assert s.software.framework == framework


# Each profile's facts as the memory model and the step plan read them. Adding a framework adds
# its row here (and its entry in sim.software.FRAMEWORKS); nothing else names it.
#            runs_on_tpu eager_autograd sdpa_output_copy selective_recompute offload_overlap
FACTS = {
    "megatron-te":   (False, False, False, "scores", True),
    "megatron":      (False, False, False, "scores", False),
    "deepspeed":     (False, False, False, "scores", False),
    "pytorch-eager": (False, True, True, "op-sac", False),
    "torch-compile": (False, False, False, "op-sac", False),
    "pytorch-fsdp":  (False, True, True, "op-sac", False),
    "llm-foundry":   (False, True, False, "op-sac", False),
    "maxtext":       (True, False, False, "minimal_flash", True),
    "paxml":         (True, False, False, "scores", True),
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_profile_states_its_facts(framework) -> None:
    p = FRAMEWORKS[framework]
    assert (p.runs_on_tpu, p.eager_autograd, p.sdpa_output_copy, p.selective_recompute,
            p.offload_overlap) == FACTS[framework]
    # Every stack runs on NVIDIA GPUs; the attention it resolves to there is a kernel.
    assert resolve_software(framework, None, get_chip("H100-SXM")).attention in ATTENTION_KERNELS


def test_a_profile_with_a_fact_outside_its_vocabulary_is_refused() -> None:
    good = FRAMEWORKS["megatron-te"]
    for field, bad in (("elementwise", "half"), ("optimizer", "sgd"),
                       ("selective_recompute", "some"), ("attention", "flash-attention-9")):
        with pytest.raises(ValueError, match=repr(bad)):
            dataclasses.replace(good, **{field: bad})


def test_describe_is_the_run_table_and_json_fields() -> None:
    assert list(FRAMEWORKS["torch-compile"].describe()) == [
        "framework", "attention", "elementwise", "fp8_linear", "tp_comm_overlap", "optimizer"]


def test_no_module_but_software_names_a_framework() -> None:
    """Framework facts live in sim/software.py's profiles: no other module decides by a
    framework's name (sim/calibration.py's fitted table is keyed by it: data, not a decision)."""
    root = Path(sim.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name in ("software.py", "calibration.py") and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in FRAMEWORKS:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.value!r}")
    assert not found


@pytest.mark.parametrize("software, topology, match", [
    ({"framework": "jax-magic"}, "dgx-h100", r"software\.framework: unknown framework 'jax-magic'; valid: megatron-te"),
    ({"attention": "flash-attention-5"}, "dgx-h100",
     r"software\.attention: unknown attention kernel 'flash-attention-5'; valid: cudnn"),
    ({"attention": "flash-attention-4"}, "dgx-h100",
     r"software\.attention: flash-attention-4 is a Blackwell kernel.*valid: cudnn"),
    ({"attention": "flash-attention-3"}, "dgx-a100",
     r"software\.attention: flash-attention-3 is a Hopper kernel.*valid: cudnn"),
    ({"attention": "cudnn"}, "tpu-v5p", r"software\.attention: 'cudnn' is a CUDA kernel.*valid on TPUs: splash, xla"),
    ({"attention": "splash"}, "dgx-h100", r"software\.attention: 'splash' is a TPU"),
    ({"framework": "megatron-te"}, "tpu-v5p",
     r"software\.framework: 'megatron-te' runs on NVIDIA GPUs.*valid on TPUs: maxtext, paxml"),
    ({"framework": "maxtext", "kernel": "x"}, "dgx-h100", r"software: unknown key\(s\) \['kernel'\]"),
    ({"framework": 3}, "dgx-h100", r"software\.framework: expected a string"),
])
def test_bad_software_is_one_clear_error(software, topology, match) -> None:
    with pytest.raises(ConfigError, match=match):
        scn(software, topology, 64 if topology.startswith("tpu") else 8)


def test_fp8_needs_a_chip_and_a_stack_that_run_it() -> None:
    with pytest.raises(ConfigError, match=r"training\.precision: fp8 is not supported on A100"):
        scn({}, "dgx-a100", precision="fp8")
    with pytest.raises(ConfigError, match=r"training\.precision: fp8 is not supported on TPU-v4"):
        scn({}, "tpu-v4", 64, precision="fp8")
    with pytest.raises(ConfigError) as e:
        scn({"framework": "megatron"}, precision="fp8")
    assert str(e.value) == ("t.yaml: training.precision: fp8 needs a framework with FP8 linear "
                            "layers; megatron has none; use bf16, or software.framework: "
                            "megatron-te, pytorch-eager, torch-compile, pytorch-fsdp, llm-foundry, "
                            "maxtext or paxml")


def test_the_profile_is_in_the_table_and_the_json(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("cluster: {topology: dgx-h100, chips: 8}\nmodel: llama3-8b\n"
                    "parallelism: {tp: 8}\nsoftware: {framework: torch-compile, attention: flash-attention-3}\n")
    out = subprocess.run([sys.executable, "-m", "sim", "run", str(path), "--json"],
                         capture_output=True, text=True, check=True).stdout
    sw = json.loads(out)["software"]
    assert sw["framework"] == "torch-compile" and sw["attention"] == "flash-attention-3"
    text = subprocess.run([sys.executable, "-m", "sim", "run", str(path)], capture_output=True,
                          text=True, check=True).stdout
    assert "software         torch-compile (attention flash-attention-3" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {topology: dgx-a100, chips: 8}\nmodel: llama3-8b\n"
                   "software: {attention: flash-attention-3}\n")
    r = subprocess.run([sys.executable, "-m", "sim", "run", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "flash-attention-3" in r.stderr
