"""software: profiles and their bad inputs (one ConfigError naming field, value and choices)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.software import ATTENTION_KERNELS, FRAMEWORKS

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
    tpu = framework in ("maxtext", "paxml")
    s = scn({"framework": framework}, "tpu-v5p" if tpu else "dgx-h100", 64 if tpu else 8)
    assert s.software is not None and s.software.framework == framework


@pytest.mark.parametrize("software, topology, match", [
    ({"framework": "jax-magic"}, "dgx-h100", r"software\.framework: unknown framework 'jax-magic'; valid: megatron-te"),
    ({"attention": "flash-attention-4"}, "dgx-h100",
     r"software\.attention: unknown attention kernel 'flash-attention-4'; valid: cudnn"),
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
    with pytest.raises(ConfigError, match=r"training\.precision: fp8 needs a framework with FP8 linear"):
        scn({"framework": "megatron"}, precision="fp8")


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
