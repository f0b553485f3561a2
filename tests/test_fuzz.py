"""Bad and odd input through the CLI, in-process: never a traceback, never a hang, never a
non-finite number. Every answer is exit 0 (with finite output), or exit 2 / 3 with one line on
stderr naming what is wrong.

Two corpora: the cases users hit (issue 11's list: broken files, extreme values, bad flags), and
generated ones: hypothesis mutating a valid scenario field by field (any key of the schema, any
kind of value) and throwing argument lists at every subcommand.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main

REPO = Path(__file__).resolve().parent.parent
BASE = yaml.safe_load((REPO / "scenarios" / "default.yaml").read_text())
LIMIT_S = 10.0                 # the bound on any one answer
FAST = ["--max-events", "2000000"]


def _finite(obj: Any) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return True


def answer(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run one command; check the contract every answer must meet."""
    t0 = time.perf_counter()
    code = main(argv)
    took = time.perf_counter() - t0
    out, err = capsys.readouterr()
    assert took < LIMIT_S, (argv, took)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert code in (0, 2, 3), (argv, code, err)
    if code:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("clustersim"), (argv, err)
    if code == 0 and "--json" in argv:
        data = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON of {argv}"))
        assert _finite(data), argv
    assert "nan" not in out.lower().split() and "inf" not in out.lower().split(), (argv, out)
    return code, out, err


def _scenario(tmp: Path, name: str, data: Any) -> str:
    path = tmp / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


# ----------------------------------------------------------------------------- the known cases

def _files(tmp: Path) -> dict[str, str]:
    cases = {
        "binary.yaml": b"\x00\x01\x02\xff\xfe",
        "utf16.yaml": "model: llama3-8b\n".encode("utf-16"),
        "latin1.yaml": "name: caf\xe9\nmodel: llama3-8b\n".encode("latin-1"),
        "deep-list.yaml": ("a: " + "[" * 20000 + "]" * 20000 + "\n").encode(),
        "deep-map.yaml": ("".join(" " * i + f"k{i}:\n" for i in range(5000)) + " " * 5000 + "v\n").encode(),
        "dup.yaml": b"model: llama3-8b\nmodel: llama3-70b\n",
        "empty.yaml": b"",
        "list.yaml": b"- 1\n- 2\n",
        "notyaml.yaml": b"model: [unclosed\n",
    }
    out = {}
    for name, data in cases.items():
        (tmp / name).write_bytes(data)
        out[name] = str(tmp / name)
    return out


def _mutated(changes: dict[str, Any]) -> dict[str, Any]:
    raw = json.loads(json.dumps(BASE))
    raw["model"] = {"preset": raw["model"]}
    for dotted, value in changes.items():
        if "." not in dotted:
            raw[dotted] = value
            continue
        section, key = dotted.split(".")
        raw.setdefault(section, {})[key] = value
    return raw


KNOWN = [
    {"stragglers.compute_jitter_sigma": 1e6}, {"stragglers.slow_factor": 1e308},
    {"stragglers.slow_fraction": 0.5, "stragglers.slow_factor": 1e300},
    {"failures.monte_carlo_runs": 10**9}, {"failures.planned_per_day": 1e6},
    {"training.global_batch": 10**9}, {"training.global_batch": 10**6},
    {"parallelism.zero": 4}, {"parallelism.zero": 99}, {"cost.usd_per_chip_hour": float("inf")},
    {"cost.usd_per_chip_hour": 1e300}, {"training.seq_len": 10**12}, {"model.layers": 0},
    {"parallelism.tp": 3}, {"cluster.chips": 7}, {"cluster.chips": 10**9},
    {"software.framework": "jax"}, {"software.attention": "flash-attention-3", "cluster.topology": "dgx-a100"},
    {"failures.horizon_days": 1e9}, {"training.precision": "fp4"}, {"seed": -1},
]


def test_known_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path in _files(tmp_path).values():
        assert answer(["run", path], capsys)[0] == 2
    for i, changes in enumerate(KNOWN):
        raw = _mutated(changes)
        code, _, err = answer(["run", _scenario(tmp_path, f"k{i}.yaml", raw), *FAST, "--json"], capsys)
        assert code != 0 or "failures" in str(changes), (changes, err)
    default = str(REPO / "scenarios" / "default.yaml")
    topo = (REPO / "topologies" / "dgx-h100.yaml").read_text().replace(
        "ib_latency_us: 0.3 ", "ib_latency_us: 1e300 ")
    for argv in (
        ["run", default, "--trace", str(tmp_path / "missing" / "t.json")],
        ["run", default, "--trace", str(tmp_path)],
        ["run", default, "--trace", ""],
        ["run", default, "--steps", "1000000"],
        ["run", default, "--seed", "-3"],
        ["run", str(tmp_path / "nope.yaml")],
        ["validate", "--data", default],
        ["validate", "--suite", "nonsense"],
        ["collective", "--topology", "dgx-h100", "--op", "allreduce", "--group", "1"],
        ["collective", "--topology", "dgx-h100", "--op", "allreduce", "--min-bytes", "0"],
        ["collective", "--topology", "dgx-h100", "--op", "gossip"],
        ["collective", "--topology", _scenario(tmp_path, "t.yaml", topo), "--op", "allreduce"],
        ["topo", "show", "tpu-v4", "--slice", "3x3x3"],
        ["topo", "show", "dgx-h100", "--chips", "12"],
        ["frobnicate"],
    ):
        assert answer(argv, capsys)[0] == 2, argv


# ----------------------------------------------------------------------------- generated cases

