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
    assert PRECISIONS == ("bf16", "fp8", "mxfp8", "nvfp4", "int8")     # issues 27 and 31


def test_each_chip_runs_what_its_tensor_cores_run() -> None:
    assert precisions_of(get_chip("A100-SXM-80GB")) == ("bf16",)
    assert precisions_of(get_chip("H100-SXM")) == ("bf16", "fp8")
    assert precisions_of(get_chip("B200")) == ("bf16", "fp8", "mxfp8", "nvfp4")
    assert precisions_of(get_chip("GB200")) == ("bf16", "fp8", "mxfp8", "nvfp4")
    assert precisions_of(get_chip("TPU-v6e")) == ("bf16", "int8", "fp8")
    assert precisions_of(get_chip("TPU-v4")) == ("bf16", "int8")


@pytest.mark.parametrize("precision, topology, framework, match", [
    ("mxfp8", "dgx-h100", "megatron-te",
     r"^t\.yaml: training\.precision: mxfp8 is not supported on H100-SXM \(block-scaled formats "
     r"need Blackwell tensor cores\); valid on H100-SXM: bf16, fp8$"),
    ("nvfp4", "dgx-a100", "megatron-te",
     r"training\.precision: nvfp4 is not supported on A100-SXM-80GB .*; valid on A100-SXM-80GB: bf16$"),
    ("fp16", "dgx-b200", "megatron-te",
     r"training\.precision: got 'fp16'; valid: bf16, fp8, mxfp8, nvfp4, int8$"),
    ("int8", "dgx-h100", "megatron-te",
     r"training\.precision: int8 is not supported on H100-SXM \(int8 training is a TPU path "
     r"\(MaxText's int8 quantization\)\); valid on H100-SXM: bf16, fp8$"),
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


def _tpu(precision: str, chip: str) -> ComputeModel:
    c = get_chip(chip)
    return ComputeModel(c, precision, resolve_software("maxtext", None, c))


def test_int8_runs_tpu_linear_gemms_at_the_int8_peak() -> None:
    """v5e/v5p/v6e run int8 matmuls at twice their BF16 rate (GCP); v4 at the same rate, so an
    int8 run there is a BF16 run; attention and the head stay BF16."""
    for chip in ("TPU-v5e", "TPU-v6e"):
        bf16, int8 = _tpu("bf16", chip), _tpu("int8", chip)
        assert int8.recipe is not None and int8.recipe.name == "int8"
        gemm = _linear("mlp-up", 65536, 8192, 8192)
        ratio = int8.op_time_s(gemm) / bf16.op_time_s(gemm)
        assert 0.5 < ratio < 0.65                    # half the matmul, plus the quantize pass
        head = Op("lm-head", "gemm", 1.0, 0.0, (65536, 8192, 8192), "head")
        assert int8.op_time_s(head) == pytest.approx(bf16.op_time_s(head))
    assert _tpu("int8", "TPU-v4").recipe is None
    s = scn("int8", "tpu-v6e", "maxtext", chips=16)
    assert s.training.precision == "int8" and s.recipe is not None


def test_an_int8_dot_quantizes_both_operands_every_time_it_runs() -> None:
    """Dynamic-range int8 (MaxText/AQT) scales each operand along the dot's contraction axis, so
    every pass quantizes the weight again (forward, dgrad) and the wgrad both its inputs: 3 bytes
    (bf16 read, int8 write) per element of A (m x k) and B (k x n), at the TPU's copy rate."""
    from sim import calibration as cal
    chip = get_chip("TPU-v6e")
    int8 = _tpu("int8", "TPU-v6e")
    m, n, k = 4096, 49152, 12288        # FSDP: a few thousand tokens against a whole weight
    for name in ("mlp-up", "mlp-up-dgrad", "mlp-up-wgrad"):
        t = int8.op_time_s(_linear(name, m, n, k))
        quantize = 3.0 * (m * k + k * n) / (chip.hbm_Bps * cal.TPU_MEMORY_FRACTION)
        assert t == pytest.approx(int8.gemm_s(m, n, k, dtype="int8") + quantize, rel=1e-6)
    # the weight (k x n) is most of it here: 12x the tokens' operand
    assert k * n > 10 * m * k
    # a caching recipe (TE FP8) charges the first operand only
    te = ComputeModel(get_chip("H100-SXM"), "fp8", resolve_software("megatron-te", None,
                                                                      get_chip("H100-SXM")))
    assert not te.recipe.per_dot and int8.recipe.per_dot


def test_a_v6e_mxu_is_half_filled_by_a_128_wide_head() -> None:
    """v6e's 256 x 256 MXU (GCP): a matmul pads its contraction and output width to 256, so a
    head dimension of 128 fills half of it; v5e's 128 x 128 MXU is full either way. At one model
    width, head_dim 256 halves the heads: the same matmul FLOPs over half the score elements, so
    the splash kernel's vector work (which goes with the score elements) halves."""
    from sim import calibration as cal
    from sim.compute.kernels import AttentionShape, mxu_fill
    assert mxu_fill(128, 4096, 256) == 0.5
    assert mxu_fill(300, 256, 256) == pytest.approx(300 / 512)
    assert mxu_fill(128, 128, 128) == mxu_fill(77, 5, None) == 1.0

    def per_flop(chip: str, d: int) -> float:
        cm = _tpu("bf16", chip)
        heads = 4096 // d
        return cm.attention_s(AttentionShape(4, heads, heads, 8192, 8192, d, True), "fwd")
    vec = 1.0 / cal.TPU_SPLASH_VS_GEMM - 1.0          # the vector work against the matmuls (v5e)
    # v6e: (2 + 4 vec) against (1 + 4 vec / 2): the MXU's fill and the score elements both halve
    assert per_flop("TPU-v6e", 128) / per_flop("TPU-v6e", 256) == pytest.approx(2.0, rel=0.01)
    assert per_flop("TPU-v5e", 128) / per_flop("TPU-v5e", 256) == pytest.approx(
        (1.0 + vec) / (1.0 + vec / 2), rel=0.01)


def test_splash_vector_work_runs_on_lanes_the_256_wide_mxu_did_not_multiply() -> None:
    """Splash attention at head_dim 128 runs at TPU_SPLASH_VS_GEMM of the GEMM curve on the
    128-wide MXU generations (v4, v5e, v5p: the model the TPU fits were made with); from v6e on,
    its matmuls half-fill the 256-wide MXU and its vector work, on the same 8 x 128 lanes a
    TensorCore always had, takes 4x as long against the MXU's rate."""
    from sim import calibration as cal
    from sim.compute.kernels import AttentionShape, attention_flops, gemm_curve_time_s
    shape = AttentionShape(4, 32, 8, 8192, 8192, 128, True)
    vec = 1.0 / cal.TPU_SPLASH_VS_GEMM - 1.0

    def curve(f: float, peak: float) -> float:
        return gemm_curve_time_s(f, 0.0, peak, cal.TPU_GEMM_E_MAX, cal.TPU_GEMM_T_RAMP_S, 1.0)
    for chip, wide in (("TPU-v5p", False), ("TPU-v6e", True), ("TPU7x", True)):
        cm = _tpu("bf16", chip)
        for passname in ("fwd", "bwd"):
            flops = attention_flops(shape, passname == "bwd")
            want = (curve(2 * flops, cm.bf16_peak) + 4 * vec * curve(flops, cm.bf16_peak) if wide
                    else curve(flops, cm.bf16_peak) / cal.TPU_SPLASH_VS_GEMM)
            assert cm.attention_s(shape, passname) == pytest.approx(want, rel=1e-9)

