"""The kernel model (sim.compute) and the software profiles it runs under: mechanisms, each
checked against a closed form or a property a real stack has, and the compute suite's budgets."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sim import calibration as cal
from sim.compute.kernels import AttentionShape, attention_flops, gemm_time_s
from sim.compute.model import stack_efficiency_of
from sim.config import scenario_from_dict
from sim.hardware import CATALOGUE
from sim.run import run
from sim.stages import compute_model
from sim.validate import check_compute_budgets, load_budgets, validate_compute
from sim.workload.transformer import Comm, Op, build_workload

VALIDATION = Path(__file__).resolve().parent.parent / "validation"
H100 = CATALOGUE["H100-SXM"]


def _gemm(m: int, n: int, k: int, batch: int = 1) -> float:
    return gemm_time_s(m, n, k, 2.0, H100.bf16_flops, H100.sms, H100.hbm_Bps,
                       cal.GEMM_HOPPER["bf16"], batch)


def test_a_partial_last_wave_costs_a_whole_wave() -> None:
    # 132 tiles of 128x256 fill one wave of 132 SMs; one row of tiles more (0.8% more FLOPs)
    # needs a second, mostly idle wave (smaller tiles recover part of it); two full waves take
    # twice one.
    one_wave = _gemm(128 * 132, 256, 8192)
    assert _gemm(128 * 133, 256, 8192) > 1.3 * one_wave
    assert _gemm(128 * 264, 256, 8192) == pytest.approx(2 * one_wave, rel=0.01)


def test_large_gemm_runs_at_the_fitted_sustained_rate() -> None:
    m = n = k = 16384
    rate = 2 * m * n * k / _gemm(m, n, k)
    e = cal.GEMM_HOPPER["bf16"].efficiency
    assert 0.95 * e < rate / H100.bf16_flops < e      # the per-tile prologue/epilogue costs a little


def test_grouped_gemm_is_its_experts_in_one_kernel() -> None:
    # 16 experts of 256 tokens fill tiles no better than one expert of 256 tokens does.
    assert _gemm(256, 4096, 7168, batch=16) > 16 * _gemm(256 * 16, 4096, 7168) / 16 * 0.99


def test_causal_attention_does_half_the_matmul_work() -> None:
    s = AttentionShape(2, 32, 8, 4096, 4096, 128, causal=True)
    full = AttentionShape(2, 32, 8, 4096, 4096, 128, causal=False)
    assert attention_flops(s, False) == 4 * 2 * 32 * 4096**2 * 128 / 2
    assert attention_flops(full, False) == 2 * attention_flops(s, False)
    assert attention_flops(s, True) == 2.5 * attention_flops(s, False)


def scn(software=None, precision="bf16", par=None, cluster=None, model="llama3-8b", seq=8192):
    raw = {"cluster": cluster or {"topology": "dgx-h100", "chips": 8}, "model": model,
           "training": {"seq_len": seq, "global_batch": 8, "precision": precision},
           "parallelism": par or {"tp": 8}}
    if software is not None:
        raw["software"] = software
    return scenario_from_dict(raw, "t.yaml")


def _layer_s(s, kinds=("gemm", "attention", "memory")) -> float:
    cm = compute_model(s, stack_efficiency={})        # the kernel tables' rates, no stack factor
    wl = build_workload(s)
    return sum(cm.op_time_s(o) for o in wl.layer.forward + wl.layer.backward
               if isinstance(o, Op) and o.kind in kinds)


def test_cudnn_attention_beats_flash_attention_2_on_hopper_and_fa3_beats_both() -> None:
    t = {a: _layer_s(scn({"attention": a}), ("attention",))
         for a in ("cudnn", "flash-attention-2", "flash-attention-3", "xla")}
    assert t["flash-attention-3"] < t["cudnn"] < t["flash-attention-2"] < t["xla"]
    # cuDNN reaches roughly twice FlashAttention-2's rate on H100 (the attention table).
    assert 1.5 < t["flash-attention-2"] / t["cudnn"] < 2.5


def test_fp8_runs_only_the_linear_layers_in_fp8() -> None:
    bf16, fp8 = scn(precision="bf16"), scn(precision="fp8")
    assert _layer_s(fp8, ("attention",)) == _layer_s(bf16, ("attention",))
    cm8, cm16 = compute_model(fp8, {}), compute_model(bf16, {})
    head = build_workload(fp8).last_forward[1]
    assert head.cls == "head" and cm8.op_time_s(head) == cm16.op_time_s(head)
    gemm_speedup = _layer_s(bf16, ("gemm",)) / _layer_s(fp8, ("gemm",))
    layer_speedup = _layer_s(bf16) / _layer_s(fp8)
    assert 1.3 < gemm_speedup < 2.0
    assert 1.0 < layer_speedup < gemm_speedup


def test_tp_comm_overlap_hides_sequence_parallel_traffic_behind_gemms() -> None:
    te = run(scn({"framework": "megatron-te"})).step
    eager = run(scn({"framework": "pytorch-eager"})).step
    assert te.breakdown_s["exposed_comm"] < 0.5 * eager.breakdown_s["exposed_comm"]
    assert te.software["tp_comm_overlap"] and not eager.software["tp_comm_overlap"]


def test_maxtext_hides_tensor_parallel_collectives_only_in_the_backward() -> None:
    """XLA without collective matmul (MaxText's profile: ``tp_overlap_forward`` False): a TP
    all-gather or reduce-scatter in the forward or its recomputation waits as long as it takes
    alone; the backward's hide behind the layer's weight-gradient GEMMs, which none of them feeds
    (one pool of their time), where a stack that overlaps everywhere also hides the forward's."""
    import dataclasses

    from sim.collectives import CollectiveModel
    from sim.stages import plan_stages
    from sim.topology import build_topology

    def tpu(recompute: str):
        return scenario_from_dict({"cluster": {"topology": "tpu-v5e", "chips": 64},
                                   "model": {"preset": "llama3-8b", "layers": 2},
                                   "training": {"seq_len": 2048, "global_batch": 16, "micro_batch": 1,
                                                "recompute": recompute},
                                   "parallelism": {"tp": 4, "zero": 3}}, "t.yaml")

    s = tpu("none")
    assert s.software.framework == "maxtext" and s.software.tp_comm_overlap
    assert not s.software.tp_overlap_forward
    net = CollectiveModel(build_topology(s.cluster))
    cm = compute_model(s, None)

    def tp_s(scn, passes: str) -> float:
        plan = plan_stages(build_workload(scn), net, traffic=False)[0]
        return sum(x.seconds for x in getattr(plan, passes) if x.group == "tp")

    def alone(items) -> float:
        return sum(net.time(c.op, c.size_bytes, [0, 1, 2, 3]).time_s for c in items
                   if isinstance(c, Comm) and c.group == "tp")

    layer = build_workload(s).layer
    wgrad = sum(cm.op_time_s(o) for o in layer.backward if isinstance(o, Op) and o.name.endswith("-wgrad"))
    assert alone(layer.forward) > 0 and wgrad > 0
    assert tp_s(s, "layer_fwd") == pytest.approx(alone(layer.forward), rel=1e-9)
    assert tp_s(s, "layer_bwd") == pytest.approx(max(0.0, alone(layer.backward) - wgrad), abs=1e-12)
    both = dataclasses.replace(s, software=dataclasses.replace(s.software, tp_overlap_forward=True))
    assert tp_s(both, "layer_fwd") < 0.5 * alone(layer.forward)
    # with recomputation: the recomputed forward's collectives wait too; the backward's still hide
    full = tpu("full")
    rec = build_workload(full).layer
    assert alone(rec.recompute) > 0
    assert tp_s(full, "layer_bwd") == pytest.approx(
        alone(rec.recompute) + max(0.0, alone(rec.backward) - wgrad), rel=1e-9)
    assert run(s).step.software["tp_comm_overlap_passes"] == "backward"
    assert "tp_comm_overlap_passes" not in run(scn({"framework": "megatron-te"})).step.software


def test_fused_elementwise_ops_are_faster_than_eager_ones() -> None:
    assert (_layer_s(scn({"framework": "torch-compile"}), ("memory",))
            < _layer_s(scn({"framework": "pytorch-eager"}), ("memory",)))


def test_expert_all_to_all_carries_the_tensor_parallel_share_of_tokens() -> None:
    def a2a(tp: int) -> int:
        s = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 64},
                                "model": {"preset": "mixtral-8x7b", "moe": {"load_imbalance": 1.0}},
                                "parallelism": {"tp": tp, "ep": 8 // tp},
                                "training": {"seq_len": 4096, "global_batch": 64}}, "t.yaml")
        return next(c.size_bytes for c in build_workload(s).layer.forward
                    if isinstance(c, Comm) and c.name == "ep-dispatch")
    # 4096 tokens x top-2 x hidden 4096 x 2 bytes, split over tp ranks.
    assert a2a(1) == 4096 * 2 * 4096 * 2
    assert a2a(2) == a2a(1) // 2


