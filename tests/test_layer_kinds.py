"""Models as stacks of layer kinds (issue 28): presets against their published sizes, the kinds
each preset's layers are, their FLOPs, parameters, activations and work, the expert dispatch and
its overlap, and the one-line refusals of a model that cannot be."""

from __future__ import annotations

import contextlib
import io

import pytest

from sim.cli import main
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.models import PRESETS, ModelSpec
from sim.workload.memory import memory_per_chip
from sim.workload.ops import Comm
from sim.workload.routing import destinations
from sim.workload.transformer import build_workload, model_flops_per_token


def scn(model: object, chips: int = 64, training: dict | None = None, par: dict | None = None,
        software: dict | None = None):
    raw: dict = {"cluster": {"topology": "dgx-h100", "chips": chips}, "model": model,
                 "training": {"seq_len": 4096, "global_batch": chips, **(training or {})},
                 "parallelism": par or {}}
    if software:
        raw["software"] = software
    return scenario_from_dict(raw, "t.yaml")


@pytest.mark.parametrize("name, total_B, active_B", [
    # DeepSeek-V3 report: 671B total, 37B activated (MTP module apart); Kimi K2 model card: 1.04T
    # total, 32B activated; gpt-oss model card: 116.8B total, 5.1B active; Llama 4 Maverick:
    # 400B total, 17B active; Nemotron-H-56B; Qwen3: 235B / 22B and 30.5B / 3.3B.
    ("deepseek-v3", 671, 37), ("kimi-k2", 1040, 32.6), ("gpt-oss-120b", 116.8, 5.1),
    ("llama4-maverick", 400, 17), ("nemotron-h-56b", 56.3, 56.3), ("qwen3-235b-a22b", 235, 22),
    ("qwen3-30b-a3b", 30.5, 3.3)])
def test_presets_have_their_published_sizes(name: str, total_B: float, active_B: float) -> None:
    m = PRESETS[name]
    assert m.total_params() / 1e9 == pytest.approx(total_B, rel=0.02)
    active = m.non_embedding_params(active_only=True) + m.embedding_params() / 2   # + the head
    assert active / 1e9 == pytest.approx(active_B, rel=0.1)


def test_each_preset_layer_is_its_published_kind() -> None:
    ds = PRESETS["deepseek-v3"].layer_kinds()
    assert [k.mlp for k in ds[:4]] == ["dense", "dense", "dense", "moe"] and len(ds) == 61
    l4 = PRESETS["llama4-maverick"].layer_kinds()
    assert [k.mlp for k in l4[:4]] == ["dense", "moe", "dense", "moe"]     # every 2nd layer MoE
    assert [k.window for k in l4[:4]] == [8192, 8192, 8192, None]          # every 4th global
    oss = PRESETS["gpt-oss-120b"].layer_kinds()
    assert [k.window for k in oss[:3]] == [128, None, 128]                  # layer 0 sliding
    nh = PRESETS["nemotron-h-56b"].layer_kinds()
    mixers = [k.mixer or k.mlp for k in nh]
    assert (mixers.count("mamba"), mixers.count("attention"), mixers.count("dense")) == (54, 10, 54)


def test_model_flops_are_palm_for_a_dense_stack_and_count_what_each_kind_does() -> None:
    m = PRESETS["llama3-8b"]
    palm = 6 * m.non_embedding_params(True) + 12 * m.layers * m.heads * m.head_dim * 8192
    assert model_flops_per_token(m, 8192) == palm
    # a sliding window counts its keys, not the sequence
    oss = PRESETS["gpt-oss-120b"]
    full = ModelSpec(**{**{f: getattr(oss, f) for f in oss.__dataclass_fields__},
                        "attention": type(oss.attention)(sinks=True)})
    assert model_flops_per_token(oss, 8192) < model_flops_per_token(full, 8192)
    # MTP adds its module's work
    ds = PRESETS["deepseek-v3"]
    assert model_flops_per_token(ds, 4096) > 6 * ds.non_embedding_params(True)


def test_stage_mix_weights_and_mtp_ride_on_the_last_stage() -> None:
    s = scn("deepseek-v3", chips=256, training={"recompute": "full"},
            par={"pp": 16, "ep": 16, "first_stage_layers": 1})
    wl = build_workload(s)
    first = wl.stage_mix(0)
    assert [(lw.kind, w) for lw, w in first] == [("attention+dense", 1.0)]
    last = wl.stage_mix(15)
    assert sum(w for _, w in last) == pytest.approx(5 / 4)       # 4 layers + 1 MTP module
    assert wl.stage_params(15) > wl.stage_params(1)
    assert any(it.name == "mtp-head" for it in wl.last_forward)


def test_dispatchers_move_what_they_should() -> None:
    def ep_bytes(dispatcher: str) -> int:
        s = scn("qwen3-30b-a3b", chips=16, par={"ep": 16}, software={"moe_dispatcher": dispatcher})
        wl = build_workload(s)
        return sum(c.size_bytes for c in wl.layer.forward if isinstance(c, Comm) and c.group == "ep")
    a2a, deepep, ag = ep_bytes("alltoall"), ep_bytes("deepep"), ep_bytes("allgather")
    # one copy per other node a token reaches (sim.workload.routing), spread over the
    # 8 of the 16 ranks off the node, in BF16 as Megatron sends it
    other_nodes = destinations(128, 8, 16, 8).domains
    assert 0.9 < other_nodes < 1.0                 # top-8 of 128 nearly always reaches both
    assert deepep == pytest.approx(a2a * other_nodes * (16 / 8) / 8, rel=1e-6)
    assert ag > a2a                      # every token to every rank of the group


