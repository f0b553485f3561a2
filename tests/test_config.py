"""Scenario loading: presets, defaults, derived fields, and every bad-input message."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.config import data_parallel, load_scenario, scenario_from_dict
from sim.errors import ConfigError
from sim.models import PRESETS

REPO = Path(__file__).resolve().parent.parent


def scn(**sections):
    raw = {"cluster": {"topology": "dgx-h100", "chips": 64}, "model": "llama3-8b"}
    raw.update(sections)
    return scenario_from_dict(raw, "test.yaml")


def bad(match: str, **sections) -> str:
    with pytest.raises(ConfigError, match=match) as e:
        scn(**sections)
    msg = str(e.value)
    assert msg.startswith("test.yaml"), msg      # every message names the file
    return msg


def test_every_bundled_scenario_loads() -> None:
    files = sorted((REPO / "scenarios").glob("*.yaml"))
    assert files
    for f in files:
        assert load_scenario(f).cluster.chips > 0


def test_default_scenario_fields() -> None:
    s = load_scenario(REPO / "scenarios" / "default.yaml")
    assert s.cluster.topology.name == "dgx-h100" and s.cluster.chips == 8
    assert s.model == PRESETS["llama3-8b"]
    assert s.parallelism.dp == 4 and s.parallelism.tp == 2


def test_defaults_and_derived_dp() -> None:
    s = scn(parallelism={"tp": 8, "pp": 2})
    assert s.parallelism.dp == 4 == data_parallel(s.cluster.chips, 8, 2, 1)
    assert s.training.precision == "bf16" and s.training.recompute == "selective"
    assert s.cost.usd_per_chip_hour == pytest.approx(55.04 / 8)   # catalogue price
    assert s.stragglers is None and s.failures is None


@pytest.mark.parametrize(
    "name, total_B",
    [("llama3-8b", 8.03), ("llama3-70b", 70.6), ("llama3-405b", 405.9), ("gpt3-175b", 175.2),
     ("mixtral-8x7b", 46.7)],
)
def test_presets_have_their_published_parameter_counts(name, total_B) -> None:
    # Llama 3 paper Table 3 (8B, 70B, 405B); GPT-3 Table 2.1 (175.0B); Mixtral paper (46.7B total)
    assert PRESETS[name].total_params() / 1e9 == pytest.approx(total_B, rel=0.01)


def test_moe_active_parameters() -> None:
    # Mixtral: 12.9B active parameters per token (Jiang et al. 2024), embeddings included.
    m = PRESETS["mixtral-8x7b"]
    assert (m.non_embedding_params(active_only=True) + m.embedding_params() / 2) / 1e9 == \
        pytest.approx(12.9, rel=0.02)


def test_preset_with_overrides() -> None:
    s = scn(model={"preset": "llama3-8b", "layers": 16})
    assert s.model.layers == 16 and s.model.hidden == 4096


def test_tpu_slice_and_chips() -> None:
    s = scn(cluster={"topology": "tpu-v4", "slice": "4x4x8"})
    assert s.cluster.chips == 128 and s.cluster.shape == (4, 4, 8)
    s = scn(cluster={"topology": "tpu-v5e", "chips": 1024})
    assert s.cluster.pods == 4


def test_multislice_and_zero_group() -> None:
    s = scn(cluster={"topology": "tpu-v5p", "chips": 1024, "slices": 2},
            parallelism={"tp": 8, "zero": 3, "zero_group": 64})
    assert s.cluster.shape == (8, 8, 8) and s.cluster.pods == 2 and s.cluster.chips == 1024
    assert s.parallelism.dp == 128 and s.parallelism.shard_dp == 64
    s = scn(cluster={"topology": "tpu-v4", "slice": "4x4x8", "slices": 3})
    assert s.cluster.chips == 384 and s.cluster.pods == 3
    s = scn(parallelism={"tp": 8, "zero": 3, "zero_group": 8})      # dp = 8: no replicas
    assert s.parallelism.zero_group == 0 and s.parallelism.shard_dp == 8


def test_plan_values_are_derived_once_by_the_loader() -> None:
    s = scn(cluster={"topology": "tpu-v5p", "chips": 1024, "slices": 2},
            training={"seq_len": 4096, "global_batch": 256, "micro_batch": 2},
            parallelism={"tp": 8, "pp": 2, "schedule": "interleaved", "virtual_stages": 2,
                         "zero": 3, "zero_group": 16})
    p = s.parallelism                          # 1024 / (8 x 2) = 64 dp; 256 / (2 x 64) = 2 micro
    assert (p.dp, p.shard_dp, p.replicas, p.shard_ranks) == (64, 16, 4, 16)
    assert (p.microbatches, p.sequences_per_step) == (2, 256)
    assert (p.chunks, p.layers_per_chunk, p.layers_per_stage, p.local_seq_len) == (4, 8, 16, 4096)
    d = scn(parallelism={"tp": 8, "pp": 2}).parallelism        # no batch: dp x 1 x 4 pp
    assert (d.dp, d.sequences_per_step, d.microbatches, d.replicas) == (4, 32, 8, 1)


def test_a_plan_that_breaks_a_rule_loads_and_refuses_its_sizes() -> None:
    s = scn(parallelism={"tp": 64})          # a valid scenario whose plan cannot run
    assert s.parallelism.plan_error == "test.yaml: parallelism.tp: 64 does not divide model.heads = 32"
    with pytest.raises(ConfigError, match=r"^test.yaml: parallelism.tp: 64 does not divide"):
        _ = s.parallelism.microbatches        # the property raises


def test_multislice_and_zero_group_errors() -> None:
    bad(r"cluster.chips: 1001 is not 2 equal slices", cluster={"topology": "tpu-v5p", "chips": 1001,
                                                                "slices": 2})
    bad(r"cluster.chips: 1024 chips in 2 slices is 512 per slice, not a valid tpu-v5e slice size",
        cluster={"topology": "tpu-v5e", "chips": 1024, "slices": 2})
    bad(r"cluster.chips: 100 disagrees with 2 slices of '4x4x4' \(128 chips\)",
        cluster={"topology": "tpu-v4", "slice": "4x4x4", "slices": 2, "chips": 100})
    bad(r"cluster.slices: only TPU topologies join slices over a DCN",
        cluster={"topology": "dgx-h100", "chips": 16, "slices": 2})
    bad(r"cluster.slices: must be >= 1, got 0", cluster={"topology": "tpu-v4", "slices": 0})
    bad(r"parallelism.zero_group: 3 does not divide dp = 8; valid: a divisor of dp \(1, 2, 4, 8\)",
        parallelism={"tp": 8, "zero_group": 3})
    bad(r"parallelism.zero_group: 4 shards nothing with zero: 0",
        parallelism={"tp": 8, "zero": 0, "zero_group": 4})


# --------------------------------------------------------------------------- bad input

def test_unknown_top_level_key() -> None:
    msg = bad(r"scenario: unknown key\(s\) \['modle'\]", modle="x")
    assert "allowed" in msg


def test_unknown_nested_key() -> None:
    bad(r"parallelism: unknown key\(s\) \['tensor_parallel'\].*allowed", parallelism={"tensor_parallel": 2})


def test_wrong_type() -> None:
    bad(r"parallelism.tp: expected an integer, got 'eight' \(str\)", parallelism={"tp": "eight"})
    bad(r"training.seq_len: expected an integer, got 4096.5", training={"seq_len": 4096.5})
    bad(r"cluster: expected a mapping, got 'dgx-h100'", cluster="dgx-h100")


def test_unknown_topology_lists_the_valid_ones() -> None:
    # the bundled files, as the directory lists them (every new topology joins the list)
    names = ", ".join(sorted(p.stem for p in (REPO / "topologies").glob("*.yaml")))
    assert "dgx-a100, dgx-a100-40gb, " in names and "tpu-v4, tpu-v5e, tpu-v5p, tpu-v6e" in names
    bad(rf"cluster.topology: unknown topology .dgx-h800.; valid: {names} or a path",
        cluster={"topology": "dgx-h800"})


def test_chips_not_whole_nodes() -> None:
    bad(r"cluster.chips: 12 GPUs is not a whole number of 8-GPU nodes .*valid: 8, 16",
        cluster={"topology": "dgx-h100", "chips": 12})


def test_invalid_slice_shapes() -> None:
    bad(r"cluster.slice: 4x4x6 is not a tpu-v4 slice; valid: whole 4x4x4 cubes",
        cluster={"topology": "tpu-v4", "slice": "4x4x6"})
    bad(r"cluster.slice: '4x4' is not a 3-D slice shape", cluster={"topology": "tpu-v4", "slice": "4x4"})
    bad(r"cluster.chips: 100 is not a valid tpu-v4 slice size; valid: 4, 8, 16, 32",
        cluster={"topology": "tpu-v4", "chips": 100})
    bad(r"cluster.slice: 4x16 is not a tpu-v5e slice; valid: 1x1, 2x2",
        cluster={"topology": "tpu-v5e", "slice": "4x16"})
    bad(r"cluster.chips: 128 disagrees with slice '4x4x4'",
        cluster={"topology": "tpu-v4", "slice": "4x4x4", "chips": 128})
    bad(r"cluster.slice: only TPU topologies take a slice shape",
        cluster={"topology": "dgx-h100", "slice": "4x4x4"})


def test_parallelism_must_divide_the_chips() -> None:
    bad(r"parallelism: tp\*pp\*cp = 8\*3\*1 = 24 does not divide the 64 chips", parallelism={"tp": 8, "pp": 3})


def test_model_errors() -> None:
    bad(r"model.preset: unknown model .llama9.; valid: deepseek-v3, gpt-oss-120b, gpt-oss-20b, "
        r"gpt3-175b", model="llama9")
    bad(r"model: required", model=None)
    bad(r"model.hidden: required \(an integer\)", model={"layers": 2})
    bad(r"model.heads: 48 does not divide hidden = 4096; give model.head_dim",
        model={"preset": "llama3-8b", "heads": 48})


def test_head_dim_decouples_attention_width_from_hidden() -> None:
    # MaxText's scaled models keep head_dim 128 while heads grow: 64 heads x 128 = 8192 on a
    # 4096-wide model doubles Q and O (and K, V with them).
    base = scn(model={"preset": "llama3-8b", "heads": 32, "kv_heads": 32}).model
    wide = scn(model={"preset": "llama3-8b", "heads": 64, "kv_heads": 64, "head_dim": 128}).model
    assert base.head_dim == 128 and wide.head_dim == 128
    assert wide.attention_params() == 2 * base.attention_params()
    assert scn(model={"preset": "llama3-8b", "heads": 48, "head_dim": 128}).model.heads == 48


def test_value_ranges() -> None:
    bad(r"stragglers.slow_fraction: must be <= 1, got 1.5", stragglers={"slow_fraction": 1.5})
    bad(r"failures.checkpoint_write_s: must be >= 0.0, got -5", failures={"checkpoint_write_s": -5})
    bad(r"failures.checkpoint_interval_min: 0.5 min is not longer than checkpoint_write_s = 60",
        failures={"checkpoint_interval_min": 0.5, "checkpoint_write_s": 60})
    bad(r"training.precision: got 'fp4'; valid: bf16, fp8", training={"precision": "fp4"})
    bad(r"training.precision: fp8 is not supported on A100-SXM-80GB",
        cluster={"topology": "dgx-a100", "chips": 8}, training={"precision": "fp8"})


def test_yaml_errors_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("cluster: {topology: dgx-h100\nmodel: llama3-8b\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: line \d+: not valid YAML"):
        load_scenario(f)
    f.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: a scenario file must be a YAML mapping"):
        load_scenario(f)
    with pytest.raises(ConfigError, match=r"no such scenario file"):
        load_scenario(tmp_path / "missing.yaml")


def test_yaml_is_read_with_a_safe_loader(tmp_path: Path) -> None:
    f = tmp_path / "evil.yaml"
    f.write_text("name: !!python/object/apply:os.system ['echo pwned']\nmodel: llama3-8b\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_scenario(f)


def test_topology_file_errors(tmp_path: Path) -> None:
    f = tmp_path / "topo.yaml"
    f.write_text("name: x\nkind: gpu_cluster\nchip: H100-SXM\nnode: {gpus: 8, colour: red}\n")
    with pytest.raises(ConfigError, match=r"topo.yaml: node: unknown key\(s\) \['colour'\]"):
        scn(cluster={"topology": str(f), "chips": 8})
    f.write_text("name: x\nkind: mesh\n")
    with pytest.raises(ConfigError, match=r"kind: got 'mesh'; valid: gpu_cluster, tpu_pod"):
        scn(cluster={"topology": str(f), "chips": 8})