def test_defaults_are_megatron_te_on_gpus_and_maxtext_on_tpus() -> None:
    gpu = run(scn()).step
    assert gpu.software["framework"] == "megatron-te" and gpu.software["attention"] == "cudnn"
    a100 = scn(cluster={"topology": "dgx-a100", "chips": 8})
    assert compute_model(a100).profile.attention == "flash-attention-2"
    tpu = scn(cluster={"topology": "tpu-v5p", "chips": 64}, par={"tp": 8})
    assert compute_model(tpu).profile.framework == "maxtext"
    assert compute_model(tpu).profile.attention == "splash"


def test_stack_efficiency_applies_only_to_its_group() -> None:
    fp8 = compute_model(scn(precision="fp8"))
    assert fp8.stack_efficiency == cal.STACK_EFFICIENCY[("megatron-te", "H100", "fp8")]
    bf16 = compute_model(scn(precision="bf16")).stack_efficiency   # no group: borrows its stack's
    assert bf16 == cal.STACK_EFFICIENCY[("megatron-te", "H100", "fp8")]
    assert math.isfinite(fp8.stack_efficiency)


def test_an_uncalibrated_group_borrows_its_stack_then_its_chip() -> None:
    table = {("a", "H100", "fp8"): 0.8, ("b", "H100", "bf16"): 0.9, ("c", "H100", "bf16"): 1.0,
             ("a", "A100", "bf16"): 0.7}
    assert stack_efficiency_of(table, ("b", "H100", "bf16")) == 0.9          # its own fit
    assert stack_efficiency_of(table, ("a", "H100", "bf16")) == 0.8          # same stack, same chip
    assert stack_efficiency_of(table, ("d", "H100", "bf16")) == pytest.approx(0.9)   # chip median
    assert stack_efficiency_of(table, ("d", "A100", "fp8")) == 0.7
    assert stack_efficiency_of(table, ("a", "tpu-v4", "bf16")) == 1.0        # nothing on that chip