def test_ep_overlap_hides_dispatch_but_not_for_free() -> None:
    from sim.run import run
    base = {"ep": 16}
    four = dict(training={"global_batch": 64})               # 4 micro-batches a rank
    on = run(scn("qwen3-30b-a3b", chips=16, par=base, **four)).step
    off = run(scn("qwen3-30b-a3b", chips=16, par=base, software={"ep_overlap": False}, **four)).step
    assert on.step_time_s < off.step_time_s
    # one micro-batch: nothing to overlap with
    one = dict(training={"global_batch": 16})                # one micro-batch a rank
    on1 = run(scn("qwen3-30b-a3b", chips=16, par=base, **one)).step
    off1 = run(scn("qwen3-30b-a3b", chips=16, par=base, software={"ep_overlap": False}, **one)).step
    assert on1.step_time_s == pytest.approx(off1.step_time_s)


def test_ep_overlap_charges_the_measured_slowdown() -> None:
    """Each hidden second of EP transfer costs the compute beside it the profile's measured
    stretch (cal.EP_OVERLAP_SLOWDOWN: 2.359 s of kernel time for 3.959 s overlapped), where
    that exceeds the transfers' share of SMs; what finds no compute to hide behind stays."""
    from sim import calibration as cal
    from sim.engine import Segment
    from sim.stages import _ep_overlap
    assert cal.EP_OVERLAP_SLOWDOWN == pytest.approx(2.359 / 3.959, rel=1e-3)
    fwd = (Segment("compute", 1.0), Segment("ep", 0.3, "ep"))
    bwd = (Segment("compute", 0.2), Segment("ep", 0.5, "ep"))
    f, b = _ep_overlap(fwd, bwd, 24 / 132)
    # the forward's 0.3 s hides wholly behind the backward's 0.2 s? no: 0.1 s stays exposed
    assert sum(x.seconds for x in f if x.group == "ep") == pytest.approx(0.1)
    assert f[-1] == Segment("compute", 0.2 * cal.EP_OVERLAP_SLOWDOWN)
    assert sum(x.seconds for x in b if x.group == "ep") == pytest.approx(0.0)
    assert b[-1] == Segment("compute", 0.5 * cal.EP_OVERLAP_SLOWDOWN)
    # a dispatcher holding most SMs costs its SM share instead
    f, _ = _ep_overlap(fwd, bwd, 0.5)
    assert f[-1].seconds == pytest.approx(0.2)


def test_hybrid_and_mla_memory_counts_their_tensors() -> None:
    nh = memory_per_chip(build_workload(scn("nemotron-h-56b", par={"tp": 8, "pp": 2})))
    assert nh.activations_B > 0 and nh.weights_B > 0
    ds = build_workload(scn("deepseek-v3", chips=256, training={"recompute": "full"},
                            par={"pp": 16, "ep": 16, "first_stage_layers": 1}))
    assert memory_per_chip(ds).total_B > 0


def _bad(model: object, **kw: object) -> str:
    with pytest.raises(ConfigError) as e:
        scn(model, **kw)                                        # type: ignore[arg-type]
    msg = str(e.value)
    assert msg.startswith("t.yaml") and "\n" not in msg
    return msg


def test_bad_models_are_one_line_each() -> None:
    assert "top_k: 9 exceeds experts = 8" in _bad({"preset": "mixtral-8x7b",
                                                   "moe": {"experts": 8, "top_k": 9}})
    assert "model.attention.window: 8192 is longer than training.seq_len = 4096" in _bad(
        {"preset": "llama3-8b", "attention": {"window": 8192}})
    assert "model.mamba.state: must be >= 1, got 0" in _bad({"preset": "nemotron-h-56b",
                                                             "mamba": {"state": 0}})
    assert "layer_pattern: 3 characters but model.layers = 32" in _bad(
        {"preset": "llama3-8b", "layer_pattern": "M*-"})
    assert "layer_pattern" in _bad({"preset": "llama3-8b", "layer_pattern": "Q" * 32})
    with pytest.raises(ConfigError, match="parallelism.ep: 3 does not divide model.moe.experts = 8"):
        scn("mixtral-8x7b", chips=24, par={"ep": 3}).parallelism.checked()


def test_a_bad_model_exits_2_from_the_cli(tmp_path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("cluster: {topology: dgx-h100, chips: 8}\n"
                 "model: {preset: qwen3-30b-a3b, moe: {top_k: 200}}\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", str(f)])
    assert code == 2 and err.getvalue().count("\n") == 1 and "top_k: 200 exceeds" in err.getvalue()


def test_a_preset_window_beyond_the_sequence_is_global() -> None:
    s = scn("llama4-maverick", chips=64, par={"ep": 8})
    assert all(k.window is None for k in s.model.layer_kinds())      # 8192 chunks, 4096 tokens


def test_widths_the_plan_splits_must_divide() -> None:
    with pytest.raises(ConfigError, match=r"parallelism.etp: 4 does not divide the experts' "
                                          r"width 770 \(model.moe.ffn_hidden\)"):
        scn({"preset": "qwen3-30b-a3b", "moe": {"ffn_hidden": 770}},
            par={"ep": 8, "etp": 4}).parallelism.checked()
    with pytest.raises(ConfigError, match="parallelism.tp: 16 does not divide model.mamba.heads"):
        scn({"preset": "nemotron-3-nano", "mamba": {"heads": 72}}, chips=256,
            par={"tp": 16, "ep": 8}).parallelism.checked()