PLAUSIBLE = st.sampled_from([1, 2, 4, 8, 16, 64, 0.5, 0.01, 2048, "bf16", "fp8", "selective",
                             "full", "none", "interleaved", "gpipe", "megatron-te", "pytorch-eager",
                             "torch-compile", "maxtext", "cudnn", "xla", "flash-attention-2",
                             "dgx-a100", "tpu-v5e", "tpu-v4", "llama3-70b", "mixtral-8x7b", True, False])
VALUES = st.one_of(
    PLAUSIBLE, PLAUSIBLE, PLAUSIBLE,
    st.none(), st.booleans(), st.integers(-10**12, 10**12), st.sampled_from([0, 1, 2, 3, 7, 8, 64]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.lists(st.integers(-3, 10), max_size=4), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
KEYS = {
    "cluster": ["topology", "chips", "slice", "slices", "twisted", "oversubscription", "sharp", "bogus"],
    "model": ["preset", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "head_dim",
              "mlp", "moe"],
    "training": ["seq_len", "global_batch", "micro_batch", "precision", "recompute"],
    "parallelism": ["tp", "pp", "cp", "ep", "zero", "zero_group", "schedule", "virtual_stages",
                    "sequence_parallel"],
    "software": ["framework", "attention"],
    "stragglers": ["compute_jitter_sigma", "slow_fraction", "slow_factor", "link_degrade_fraction",
                   "link_bandwidth_factor"],
    "failures": ["horizon_days", "checkpoint_interval_min", "monte_carlo_runs", "planned_per_day",
                 "rate_scale", "tokens", "detect_s"],
    "cost": ["usd_per_chip_hour"],
}
FIELD = st.sampled_from([(s, k) for s, ks in KEYS.items() for k in ks])


@pytest.mark.slow  # the fuzzing corpus: 400 generated scenarios (~5 s)
@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(FIELD, VALUES), min_size=1, max_size=3))
def test_generated_scenarios(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             changes: list[tuple[tuple[str, str], Any]]) -> None:
    raw = _mutated({f"{section}.{key}": value for (section, key), value in changes})
    path = tmp_path / "g.yaml"
    try:
        path.write_text(yaml.safe_dump(raw))
    except (UnicodeEncodeError, yaml.YAMLError):
        return
    answer(["run", str(path), *FAST, "--json"], capsys)


FLAGS = st.lists(st.one_of(
    st.sampled_from(["--chips", "--slice", "--slices", "--op", "--algo", "--group", "--min-bytes",
                     "--max-bytes", "--factor", "--dtype", "--csv", "--json", "--twisted",
                     "--oversubscription", "--suite", "--data", "--seed", "--steps", "--sharp"]),
    st.sampled_from(["0", "-1", "1", "2", "3", "7", "8", "16", "1e9", "4x4x4", "allreduce", "ring",
                     "tree", "float", "64K", "8G", "nan", "inf", "", "dgx-h100", "tpu-v5e"]),
), max_size=6)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(command=st.sampled_from([["collective", "--topology", "dgx-h100"],
                                ["collective", "--topology", "tpu-v5e"],
                                ["topo", "show", "dgx-a100"], ["topo", "show", "tpu-v4"],
                                ["validate", "--suite", "failures"], ["run", "default"]]),
       flags=FLAGS)
def test_generated_command_lines(capsys: pytest.CaptureFixture[str], command: list[str],
                                 flags: list[str]) -> None:
    argv = command + flags
    if argv[0] == "run":
        argv += FAST
    answer(argv, capsys)


# ----------------------------------------------------------------------------- topology files

# The fabrics issue 16 added, one file per kind of scale-up domain and transport.
NEW_FABRICS = ["aws-p5", "aws-p4de", "gb200-nvl72", "gcp-a3-mega", "gcp-a3-ultra", "gcp-a4-roce",
               "polaris", "hgx-h100-4gpu", "h100-3tier", "oci-h200-roce", "slingshot-dragonfly", "tpu7x"]
TOPO_VALUES = st.one_of(
    st.sampled_from([None, "DELETE", 0, -1, 1, 3, 5, 72, 0.5, 1e300, "abc", True, [1, 2], [],
                     ["Simple"], ["LL", "LL9"], {"a": 1}, "efa", "roce", "gib", "dragonfly"]),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**9, 10**9),
)


def _topo_fields(name: str) -> list[tuple[str, ...]]:
    raw = yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())
    return [(k, kk) if isinstance(v, dict) else (k,)
            for k, v in raw.items() for kk in (v if isinstance(v, dict) else [None])]


@pytest.mark.slow  # the fuzzing corpus: 150 generated topology files (~3 s)
@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(NEW_FABRICS))
def test_generated_topology_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  data: st.DataObject, name: str) -> None:
    """A new fabric's file with one to three fields deleted or set to anything: topo show and a
    collective on it answer (``answer``'s contract), and a refusal names the file (the field and
    what would be valid follow it; tests/test_fabrics.py checks those for the cases users hit)."""
    raw = yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())
    for path in data.draw(st.lists(st.sampled_from(_topo_fields(name)), min_size=1, max_size=3)):
        value = data.draw(TOPO_VALUES)
        parent = raw if len(path) == 1 else raw.get(path[0])
        if not isinstance(parent, dict):
            continue
        if value == "DELETE":
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = value
    f = tmp_path / f"{name}-mutated.yaml"
    f.write_text(yaml.safe_dump(raw))
    for argv in (["topo", "show", str(f)],
                 ["collective", "--topology", str(f), "--op", "allreduce", "--min-bytes", "1K",
                  "--max-bytes", "64M", "--factor", "256"]):
        code, _, err = answer(argv, capsys)
        assert code != 2 or str(f) in err, err