def test_a_chip_new_to_the_catalogue_borrows_its_predecessors_groups() -> None:
    """A family with no fitted group takes its predecessor's factors
    (sim.calibration.STACK_PREDECESSOR: B200 -> H100, B300 -> B200 -> H100, TPU7x -> v5p), stack
    by stack, never 1.0 while those exist."""
    table = {("a", "H100", "fp8"): 0.8, ("b", "H100", "bf16"): 0.9, ("m", "tpu-v5p", "bf16"): 0.85}
    assert cal.STACK_PREDECESSOR == {"B200": "H100", "B300": "B200", "tpu7x": "tpu-v5p"}
    assert stack_efficiency_of(table, ("b", "B200", "bf16")) == 0.9          # its stack on H100
    assert stack_efficiency_of(table, ("a", "B200", "bf16")) == 0.8          # same stack, other dtype
    assert stack_efficiency_of(table, ("z", "B200", "bf16")) == pytest.approx(0.85)   # H100 median
    assert stack_efficiency_of(table, ("m", "tpu7x", "bf16")) == 0.85
    assert stack_efficiency_of(table, ("b", "B300", "bf16")) == 0.9          # through B200 to H100
    table[("b", "B200", "bf16")] = 0.95                                       # a fit of its own wins
    assert stack_efficiency_of(table, ("b", "B200", "bf16")) == 0.95


def test_compute_suite_within_budget_on_the_h200_tables() -> None:
    rows, summaries = validate_compute(VALIDATION / "compute")
    assert check_compute_budgets(summaries, load_budgets(VALIDATION / "budgets.toml")["compute"]) == []
    assert {r.gpu for r in rows} == {"h100-sxm-80gb", "h200-sxm-141gb", "b200", "gb200", "gb300"}
    assert {r.split for r in rows if r.gpu == "h200-sxm-141gb"} == {"test"}


def test_bad_kernel_tables_are_one_clear_error(tmp_path: Path) -> None:
    from sim.errors import ConfigError

    gpu = tmp_path / "h200-sxm-141gb"
    gpu.mkdir()
    (gpu / "gemm_square.csv").write_text("dtype,m,n,k,time_us,tflops\nfp16,1024,1024,1024,20,1\n")
    with pytest.raises(ConfigError, match=r"gemm_square.csv:2: column 'dtype': got 'fp16'; valid: bf16, fp8"):
        validate_compute(tmp_path)
    (gpu / "gemm_square.csv").write_text("dtype,m,n,k,time_us,tflops\nbf16,1024,1024,1024,0,1\n")
    with pytest.raises(ConfigError, match=r"column 'time_us': expected a finite number > 0, got 0"):
        validate_compute(tmp_path)
    (gpu / "gemm_square.csv").unlink()
    with pytest.raises(ConfigError, match=r"no kernel table in it"):
        validate_compute(tmp_path)


def test_an_unfitted_precision_borrows_the_nearest_format_of_its_stack() -> None:
    """BF16 and MXFP8 take the FP8 group of their stack and chip before the NVFP4 one (element
    width 16/8 vs 4 bits); ties take the median; another stack's groups only when its own has none."""
    table = {("a", "B200", "fp8"): 0.6, ("a", "B200", "nvfp4"): 0.75, ("b", "B200", "bf16"): 0.9}
    assert stack_efficiency_of(table, ("a", "B200", "bf16")) == 0.6
    assert stack_efficiency_of(table, ("a", "B200", "mxfp8")) == 0.6
    assert stack_efficiency_of(table, ("b", "B200", "nvfp4")) == 0.9          # its only group
    assert stack_efficiency_of(table, ("c", "B200", "bf16")) == 0.75          # every B200 group
