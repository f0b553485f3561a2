"""Training precisions (sim/precision.py): which chips and stacks run each format, what the compute
model charges for it, and what memory holds under it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.compute.model import ComputeModel
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.hardware import get_chip
from sim.precision import PRECISIONS, RECIPES, active_recipe, precisions_of
from sim.software import FRAMEWORKS, resolve_software
from sim.workload.memory import memory_per_chip
from sim.workload.transformer import Op, build_workload


def scn(precision="bf16", topology="dgx-b200", framework="megatron-te", chips=8, **training):
    return scenario_from_dict({"cluster": {"topology": topology, "chips": chips},
                               "model": "llama3-8b",
                               "training": {"precision": precision, "seq_len": 8192,
                                            "global_batch": 32, **training},
                               "parallelism": {"tp": 2},
                               "software": {"framework": framework}}, "t.yaml")


def test_the_issue_names_are_the_precisions() -> None:
    assert PRECISIONS == ("bf16", "fp8", "mxfp8", "nvfp4")


def test_each_chip_runs_what_its_tensor_cores_run() -> None:
    assert precisions_of(get_chip("A100-SXM-80GB")) == ("bf16",)
    assert precisions_of(get_chip("H100-SXM")) == ("bf16", "fp8")
    assert precisions_of(get_chip("B200")) == ("bf16", "fp8", "mxfp8", "nvfp4")
    assert precisions_of(get_chip("GB200")) == ("bf16", "fp8", "mxfp8", "nvfp4")


@pytest.mark.parametrize("precision, topology, framework, match", [
    ("mxfp8", "dgx-h100", "megatron-te",
     r"^t\.yaml: training\.precision: mxfp8 is not supported on H100-SXM \(block-scaled formats "
     r"need Blackwell tensor cores\); valid on H100-SXM: bf16, fp8$"),
    ("nvfp4", "dgx-a100", "megatron-te",
     r"training\.precision: nvfp4 is not supported on A100-SXM-80GB .*; valid on A100-SXM-80GB: bf16$"),
    ("fp16", "dgx-b200", "megatron-te",
     r"training\.precision: got 'fp16'; valid: bf16, fp8, mxfp8, nvfp4$"),
    ("nvfp4", "dgx-b200", "pytorch-fsdp",
     r"training\.precision: nvfp4 needs a framework with NVFP4 linear layers; pytorch-fsdp has "
     r"none; use bf16, or software\.framework: megatron-te$"),
    ("mxfp8", "dgx-b200", "megatron",
     r"mxfp8 needs a framework with MXFP8 linear layers; megatron has none; use bf16, or "
     r"software\.framework: megatron-te, pytorch-eager, torch-compile or pytorch-fsdp$"),
])
def test_a_format_the_chip_or_stack_cannot_run_is_one_clear_error(precision, topology, framework,
                                                                   match) -> None:
    with pytest.raises(ConfigError, match=match):
        scn(precision, topology, framework)


def test_the_command_line_refuses_it_in_one_line_with_exit_2() -> None:
    p = subprocess.run([sys.executable, "-m", "sim", "run", "scenarios/default.yaml", "--set",
                        "training.precision=nvfp4"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "valid on H100-SXM: bf16, fp8" in p.stderr


def _linear(name: str, m: int = 8192, n: int = 8192, k: int = 8192) -> Op:
    return Op(name, "gemm", 2.0 * m * n * k, 0.0, (m, n, k), "linear")


def test_lower_precisions_run_linear_gemms_faster_and_leave_the_rest_bf16() -> None:
    chip = get_chip("B200")
    times = {}
    for p in PRECISIONS:
        cm = ComputeModel(chip, p, resolve_software("megatron-te", None, chip))
        times[p] = cm.op_time_s(_linear("mlp-up")) * cm.stack_efficiency
        head = Op("lm-head", "gemm", 1.0, 0.0, (8192, 8192, 8192), "head")
        ref = ComputeModel(chip, "bf16", cm.profile)        # kernel time, the stack factor aside
        assert cm.op_time_s(head) * cm.stack_efficiency == pytest.approx(
            ref.op_time_s(head) * ref.stack_efficiency)
    assert times["nvfp4"] < times["mxfp8"] < times["bf16"]
    assert times["fp8"] < times["bf16"]
    # MXFP8 writes two block-scaled copies where per-tensor FP8 on Blackwell writes one
    assert times["fp8"] < times["mxfp8"]


def test_a_chip_without_a_faster_path_runs_bf16() -> None:
    v5p = get_chip("TPU-v5p")           # its FP8 peak equals its BF16 one
    assert active_recipe("fp8", v5p, resolve_software("maxtext", None, v5p)) is None


def test_the_wgrad_quantizes_again_only_where_the_stack_kept_the_bf16_input() -> None:
    chip = get_chip("B200")
    te = ComputeModel(chip, "mxfp8", resolve_software("megatron-te", None, chip))
    ao = ComputeModel(chip, "mxfp8", resolve_software("pytorch-fsdp", None, chip))
    wgrad = _linear("mlp-up-wgrad")
    assert te.kernels(wgrad) == 1 and ao.kernels(wgrad) == 2
    assert te.kernels(_linear("mlp-up")) == 2 and te.kernels(_linear("mlp-up-dgrad")) == 2
    fwd_te = te.op_time_s(_linear("mlp-up")) * te.stack_efficiency
    wgrad_te = te.op_time_s(wgrad) * te.stack_efficiency
    gemm = te.gemm_s(8192, 8192, 8192, dtype="mxfp8")
    assert wgrad_te == pytest.approx(gemm)
    # the forward's quantize kernel: bf16 read + two 1 + 1/32 byte copies, at the fitted rate
    assert fwd_te - gemm == pytest.approx(8192 * 8192 * RECIPES["mxfp8"].quantize_B(chip)
                                          / (chip.hbm_Bps * 0.666), rel=1e-3)


def test_a_quantizing_stack_keeps_quantized_inputs_and_caches_quantized_weights() -> None:
    bf16 = memory_per_chip(build_workload(scn("bf16")))
    wl = build_workload(scn("mxfp8"))
    te = memory_per_chip(wl)
    ao = memory_per_chip(build_workload(scn("mxfp8", framework="pytorch-fsdp")))
    ao_bf16 = memory_per_chip(build_workload(scn("bf16", framework="pytorch-fsdp")))
    assert te.activations_B < bf16.activations_B
    assert te.weights_quantized_B > 0 and bf16.weights_quantized_B == 0
    # two block-scaled copies (1 + 1/32 bytes each) of every layer weight, next to the bf16 ones
    layers = wl.scenario.model.layers
    assert te.weights_quantized_B == pytest.approx(layers * wl.layer.params * 2 * (1 + 1 / 32))
    assert ao.activations_B == ao_bf16.activations_B and ao.weights_quantized_B == 0
    assert "weights_quantized" in te.as_GiB()
    # Megatron holds FP8 / MXFP8 weights as FP8 parameters (fp8_param_gather): no BF16 copy of the
    # layers' weights; NVFP4 keeps its BF16 weights beside the quantized copies
    assert te.weights_B < bf16.weights_B / 2
    assert memory_per_chip(build_workload(scn("nvfp4"))).weights_B == bf16.weights_B
    assert ao.weights_B == ao_bf16.weights_B


def test_hopper_fp8_keeps_a_transposed_copy_blackwell_does_not() -> None:
    assert RECIPES["fp8"].copies(get_chip("H100-SXM")) == 2
    assert RECIPES["fp8"].copies(get_chip("B200")) == 1


def test_every_format_a_stack_names_is_a_known_one() -> None:
    for p in FRAMEWORKS.values():
        assert set(p.low_precision) <= set(RECIPES)
