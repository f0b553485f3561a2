"""MaxText's token-dropping MoE moves tokens by one-hot einsums (sim/workload/blocks.py
``_einsum_routed``): matmuls of 2 S M E C FLOPs a sequence, where the GPU stacks permute."""

from __future__ import annotations

import math

import pytest

from sim.config import scenario_from_dict
from sim.run import run
from sim.workload.ops import Op
from sim.workload.transformer import build_workload

S, M, E, K, CF = 4096, 4096, 8, 2, 1.25
PDB = 4


def scn(framework="maxtext", capacity=CF, remat=None, topology="tpu-v6e", chips=64, ep=1):
    moe = {"experts": E, "top_k": K, **({"capacity_factor": capacity} if capacity else {})}
    training = {"seq_len": S, "global_batch": PDB * chips, "micro_batch": PDB}
    if remat:
        training["remat_policy"] = remat
    raw = {"cluster": {"topology": topology, "chips": chips},
           "model": {"name": "mixtral-like", "layers": 2, "hidden": M, "ffn_hidden": 14336,
                     "heads": 32, "kv_heads": 8, "vocab": 32000, "mlp": "swiglu", "moe": moe},
           "training": training, "parallelism": {"tp": 1, "ep": ep, "zero": 3},
           "software": {"framework": framework}}
    return scenario_from_dict(raw, "t.yaml")


def ops(items, name):
    return [x for x in items if isinstance(x, Op) and x.name.startswith(name)]


def test_dispatch_and_combine_are_matmuls_over_each_sequences_expert_slots() -> None:
    layer = build_workload(scn()).kinds[0]
    slots = E * int(math.ceil(S * K / E) * CF)          # MaxText generate_masks: E x C
    assert slots == 10_240
    (d,), (c,) = ops(layer.forward, "moe-dispatch"), ops(layer.forward, "moe-combine")
    assert d.flops == c.flops == 2 * S * M * slots * PDB
    assert not ops(layer.forward, "permute") and not ops(layer.forward, "unpermute")
    # each expert computes on its C padded slots of every sequence
    (up,) = ops(layer.forward, "expert-up")
    assert up.shape[0] == PDB * slots // E and up.batch == E


def test_the_dispatch_mask_takes_no_gradient_the_combine_weights_do() -> None:
    layer = build_workload(scn()).kinds[0]
    (d,) = ops(layer.backward, "moe-dispatch")
    assert d.name == "moe-dispatch-wgrad"          # the tokens' gradient: [S, M] over the slots
    assert d.shape == (S, M, 10_240)
    assert sorted(x.name for x in ops(layer.backward, "moe-combine")) == [
        "moe-combine-dgrad", "moe-combine-wgrad"]


def test_dropless_maxtext_and_the_gpu_stacks_permute() -> None:
    for s in (scn(capacity=None), scn(framework="megatron-te", topology="dgx-h100", chips=8)):
        layer = build_workload(s).kinds[0]
        assert not ops(layer.forward, "moe-dispatch") and ops(layer.forward, "permute")


def test_a_remat_policy_recomputes_the_einsums_even_when_it_keeps_every_named_tensor() -> None:
    offload = {t: "offload" for t in ("decoder_layer_input", "query_proj", "key_proj",
                                      "value_proj", "out_proj")}
    every = {t: "device" for t in ("query_proj", "key_proj", "value_proj", "context", "out_proj",
                                   "mlpwi_0", "mlpwi_1", "mlpwo")}
    names = {k: {x.name for x in build_workload(scn(remat=p)).kinds[0].recompute}
             for k, p in (("offload", offload), ("minimal", "minimal"), ("every", every))}
    assert {"moe-dispatch", "moe-combine"} <= names["offload"]
    assert {"moe-dispatch", "moe-combine"} <= names["minimal"]     # dots with batch dimensions
    assert {"moe-dispatch", "moe-combine"} <= names["every"]       # and no checkpoint name
    assert not (names["every"] - {"moe-dispatch", "moe-combine", "attention-recompute"})


def test_tensor_or_context_parallel_layouts_permute_instead() -> None:
    """The einsum path is modelled for tp = etp = cp = 1 only (blocks.py docstring)."""
    for par in ({"tp": 2, "etp": 1}, {"tp": 1, "cp": 2}):
        s = scn()
        raw = {**s.raw, "parallelism": {**s.raw["parallelism"], **par}}
        layer = build_workload(scenario_from_dict(raw, "t.yaml")).kinds[0]
        assert not ops(layer.forward, "moe-dispatch") and ops(layer.forward, "permute")


def test_a_capacity_that_leaves_no_slot_is_one_clear_line(tmp_path) -> None:
    import subprocess
    import sys

    import yaml

    s = scn(capacity=0.1)
    raw = {**s.raw, "training": {**s.raw["training"], "seq_len": 16, "global_batch": 64,
                                 "micro_batch": 1},
           "model": {**s.raw["model"], "moe": {"experts": 64, "top_k": 1, "capacity_factor": 0.1}}}
    path = tmp_path / "cf.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = subprocess.run([sys.executable, "-m", "sim", "run", str(path)], capture_output=True,
                         text=True)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "model.moe.capacity_factor: 0.1 leaves each expert 0 slots of a 16-token sequence" in line


def test_the_einsums_cost_step_time_and_expert_parallelism_moves_the_slots() -> None:
    from dataclasses import replace

    s = scn(ep=4)
    einsum = run(s).step.step_time_s
    permute = run(replace(s, software=replace(s.software, moe_capacity_einsum=False))).step.step_time_s
    assert einsum > permute
    layer = build_workload(s).kinds[0]
    (a2a,) = [x for x in layer.forward if getattr(x, "name", "") == "ep-dispatch"]
    assert a2a.size_bytes == pytest.approx(PDB * E * int(math.ceil(S * K / E) * CF) * M * 2)


def test_megablox_computes_a_partial_tile_where_each_dropless_group_starts() -> None:
    """MaxText's dropless experts on a TPU run Pallas megablox, whose grid visits up to
    m / tm + groups - 1 tiles of tm = 512 rows: one more tile for each of the local - 1 later
    groups, which start inside a tile. The token-dropping path (equal padded groups) and the GPU
    stacks' grouped GEMM do not."""
    dropless = build_workload(scn(capacity=None)).kinds[0]
    (up,) = ops(dropless.forward, "expert-up")
    copies = PDB * S * K
    assert up.shape[0] == math.ceil(copies / E) + math.ceil(512 * (E - 1) / E)
    assert up.batch == E
    gpu = build_workload(scn(capacity=None, framework="megatron-te", topology="dgx-h100",
                             chips=8)).kinds[0]
    (up_gpu,) = ops(gpu.forward, "expert-up")
    assert up_gpu.shape[0] < up.shape[0]
    # the weight gradient contracts over the padded rows too (megablox's tgmm tiles them alike)
    (wgrad,) = [x for x in dropless.backward if x.name == "expert-up-wgrad"]
    assert wgrad.shape[2] == up.shape[0]
