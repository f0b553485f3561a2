"""XLA's own rematerialization (sim/workload/xla_remat.py): a JAX/XLA step whose remat policy keeps
more than the chip holds recomputes kept tensors until it fits, instead of being refused."""

from __future__ import annotations

import pytest

from sim.config import scenario_from_dict
from sim.config.remat import REMAT_TENSORS, xla_rematerialized
from sim.errors import InfeasibleError
from sim.run import run
from sim.workload.memory import check_fits, memory_per_chip
from sim.workload.transformer import build_workload
from sim.workload.xla_remat import xla_fit

# 64 layers of hidden 8192 on 64 TPU v5p chips, tensor-parallel 4 (MaxText's 64B recipe shape).
V5P = {"topology": "tpu-v5p", "chips": 64}
MODEL = {"layers": 64, "hidden": 8192, "ffn_hidden": 28672, "heads": 64, "kv_heads": 64,
         "vocab": 32000, "mlp": "swiglu"}


def scn(micro: int, policy: object = "minimal", framework: str = "maxtext", cluster=None):
    training = {"seq_len": 2048, "global_batch": 16 * micro, "micro_batch": micro,
                "precision": "bf16"}
    if policy is not None:
        training["remat_policy"] = policy
    return scenario_from_dict({"cluster": cluster or V5P, "model": MODEL, "training": training,
                               "parallelism": {"tp": 4, "zero": 3},
                               "software": {"framework": framework}}, "t.yaml")


def fit(s):
    wl = build_workload(s)
    return xla_fit(s, wl, memory_per_chip(wl))


def recomputed_flops(s) -> float:
    wl = build_workload(s)
    return sum(sum(getattr(o, "flops", 0.0) for o in wl.kinds[i].recompute) for i in wl.layer_kinds)


def test_a_step_that_fits_is_left_alone() -> None:
    s = scn(4)
    out, _, mem = fit(s)
    assert out is s and mem.total_B <= s.cluster.chip.usable_hbm_bytes


def test_xla_recomputes_the_cheapest_tensor_that_makes_the_step_fit() -> None:
    s = scn(12)                                    # minimal keeps ~78 GiB of activations here
    wl = build_workload(s)
    assert memory_per_chip(wl).total_B > s.cluster.chip.usable_hbm_bytes
    with pytest.raises(InfeasibleError):
        check_fits(wl, memory_per_chip(wl))        # the estimate alone refuses it
    out, owl, mem = fit(s)
    assert mem.total_B <= s.cluster.chip.usable_hbm_bytes
    dropped = xla_rematerialized(out.training.remat_policy_name)
    assert dropped and out.training.remat_policy_name.startswith("minimal + XLA remat: ")
    before, after = dict(s.training.remat_policy), dict(out.training.remat_policy)
    assert {t for t in REMAT_TENSORS if before[t] != after[t]} == set(dropped)
    assert all(after[t] == "remat" for t in dropped)
    # the step pays for it: more recomputation, so a longer step than the over-budget policy's
    assert recomputed_flops(out) > recomputed_flops(s)
    # and no single other kept tensor that also fits would recompute less
    added = recomputed_flops(out) - recomputed_flops(s)
    for t in REMAT_TENSORS[1:]:
        if before[t] != "device" or t in dropped:
            continue
        alt = scn(12, {**{k: v for k, v in s.training.remat_policy if v != "remat"}, t: "remat"})
        if memory_per_chip(build_workload(alt)).total_B <= s.cluster.chip.usable_hbm_bytes:
            assert recomputed_flops(alt) - recomputed_flops(s) >= added


def test_run_reports_what_xla_recomputes() -> None:
    r = run(scn(12))
    assert xla_rematerialized(r.scenario.training.remat_policy_name)
    assert r.step.memory_per_chip_GiB * 2**30 <= V5P_HBM()


def V5P_HBM() -> float:
    return scn(1).cluster.chip.usable_hbm_bytes


def test_recompute_selective_and_none_are_read_as_their_policies() -> None:
    for training in ({"recompute": "selective"}, {"recompute": "none"}):
        s = scenario_from_dict({"cluster": V5P, "model": MODEL,
                                "training": {"seq_len": 2048, "global_batch": 192,
                                             "micro_batch": 12, **training},
                                "parallelism": {"tp": 4, "zero": 3},
                                "software": {"framework": "maxtext"}}, "t.yaml")
        out, _, mem = fit(s)
        assert mem.total_B <= s.cluster.chip.usable_hbm_bytes
        assert out.training.remat_policy_name.startswith(f"recompute {training['recompute']}"
                                                         " + XLA remat: ")


def test_a_stack_without_xla_is_still_refused() -> None:
    s = scn(12, framework="megatron-te", cluster={"topology": "dgx-h100", "chips": 64})
    wl = build_workload(s)
    out, _, mem = xla_fit(s, wl, memory_per_chip(wl))
    assert out is s
    with pytest.raises(InfeasibleError, match="needs"):
        run(s)


def test_what_even_full_recomputation_cannot_fit_is_refused() -> None:
    s = scn(400)                                   # the layer inputs alone exceed the chip
    out, _, _ = fit(s)
    assert out is s
    with pytest.raises(InfeasibleError, match="needs"):
        run(s)


def test_the_attention_forward_runs_again_unless_context_is_kept() -> None:
    # MaxText names the flash kernel's residuals "context": a policy without it reruns the forward
    # kernel inside the backward, one with it (minimal_with_context) keeps them
    def attention_recompute(policy: object) -> list[str]:
        wl = build_workload(scn(4, policy))
        return [o.cls for o in wl.layer.recompute if getattr(o, "kind", "") == "attention"]

    assert attention_recompute("minimal") == ["fwd"]
    assert attention_recompute({"decoder_layer_input": "offload", "qkv_proj": "offload"}) == ["fwd"]
    assert attention_recompute("minimal_with_context") == []
    without, with_context = scn(4, "minimal"), scn(4, "minimal_with_context")
    assert run(without).step.step_time_s > run(with_context).step.step_time_s
