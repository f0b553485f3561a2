"""training.optimizer_offload (MaxText optimizer_memory_host_offload): the optimizer state lives in
host memory, the update streams it through the chip, and what fits changes accordingly."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from sim.config import scenario_from_dict
from sim.errors import InfeasibleError
from sim.run import run
from sim.units import GiB
from sim.workload.activations import host_transfer_s
from sim.workload.memory import (
    check_fits,
    memory_per_chip,
    optimizer_bytes_per_param,
)
from sim.workload.transformer import build_workload

# MaxText's v6e Llama 3 70B config (llama3_70b_8192 in its Trillium benchmark file,
# maxtext_trillium_model_configs.py): per-device batch 2 at 8,192 tokens, full remat, FSDP over the
# pod, optimizer state on the host.
V6E_70B = {"cluster": {"topology": "tpu-v6e", "chips": 256}, "model": "llama3-70b",
           "training": {"seq_len": 8192, "global_batch": 512, "micro_batch": 2,
                        "remat_policy": "full"},
           "parallelism": {"tp": 1, "zero": 3}, "software": {"framework": "maxtext"}}


def scn(offload: bool, **training):
    raw = {**V6E_70B, "training": {**V6E_70B["training"], "optimizer_offload": offload, **training}}
    return scenario_from_dict(raw, "t.yaml")


def test_the_state_moves_from_hbm_to_host_memory() -> None:
    on, off = (memory_per_chip(build_workload(scn(o))) for o in (False, True))
    assert on.optimizer_B > 0 and off.optimizer_B == 0
    assert off.optimizer_host_B == pytest.approx(on.optimizer_B)
    assert off.offloaded_B == pytest.approx(on.offloaded_B + on.optimizer_B)
    assert off.total_B == pytest.approx(on.total_B - on.optimizer_B)
    # the update's moment: weights, gradients and the whole state, the activations freed
    assert off.update_peak_B == pytest.approx(
        on.weights_B + on.gradients_B + on.optimizer_B + on.reserved_B)


def test_maxtexts_v6e_70b_config_fits_only_with_its_optimizer_offload() -> None:
    """The config ran on a v6e pod with the state on the host; without it the estimate is over."""
    for offload in (False, True):
        wl = build_workload(scn(offload))
        m = memory_per_chip(wl)
        if offload:
            check_fits(wl, m)
        else:
            with pytest.raises(InfeasibleError, match=r"optimizer \d.*training\.optimizer_offload: true"):
                check_fits(wl, m)


def test_the_update_takes_at_least_the_states_trip_over_the_host_link() -> None:
    s_on, s_off = scn(False, micro_batch=1, global_batch=256), scn(True, micro_batch=1, global_batch=256)
    on, off = run(s_on).step, run(s_off).step
    wl = build_workload(s_off)
    state_B = memory_per_chip(wl).optimizer_host_B
    per_param = optimizer_bytes_per_param("fp32", True)
    assert state_B / per_param > 1e8                     # a real shard: ~0.27 B parameters
    trip = host_transfer_s(s_off, state_B)
    assert trip == pytest.approx(state_B / s_off.cluster.topology.pcie_Bps, rel=1e-3)
    assert off.breakdown_s["optimizer"] == pytest.approx(max(trip, on.breakdown_s["optimizer"]))
    assert off.breakdown_s["optimizer"] > on.breakdown_s["optimizer"]   # PCIe, not HBM, bounds it


def test_an_update_peak_over_the_chip_is_refused_in_one_line() -> None:
    """A 70B model on 8 H100 under MaxText without sharding: the state fits on the host, not back
    on the chip."""
    raw = {"cluster": {"topology": "dgx-h100", "chips": 8}, "model": "llama3-70b",
           "training": {"seq_len": 1024, "global_batch": 8, "recompute": "full",
                        "optimizer_offload": True},
           "parallelism": {"tp": 8, "zero": 0}, "software": {"framework": "maxtext"}}
    wl = build_workload(scenario_from_dict(raw, "t.yaml"))
    m = memory_per_chip(wl)
    assert m.total_B < 79 * GiB < m.update_peak_B
    with pytest.raises(InfeasibleError, match=r"the optimizer update brings its .* GiB of host state"):
        check_fits(wl, m)


def test_a_chip_without_host_memory_is_one_clear_line(tmp_path) -> None:
    raw = {**V6E_70B, "cluster": {"topology": "tpu-v4", "chips": 256},
           "training": {**V6E_70B["training"], "optimizer_offload": True}}
    path = tmp_path / "v4.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = subprocess.run([sys.executable, "-m", "sim", "run", str(path)], capture_output=True,
                         text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "training.optimizer_offload: true keeps the optimizer state in host" \
        " memory, but the catalogue has no host memory for TPU-v4; valid here: false" in lines[0]


def test_a_stack_without_the_mode_is_one_clear_line() -> None:
    from sim.errors import ConfigError

    raw = {**V6E_70B, "cluster": {"topology": "dgx-h100", "chips": 64},
           "training": {**V6E_70B["training"], "optimizer_offload": True},
           "software": {"framework": "megatron-te"}}
    with pytest.raises(ConfigError, match=r"training\.optimizer_offload: true keeps the optimizer "
                       r"state on the host \(MaxText's optimizer_memory_host_offload\); software\."
                       r"framework megatron-te has no such mode; valid: false, or software\."
                       r"framework maxtext"):
        scenario_from_dict(raw, "t.yaml")


def test_host_state_beyond_the_host_says_what_would_shard_it() -> None:
    """Unsharded (zero 0), a 70B model's state outgrows a v6e host: the refusal names the state
    and suggests sharding it, or keeping it on the chip."""
    s = scenario_from_dict({**V6E_70B, "training": {**V6E_70B["training"], "optimizer_offload": True},
                            "parallelism": {"tp": 1, "zero": 0}}, "t.yaml")
    wl = build_workload(s)
    with pytest.raises(InfeasibleError, match=r"needs an estimated [\d.]+ GiB of host memory per "
                       r"chip \(the optimizer state [\d.]+ GiB of it\).*try: raise parallelism\.zero "
                       r"\(now 0\); training\.optimizer_offload: false"):
        check_fits(wl, memory_per_chip(wl))


def test_the_update_peak_is_checked_on_the_stage_that_holds_the_most_state(monkeypatch) -> None:
    """With unequal stages (dense-first MoE layers, MTP) the stage holding the most state need not
    be the one whose step estimate is largest; the update's peak is that stage's."""
    from dataclasses import replace

    from sim.workload import memory as mm

    raw = {"cluster": {"topology": "tpu-v5p", "chips": 64}, "model": {"preset": "deepseek-v3",
           "layers": 8}, "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1,
                                      "remat_policy": "full", "optimizer_offload": True},
           "parallelism": {"tp": 1, "pp": 2, "ep": 8, "zero": 3}, "software": {"framework": "maxtext"}}
    wl = build_workload(scenario_from_dict(raw, "t.yaml"))
    real = mm._stage_memory(wl, 1)
    cap = wl.scenario.cluster.chip.usable_hbm_bytes
    # stage 0: the larger step estimate, little state; stage 1: less of both but its update's over
    busy = replace(real, activations_B=cap - real.total_B + real.activations_B - GiB,
                   optimizer_host_B=GiB)
    stateful = replace(real, optimizer_host_B=cap)
    assert busy.total_B > stateful.total_B and stateful.update_peak_B > cap > busy.update_peak_B
    monkeypatch.setattr(mm, "_stage_memory", lambda w, st: busy if st == 0 else stateful)
    mem = mm.memory_per_chip(wl)
    assert mem is busy
    with pytest.raises(InfeasibleError, match="the optimizer update brings its"):
        check_fits(wl, mem)
