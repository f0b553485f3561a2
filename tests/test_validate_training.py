"""The training validation suite (sim/validate/training*.py): mapping, measured steps, scoring, budgets.

Scoring and budgets are tested with fake predictors on a small synthetic runs.csv: a predictor that
returns the measured step must score 0 %, one that is 10 % slow exactly 10 %. The mapping rules and
the measured-step derivations are tested on the real validation/training/runs.csv, whose every row
must come out as supported (and load with the scenario loader) or unsupported with a reason.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sim.config import load_topology_spec, scenario_from_dict
from sim.errors import ConfigError, InfeasibleError
from sim.hardware import CATALOGUE
from sim.models import ModelSpec
from sim.validate import (
    FAMILIES,
    FLOPS_CONVENTIONS,
    TIME_SOURCES,
    TOPOLOGY_CHIPS,
    MappedRun,
    add_parser,
    check_budgets,
    default_data_dir,
    flops_per_token,
    format_training_report,
    load_budgets,
    map_runs,
    run_cli,
    training_report_to_json,
    validate_training,
)
from sim.workload.transformer import model_flops_per_token as palm_flops_per_token

REAL = default_data_dir()
BUDGETS = {"step_median_abs_pct": 10.0, "step_p90_abs_pct_A100": 25.0, "step_p90_abs_pct_H100": 25.0,
           "step_p90_abs_pct_TPU": 25.0, "refused_max_pct": 3.0}
HEADER = REAL.joinpath("training", "runs.csv").read_text().splitlines()[0].split(",")

# ----------------------------------------------------------------------------- synthetic data

_GPT = {"model": "GPT 1B", "layers": "24", "hidden": "2048", "heads": "16", "seq_len": "2048",
        "global_batch_seqs": "256", "micro_batch": "2"}
_LLAMA = {"model": "Llama 3 8B", "layers": "32", "hidden": "4096", "heads": "32", "kv_heads": "8",
          "ffn_hidden": "14336", "vocab": "128256", "seq_len": "8192", "global_batch_seqs": "64",
          "micro_batch": "1"}
ROWS: list[dict[str, str]] = [
    dict(id="a100-step", hardware="A100 80GB SXM", chips="16", tp="2", pp="1", dp="8",
         precision="bf16", step_time_s="2.5", split="test", **_GPT),
    dict(id="a100-40-tokens", hardware="A100 40GB (MosaicML)", chips="32", dp="32",
         zero_or_fsdp="FSDP FULL_SHARD", recompute="full (activation checkpointing)",
         precision="amp_bf16", tokens_per_s="200000", split="calibration", **_GPT),
    dict(id="a100-mfu", hardware="A100 80GB", chips="64", tp="8", pp="2", dp="4", notes="VP=3",
         precision="bf16", mfu_pct="40", split="test", **_GPT),
    dict(id="h100-fp8-tokens", hardware="H100 (DGX-H100)", chips="64", tp="4", pp="2", dp="8",
         precision="FP8", tokens_per_s="150000", split="test", **_LLAMA),
    dict(id="h100-tflops", hardware="H100 (DGX-H100)", chips="8", dp="8", zero_or_fsdp="FSDP2",
         recompute="selective op", precision="BF16", tflops_per_chip="400", split="test", **_LLAMA),
    dict(id="v5p-maxtext", source_url="https://github.com/google/maxtext/blob/x/README.md",
         hardware="TPU v5p", chips="64", tp="4", zero_or_fsdp="FSDP (ici_fsdp_parallelism=-1)",
         recompute="remat_policy=minimal", precision="bf16", tflops_per_chip="300", split="test",
         **{**_LLAMA, "model": "MaxText Llama"}),
    dict(id="v5e-step", hardware="TPU v5e", chips="256", zero_or_fsdp="FSDP", recompute="remat_policy=full",
         precision="bf16", step_time_s="4.0", split="calibration", **_LLAMA),
    dict(id="v100-step", hardware="V100 (DGX-2)", chips="16", tp="1", pp="1", dp="16",
         precision="fp16", step_time_s="3.0", split="test", **_GPT),
    dict(id="bytedance", hardware="NVIDIA Ampere GPUs", chips="16", tp="1", pp="1", dp="16",
         precision="bf16", step_time_s="3.0", split="calibration", **_GPT),
]
OVERRIDES = [("bytedance", "topology", "dgx-a100", "assumption: A100 for the test")]
SUPPORTED = {"a100-step", "a100-40-tokens", "a100-mfu", "h100-fp8-tokens", "h100-tflops",
             "v5p-maxtext", "v5e-step", "bytedance"}


def _write(root: Path, rows: list[dict[str, str]] = ROWS,
           overrides: list[tuple[str, str, str, str]] = OVERRIDES) -> Path:
    """A validation/ folder: budgets.toml plus training/ with runs.csv and overrides.csv."""
    d = root / "training"
    d.mkdir(parents=True)
    (root / "budgets.toml").write_text("[training]\nstep_median_abs_pct = 10.0\nstep_p90_abs_pct_A100 = 25.0\n"
                                      "step_p90_abs_pct_H100 = 25.0\nstep_p90_abs_pct_TPU = 25.0\n"
                                      "refused_max_pct = 3.0\n")
    with (d / "runs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, HEADER)
        w.writeheader()
        for row in rows:
            w.writerow({c: row.get(c, "https://example.org/run" if c == "source_url" else "") for c in HEADER})
    with (d / "overrides.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "field", "value", "reason"])
        w.writerows(overrides)
    return root


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    return _write(tmp_path / "validation")


def _by_id(runs: tuple[MappedRun, ...]) -> dict[str, MappedRun]:
    return {r.id: r for r in runs}


def _fake(data_dir: Path, factor: float = 1.0,
          only: Callable[[MappedRun], bool] = lambda m: True) -> Callable[[Mapping[str, Any]], Any]:
    """A predictor that returns the measured step x *factor* (for runs where *only* holds)."""
    measured = {m.id: m for m in map_runs(data_dir) if m.supported}

    def predict(raw: Mapping[str, Any]) -> Any:
        m = measured[raw["name"]]
        assert m.measured is not None
        f = factor if only(m) else 1.0
        return types.SimpleNamespace(step_time_s=m.measured.step_time_s * f, mfu=m.measured.mfu / f,
                                     model_flops_per_step=m.measured.model_flops_per_step,
                                     memory_per_chip_GiB=40.0)
    return predict


# ----------------------------------------------------------------------------- FLOP counts

def test_flops_per_token_by_hand() -> None:
    """L=2, h=64, 4 heads (Q=16), ffn 256 GELU, V=1000, T=16. N = 2 x (4h² + 2·h·ffn + 2h) + h =
    2 x (16384 + 32768 + 128) + 64 = 98,624; PaLM = 6N + 12·L·H·Q·T = 591,744 + 24,576 = 616,320."""
    m = ModelSpec("tiny", layers=2, hidden=64, ffn_hidden=256, heads=4, kv_heads=4, vocab=1000, mlp="gelu")
    assert palm_flops_per_token(m, 16) == 616_320
    assert flops_per_token(m, 16, FLOPS_CONVENTIONS["palm"]) == 616_320
    assert flops_per_token(m, 16, FLOPS_CONVENTIONS["palm+logits"]) == 616_320 + 6 * 64 * 1000
    # Narayanan et al. eq. (3) per token: 96·l·h²·(1 + s/6h + V/16lh) = 1,203,200; our count adds the
    # norm weights (6 x 320 x 4/3 = 2,560) that eq. (3) leaves out.
    eq3 = 96 * 2 * 64**2 * (1 + 16 / (6 * 64) + 1000 / (16 * 2 * 64))
    assert flops_per_token(m, 16, FLOPS_CONVENTIONS["megatron-eq3"]) == pytest.approx(eq3 + 2_560, rel=1e-12)


# ----------------------------------------------------------------------------- synthetic mapping

def test_synthetic_mapping_and_measured_steps(data: Path) -> None:
    runs = _by_id(map_runs(data / "training"))
    assert {i for i, r in runs.items() if r.supported} == SUPPORTED
    assert "V100" in runs["v100-step"].reason
    a, t, mfu = runs["a100-step"], runs["a100-40-tokens"], runs["a100-mfu"]
    assert a.topology == "dgx-a100" and t.topology == "dgx-a100-40gb" and a.family == t.family == "A100"
    assert a.measured is not None and a.measured.time_from == "step" and a.measured.step_time_s == 2.5
    assert t.measured is not None and t.measured.time_from == "tokens"
    assert t.measured.step_time_s == pytest.approx(256 * 2048 / 200_000, rel=1e-12)
    # 24 x (4 x 2048² + 2 x 2048 x 8192 + 2 x 2048) + 2048 = 1,208,059,904 non-embedding parameters.
    per_token = 6 * 1_208_059_904 + 12 * 24 * 2048 * 2048
    assert mfu.measured is not None and mfu.measured.time_from == "mfu"
    assert mfu.measured.model_flops_per_step == pytest.approx(256 * 2048 * per_token, rel=1e-12)
    assert mfu.measured.step_time_s == pytest.approx(256 * 2048 * per_token / (0.40 * 64 * 312e12), rel=1e-12)
    assert mfu.measured.mfu == pytest.approx(0.40, rel=1e-12)
    assert mfu.scenario is not None and mfu.scenario["parallelism"]["schedule"] == "interleaved"
    assert mfu.scenario["parallelism"]["virtual_stages"] == 3
    b = runs["bytedance"]
    assert b.topology == "dgx-a100" and any("assumption: A100 for the test" in s for s in b.assumptions)


def test_fp8_run_mfu_is_against_the_bf16_peak(data: Path) -> None:
    r = _by_id(map_runs(data / "training"))["h100-fp8-tokens"]
    assert r.scenario is not None and r.scenario["training"]["precision"] == "fp8"
    assert r.measured is not None
    step_s = 64 * 8192 / 150_000
    assert r.measured.mfu == pytest.approx(r.measured.model_flops_per_step / (step_s * 64 * 989.4e12), rel=1e-12)


def test_tflops_inverted_with_the_source_convention(data: Path) -> None:
    runs = _by_id(map_runs(data / "training"))
    h, v = runs["h100-tflops"], runs["v5p-maxtext"]
    assert h.measured is not None and v.measured is not None
    assert (h.measured.time_from, h.measured.flops_convention) == ("tflops", "palm")
    assert h.measured.mfu == pytest.approx(400 / 989.4, rel=1e-12)       # PaLM rate / BF16 peak
    assert (v.measured.time_from, v.measured.flops_convention) == ("tflops", "palm+logits")
    model = ModelSpec("l", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256)
    ratio = palm_flops_per_token(model, 8192) / flops_per_token(model, 8192, FLOPS_CONVENTIONS["palm+logits"])
    assert v.measured.mfu == pytest.approx(300 / 459 * ratio, rel=1e-12)
    assert v.scenario is not None and v.scenario["parallelism"]["zero"] == 3
    assert v.scenario["parallelism"]["tp"] == 4 and v.scenario["training"]["remat_policy"] == "minimal"


# ----------------------------------------------------------------------------- scoring

def test_exact_predictor_scores_zero(data: Path) -> None:
    report = validate_training(data / "training", _fake(data / "training"))
    assert {r.id for r in report.runs} == SUPPORTED and [u.id for u in report.unsupported] == ["v100-step"]
    for r in report.runs:
        assert r.step_abs_err_pct == pytest.approx(0, abs=1e-9) and r.mfu_abs_err_pp == pytest.approx(0, abs=1e-9)
    assert report.summary("test").runs == 5 and report.summary("calibration").runs == 3
    assert report.summary("test", "TPU").runs == 1 and report.summary("calibration", "A100").runs == 2
    assert check_budgets(report, {"training": BUDGETS}) == []


def test_ten_percent_slow_predictor(data: Path) -> None:
    report = validate_training(data / "training", _fake(data / "training", 1.1))
    for r in report.runs:
        assert r.measured_mfu is not None and r.step_abs_err_pct == pytest.approx(10.0, rel=1e-9)
        assert r.mfu_abs_err_pp == pytest.approx(r.measured_mfu * (1 - 1 / 1.1) * 100, rel=1e-9)
    for s in (*report.splits, *report.families):
        assert s.step_median_abs_pct == pytest.approx(10.0) and s.step_p90_abs_pct == pytest.approx(10.0)
    text = format_training_report(report)
    assert "by split and family" in text and "V100" in text and "10.0" in text


def test_peak_memory_is_scored_where_a_source_publishes_it(tmp_path: Path) -> None:
    global HEADER
    rows = [{**ROWS[0], "peak_memory_GiB": "50"}, {**ROWS[3], "peak_memory_GiB": "32"}, *ROWS[1:3]]
    saved, HEADER = HEADER, [*HEADER, "peak_memory_GiB"]
    try:
        root = _write(tmp_path / "v", rows, overrides=[])
    finally:
        HEADER = saved
    report = validate_training(root / "training", _fake(root / "training"))    # predicts 40 GiB
    by = {r.id: r for r in report.runs}
    assert by["a100-step"].measured_memory_GiB == 50 and by["a100-step"].predicted_memory_GiB == 40
    assert by["a100-step"].memory_abs_err_pct == pytest.approx(20.0)          # |40 - 50| / 50
    assert by["h100-fp8-tokens"].memory_abs_err_pct == pytest.approx(25.0)    # |40 - 32| / 32
    assert by["a100-40-tokens"].memory_abs_err_pct is None                    # not published
    test, cal = report.summary("test"), report.summary("calibration")
    assert (test.memory_runs, cal.memory_runs) == (2, 0)                     # both are test runs
    assert test.memory_median_abs_pct == pytest.approx(22.5)
    assert cal.memory_median_abs_pct is None
    assert "2 runs, median |error| 22.5%" in format_training_report(report)
    w = _write(tmp_path / "w", overrides=[]) / "training"
    plain = validate_training(w, _fake(w))
    assert "no run publishes its peak memory" in format_training_report(plain)


def test_budgets_per_family(data: Path) -> None:
    ok = validate_training(data / "training", _fake(data / "training", 1.05))
    assert check_budgets(ok, {"training": BUDGETS}) == []
    tpu_slow = validate_training(data / "training", _fake(data / "training", 1.3, lambda m: m.family == "TPU"))
    violations = check_budgets(tpu_slow, {"training": BUDGETS})
    assert len(violations) == 2 and all("TPU test split" in v for v in violations)
    assert "median abs error 30.00% > budget step_median_abs_pct = 10%" in violations[0]
    assert "p90" in violations[1]
    # The p90 budget on its own: a family within its median budget but not its p90 budget.
    tight = {**BUDGETS, "step_median_abs_pct": 50.0, "step_p90_abs_pct_H100": 4.0}
    (v,) = check_budgets(ok, {"training": tight})                  # the other families keep 25%
    assert "H100" in v and "p90 abs error 5.00% > budget step_p90_abs_pct_H100 = 4%" in v
    with pytest.raises(ConfigError, match="training"):
        check_budgets(ok, {"collectives": {}})


def test_family_without_test_runs_is_a_violation(tmp_path: Path) -> None:
    rows = [r for r in ROWS if not r["hardware"].startswith("TPU")]
    root = _write(tmp_path / "v", rows)
    report = validate_training(root / "training", _fake(root / "training"))
    assert check_budgets(report, {"training": BUDGETS}) == [
        "training: no predicted test-split runs for family TPU; cannot check budgets"]


def test_refusals_are_listed_and_test_ones_violate(data: Path) -> None:
    exact = _fake(data / "training")

    def predict(raw: Mapping[str, Any]) -> Any:
        if raw["name"] == "h100-tflops":
            raise InfeasibleError("does not fit: 95 GiB > 80 GiB")
        if raw["name"] == "a100-40-tokens":
            raise ConfigError("parallelism: unsupported")
        return exact(raw)

    report = validate_training(data / "training", predict)
    assert [r.id for r in report.errors] == ["a100-40-tokens", "h100-tflops"]
    assert report.summary("test", "H100").runs == 1 and report.summary("calibration", "A100").runs == 1
    assert check_budgets(report, {"training": BUDGETS}) == [
        "training: H100 test split: 1 of 2 runs refused > budget refused_max_pct = 3% (h100-tflops)"]
    assert check_budgets(report, {"training": {**BUDGETS, "refused_max_pct": 50.0}}) == []
    text = format_training_report(report)
    assert "errors (2 runs the predictor refused)" in text and "ConfigError: parallelism" in text


def test_nonsense_prediction_is_a_bug(data: Path) -> None:
    def predict(raw: Mapping[str, Any]) -> Any:
        return types.SimpleNamespace(step_time_s=1.0, mfu=-0.1, model_flops_per_step=1e15)

    with pytest.raises(ValueError, match="MFU >= 0"):
        validate_training(data / "training", predict)


# ----------------------------------------------------------------------------- data checks

@pytest.mark.parametrize(("overrides", "match"), [
    ([("nope", "seq_len", "1", "why")], "not in runs.csv"),
    ([("a100-step", "step_time_s", "1", "why")], "cannot be overridden"),
    ([("a100-step", "seq_len", "1024", "")], "reason"),
    ([("a100-step", "topology", "dgx-v100", "why")], "topology"),
    ([("a100-step", "seq_len", "1024", "a"), ("a100-step", "seq_len", "512", "b")], "duplicate"),
    ([("a100-step", "weight_dtype", "fp8", "why")], r"weight_dtype 'fp8'; valid: float32, bfloat16"),
    ([("a100-step", "capacity_factor", "-1", "why")], r"capacity_factor '-1'; valid: a number in"),
    ([("a100-step", "capacity_factor", "inf", "why")], r"capacity_factor 'inf'; valid: a number in"),
])
def test_bad_overrides(tmp_path: Path, overrides: list[tuple[str, str, str, str]], match: str) -> None:
    root = _write(tmp_path / "v", overrides=overrides)
    with pytest.raises(ConfigError, match=match):
        map_runs(root / "training")


def test_bad_runs_file(tmp_path: Path) -> None:
    root = _write(tmp_path / "v", [*ROWS, {**ROWS[0]}])
    with pytest.raises(ConfigError, match="duplicate id"):
        map_runs(root / "training")
    root = _write(tmp_path / "w", [{**ROWS[0], "chips": "sixteen"}], overrides=[])
    with pytest.raises(ConfigError, match="chips: expected a number"):
        map_runs(root / "training")
    root = _write(tmp_path / "x", [{**ROWS[0], "split": "holdout"}], overrides=[])
    with pytest.raises(ConfigError, match="split"):
        map_runs(root / "training")


def test_override_fills_a_missing_cell(tmp_path: Path) -> None:
    row = {**ROWS[0], "seq_len": ""}
    root = _write(tmp_path / "v", [row], overrides=[])
    (r,) = map_runs(root / "training")
    assert not r.supported and r.reason == "seq_len not published"
    root = _write(tmp_path / "w", [row], overrides=[("a100-step", "seq_len", "2048", "notes say 2048")])
    (r,) = map_runs(root / "training")
    assert r.supported and r.scenario is not None and r.scenario["training"]["seq_len"] == 2048
    assert "override seq_len = 2048: notes say 2048" in r.assumptions


def test_a_measurement_quoted_twice_is_scored_once(tmp_path: Path) -> None:
    """Two rows with the same model, hardware, chips, sequence and published figures are one
    measurement:
    the calibration copy is scored (a test row must not repeat what calibration saw), else the
    first; a row differing in one figure, or publishing none, is its own run."""
    cal = {**ROWS[1], "id": "cal"}                       # tokens_per_s 200000, calibration
    rows = [{**cal, "id": "test-copy", "split": "test"}, cal,
            {**cal, "id": "other-figure", "split": "test", "tokens_per_s": "200001"},
            {**cal, "id": "other-chips", "split": "test", "chips": "64", "dp": "64"},
            {**ROWS[0], "id": "first"}, {**ROWS[0], "id": "second"}]
    runs = _by_id(map_runs(_write(tmp_path / "v", rows, overrides=[]) / "training"))
    assert runs["cal"].supported and runs["other-figure"].supported and runs["other-chips"].supported
    assert not runs["test-copy"].supported and "cal (calibration)" in runs["test-copy"].reason
    assert runs["first"].supported and not runs["second"].supported
    assert "first (test)" in runs["second"].reason
    blank = {k: "" for k in ("step_time_s", "tokens_per_s", "tflops_per_chip", "mfu_pct")}
    runs = _by_id(map_runs(_write(tmp_path / "w", [{**ROWS[0], **blank, "id": "x"},
                                                   {**ROWS[0], **blank, "id": "y"}],
                                  overrides=[]) / "training"))
    assert "again" not in runs["x"].reason + runs["y"].reason


def test_no_measurement_is_scored_twice_in_the_real_data(real: dict[str, MappedRun]) -> None:
    seen: dict[tuple[str, ...], str] = {}
    rows = {r["id"]: r for r in csv.DictReader(REAL.joinpath("training", "runs.csv").open())}
    for run in real.values():
        if run.supported:
            key = tuple(rows[run.id][c] for c in ("model", "hardware", "chips", "seq_len",
                                                  "step_time_s", "tokens_per_s", "tflops_per_chip",
                                                  "mfu_pct"))
            assert key not in seen, (run.id, seen[key])
            seen[key] = run.id


# ----------------------------------------------------------------------------- real data

@pytest.fixture(scope="module")
def real() -> dict[str, MappedRun]:
    return _by_id(map_runs(REAL / "training"))


def test_every_real_row_is_supported_or_unsupported(real: dict[str, MappedRun]) -> None:
    with (REAL / "training" / "runs.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(real) == [r["id"] for r in rows]                           # every row, once, in order
    for r in real.values():
        assert r.supported == (r.reason == "") and r.supported == (r.scenario is not None)
        if r.supported:
            assert r.measured is not None and r.measured.time_from in TIME_SOURCES
            # MFU is against the dense BF16 peak (PaLM); a low-precision run may pass 1, never
            # its own format's peak
            chip = CATALOGUE[TOPOLOGY_CHIPS[r.scenario["cluster"]["topology"]]]
            ceiling = chip.peak_flops(r.scenario["training"]["precision"]) / chip.bf16_flops
            assert r.family in FAMILIES and r.measured.step_time_s > 0 and 0 < r.measured.mfu < ceiling


def test_every_supported_scenario_loads(real: dict[str, MappedRun]) -> None:
    failures = []
    for r in real.values():
        if r.supported:
            try:
                scenario_from_dict(r.scenario or {}, source=r.id)
            except ConfigError as e:
                failures.append(f"{r.id}: {e}")
    supported = sum(r.supported for r in real.values())
    print(f"\ntraining mapping: {supported} supported runs, {len(failures)} rejected by the loader")
    assert failures == []


def test_real_mapping_rules(real: dict[str, MappedRun]) -> None:
    def par(i: str) -> dict[str, Any]:
        assert real[i].scenario is not None, real[i].reason
        return dict(real[i].scenario["parallelism"])               # type: ignore[index]

    assert "V100" in real["meg2020-mp-v100-8B"].reason
    assert real["meg2020-mp-a100-1B"].reason.startswith("fewer than 8 GPUs")
    assert "500 W" in real["torchtitan-2412-t1-FSDP"].reason                # H100 500 W / HBM2e
    # Multislice: slices joined over the DCN, FSDP within a slice, data parallel across slices.
    ms = real["maxtext-cfg-v5p-32B-2xv5p-128"]
    assert ms.scenario is not None and ms.scenario["cluster"] == {
        "topology": "tpu-v5p", "chips": 128, "slices": 2}
    assert par(ms.id)["zero"] == 3 and par(ms.id)["zero_group"] == 128 // 4 // 2     # dp / slices
    v5e32 = real["maxtext-v5e-32B-32x256"].scenario
    assert v5e32 is not None and v5e32["cluster"]["slices"] == 32
    assert v5e32["parallelism"]["zero_group"] == 256
    v4 = real["maxtext-v4-22B-8xv4-128"]                            # ici_fsdp_parallelism=64
    assert par(v4.id)["zero_group"] == 64 and v4.scenario["cluster"]["slices"] == 8  # type: ignore[index]
    assert "zero_group" not in par("maxtext-cfg-v5p-64B-1xv5p-128")   # one slice: plain FSDP
    # MaxText's per_device_batch_size: a tensor-parallel group runs tp x it in one pass (no
    # gradient accumulation); without tensor parallelism the column is the micro-batch as it is.
    v5p64 = real["maxtext-cfg-v5p-64B-1xv5p-128"].scenario                # pdb 3, tp 4, 64 chips
    assert v5p64 is not None and v5p64["training"]["micro_batch"] == 12
    assert v5p64["training"]["global_batch"] == 3 * 64                  # one pass per step
    assert real["maxtext-v5e-64B-1x256"].scenario["training"]["micro_batch"] == 2  # type: ignore[index]
    # remat_policy=minimal keeps no attention output: the per-tensor preset, not minimal_flash
    assert v5p64["training"]["remat_policy"] == "minimal" and "recompute" not in v5p64["training"]
    # a custom policy as the recipe lists it: a mapping, the tensors it does not name rematerialized
    v6e = real["maxtext-tier-v6e-Llama3.170B-256"].scenario
    assert v6e is not None and v6e["training"]["remat_policy"] == {
        "decoder_layer_input": "offload", "query_proj": "offload", "key_proj": "offload",
        "value_proj": "offload"}
    v5e = real["maxtext-v5e-16B-1x256"]                                    # 64 heads x 128 != 4096
    assert v5e.scenario is not None and v5e.scenario["model"]["head_dim"] == 128
    assert "vTrain" in " ".join(real["vtrain-multi-016"].assumptions)
    assert real["vtrain-multi-016"].topology == "hgx-a100-4nic"              # 800 Gb/s per node
    assert "GPUDirect-TCPX" in real["maxtext-a3-llama2-7b-2vm"].reason
    assert "precision not published" in real["mbridge-25.09-H100-LLAMA3_8B-8"].reason
    assert "parallel layout not published" in real["narayanan21-t2-PTD-P-174.6B-384"].reason
    assert "!= 16384 chips" in real["llama3-405b-16384-cp16"].reason
    assert "H800" in real["deepseek-v3-pretrain"].reason

    # Megatron on A100 (Narayanan et al. Table 1): tp/pp as published, TFLOP/s are hardware FLOPs.
    n = real["narayanan21-t1-39.1B"]
    assert n.topology == "dgx-a100" and n.scenario is not None and n.scenario["cluster"]["chips"] == 512
    assert {k: par(n.id)[k] for k in ("tp", "pp", "zero", "sequence_parallel")} == {
        "tp": 8, "pp": 2, "zero": 1, "sequence_parallel": False}
    assert n.scenario["training"]["recompute"] == "full" and n.scenario["model"]["vocab"] == 51200
    k = real["korthikanti22-175B-selseq"]
    assert par(k.id)["schedule"] == "interleaved" and par(k.id)["virtual_stages"] == 3
    assert k.measured is not None and k.measured.mfu == pytest.approx(0.514, rel=0.01)   # published MFU

    # MaxText on a single v5p slice: FSDP -> zero 3 over the chips left by tp.
    v = real["maxtext-cfg-v5p-64B-1xv5p-128"]
    assert v.topology == "tpu-v5p" and v.family == "TPU" and v.scenario is not None
    assert {k_: par(v.id)[k_] for k_ in ("tp", "pp", "zero")} == {"tp": 4, "pp": 1, "zero": 3}
    assert v.scenario["training"]["remat_policy"] == "minimal" and v.scenario["model"]["mlp"] == "swiglu"
    assert real["maxtext-v5e-32B-1x256"].topology == "tpu-v5e"
    assert real["maxtext-a3-llama2-7b-1vm"].topology == "dgx-h100"

    # MosaicML: 40 GB A100s by the hardware string; SHARD_GRAD_OP is ZeRO-2; MPT uses GELU.
    mpt40 = [r for r in real.values() if r.supported and "A100 40GB" in r.hardware]
    assert mpt40 and all(r.topology == "dgx-a100-40gb" for r in mpt40)
    sgo = [r for r in real.values() if r.supported and r.id.startswith("mpt") and par(r.id)["zero"] == 2]
    assert sgo and all(r.scenario is not None and r.scenario["model"]["mlp"] == "gelu" for r in sgo)
    assert real["nemo2407-LLAMA2-70B-64"].scenario["training"]["precision"] == "fp8"   # type: ignore[index]
    b = real["megascale-175b-MegaScale-256"]                               # override: A100 assumed
    assert b.topology == "dgx-a100" and any("assumption" in a for a in b.assumptions)


def test_real_measured_step_derivations(real: dict[str, MappedRun]) -> None:
    with (REAL / "training" / "runs.csv").open(newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    seen = set()
    for r in real.values():
        if not r.supported:
            continue
        m, row = r.measured, rows[r.id]
        assert m is not None and r.scenario is not None
        seen.add(m.time_from)
        t = r.scenario["training"]
        if row["step_time_s"]:
            assert m.time_from == "step" and m.step_time_s == float(row["step_time_s"])
        elif row["tokens_per_s"]:
            assert m.time_from == "tokens"
            assert m.step_time_s == pytest.approx(t["global_batch"] * t["seq_len"] / float(row["tokens_per_s"]))
        elif row["tflops_per_chip"]:
            assert m.time_from == "tflops"
        else:
            assert m.time_from == "mfu" and row["mfu_pct"]
    assert seen == set(TIME_SOURCES)
    # Narayanan et al.'s TFLOP/s count the recompute pass (and the output head): converted, the
    # MFU is a little under 3/4 of their hardware-FLOP rate / 312 TFLOP/s.
    for i in ("narayanan21-t1-1.7B", "narayanan21-t1-145.6B", "narayanan21-t1-1008.0B"):
        m, hfu = real[i].measured, float(rows[i]["tflops_per_chip"]) / 312
        assert m is not None and m.flops_convention == "megatron-eq3"
        assert 0.68 * hfu < m.mfu < 0.75 * hfu, (i, m.mfu, hfu)
    # Where a source published both a step time (or tokens/s) and an MFU against the same BF16
    # peak with the same FLOP count, the re-normalised MFU agrees with it.
    for i in ("korthikanti22-530B-selseq", "megascale-175b-MegaScale-256", "megascale-175b-Megatron-LM-3072"):
        m = real[i].measured
        assert m is not None and m.published_mfu is not None
        assert m.mfu == pytest.approx(m.published_mfu, rel=0.015), i


def test_topology_chip_table_matches_topology_files() -> None:
    for topo, chip in TOPOLOGY_CHIPS.items():
        assert load_topology_spec(topo).chip.name == chip
    peaks_TFLOPs = {"dgx-a100": 312, "dgx-a100-40gb": 312, "hgx-a100-4nic": 312, "dgx-h100": 989.4, "dgx-h200": 990,
                    "dgx-b200": 2250, "gb200-nvl72": 2500, "dgx-b300": 2250, "gb300-nvl72": 2500,
                    "tpu-v4": 275, "tpu-v5e": 197, "tpu-v5p": 459, "tpu-v6e": 918}
    assert {t: CATALOGUE[c].bf16_flops / 1e12 for t, c in TOPOLOGY_CHIPS.items()} == pytest.approx(peaks_TFLOPs)


def test_repository_training_budgets() -> None:
    table = load_budgets(REAL / "budgets.toml")["training"]
    # the shared keys, and each Blackwell family's own p90 (and median, where it has one)
    assert set(BUDGETS) <= set(table) and all(v > 0 for v in table.values())
    assert {"step_p90_abs_pct_B200", "step_p90_abs_pct_B300"} <= set(table)


# ----------------------------------------------------------------------------- output and CLI

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clustersim")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_json_report_round_trips(data: Path) -> None:
    report = validate_training(data / "training", _fake(data / "training", 1.1))
    obj = json.loads(json.dumps(training_report_to_json(report)))
    assert obj["suite"] == "training" and len(obj["runs"]) == len(SUPPORTED)
    assert obj["unsupported"][0]["id"] == "v100-step" and "V100" in obj["unsupported"][0]["reason"]
    assert obj["splits"][1]["split"] == "test" and obj["splits"][1]["step_median_abs_pct"] == pytest.approx(10)
    assert obj["runs"][0]["scenario"]["cluster"]["topology"] == "dgx-a100" and obj["errors"] == []


@pytest.mark.parametrize(("factor", "code"), [(1.0, 0), (1.2, 1)])
def test_cli_training_suite(data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                            factor: float, code: int) -> None:
    fake = types.ModuleType("sim.validate.predictors")
    fake.TrainingPredictor = lambda: _fake(data / "training", factor)    # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sim.validate.predictors", fake)
    args = _parser().parse_args(["validate", "--suite", "training", "--data", str(data), "--json"])
    assert run_cli(args) == code
    obj = json.loads(capsys.readouterr().out)
    assert obj["suite"] == "training" and obj["budgets"] == BUDGETS and len(obj["budget_violations"]) == 3 * code
    assert run_cli(_parser().parse_args(["validate", "--suite", "training", "--data", str(data)])) == code
    out = capsys.readouterr().out
    assert "by split and family" in out and ("BUDGET EXCEEDED" in out) == bool(code)


def test_uneven_interleaved_runs_count_embedding_and_loss_as_layers(real: dict[str, MappedRun]) -> None:
    # Megatron-Bridge's 405B recipe (account_for_embedding/loss_in_pipeline_split): 126 + 2 layers
    # over pp 8 x 8 chunks of 2, the end stages one layer fewer.
    scn = real["mbridge-25.11-H100-LLAMA3.1_405B-1024"].scenario
    assert scn is not None
    par = scn["parallelism"]
    assert (par["virtual_stages"], par["first_stage_layers"], par["last_stage_layers"]) == (8, 15, 15)
    assert scenario_from_dict(scn).parallelism.stage_chunk_layers(0) == (1,) + (2,) * 7
    # ep 32 over dp 16: the experts fold over the tensor-parallel ranks, unsplit (etp 1, as the
    # Megatron-Bridge recipe runs them; tests/test_expert_layout.py has the rest)
    qwen = real["mbridge-25.11-H100-Qwen3_235B_a22B-256"]
    assert qwen.scenario is not None and qwen.scenario["parallelism"]["etp"] == 1
    assert any("expert_tensor_parallel_size 1" in a for a in qwen.assumptions)


def test_runs_that_play_one_step_are_scored_in_one_chunk() -> None:
    """``validate`` on several workers: the runs of the suite that play the same step (one
    configuration measured by two sources, e.g. MegaScale's Megatron-LM and MegaScale rows) go to
    one chunk whole, so one worker plays it once; every run is in exactly one chunk, and chunks
    keep to about six runs."""
    from sim.validate.training import _CHUNK, _chunks, play_key
    from sim.validate.training_map import map_runs

    runs = [m for m in map_runs(Path(__file__).resolve().parent.parent / "validation" / "training")
            if m.supported]
    chunks = _chunks(runs)
    assert sorted(i for c in chunks for i in c) == list(range(len(runs)))
    where = {i: k for k, c in enumerate(chunks) for i in c}
    by_key: dict[str, set[int]] = {}
    for i, m in enumerate(runs):
        by_key.setdefault(play_key(m.scenario or {}), set()).add(where[i])
    shared = [k for k, c in by_key.items() if sum(play_key(m.scenario or {}) == k for m in runs) > 1]
    assert shared and all(len(by_key[k]) == 1 for k in shared)
    assert max(len(c) for c in chunks) < 2 * _CHUNK


def test_dcn_layer_step_fit_recovers_a_planted_step_and_needs_multislice_runs(tmp_path: Path) -> None:
    """``fit_dcn_layer_step_s`` on one calibration run over two v5e slices whose measured step is
    the model's without the term plus 0.5 ms per layer's ring step gives back 0.5 ms; with no
    multi-slice calibration run it is a one-line ConfigError."""
    from sim import calibration as cal
    from sim.validate import fit_dcn_layer_step_s
    from sim.validate.predictors import TrainingPredictor

    with pytest.raises(ConfigError, match="no calibration run on several TPU slices"):
        fit_dcn_layer_step_s(_write(tmp_path / "none") / "training", lambda: TrainingPredictor())
    row = dict(id="v5e-2x", hardware="TPU v5e multislice (DCN)", chips="512",
               zero_or_fsdp="FSDP within slice, DCN data parallel across slices",
               recompute="remat_policy=full", precision="bf16", step_time_s="1.0", split="calibration",
               notes="derived: chips = 2 x 256", **{**_LLAMA, "global_batch_seqs": "512"})
    probe = _write(tmp_path / "probe", [row], overrides=[]) / "training"
    (mapped,) = map_runs(probe)
    assert mapped.supported and scenario_from_dict(mapped.scenario).cluster.pods == 2
    saved = cal.TPU_DCN_LAYER_STEP_S
    try:
        cal.TPU_DCN_LAYER_STEP_S = 0.0
        base_s = TrainingPredictor(dict(cal.STACK_EFFICIENCY))(mapped.scenario).step_time_s
    finally:
        cal.TPU_DCN_LAYER_STEP_S = saved
    planted = base_s + 32 * 2 * (2 - 1) * 5e-4                        # 32 layers, 2 slices
    root = _write(tmp_path / "one", [{**row, "step_time_s": f"{planted:.9f}"}], overrides=[])
    fitted = fit_dcn_layer_step_s(root / "training", lambda: TrainingPredictor(dict(cal.STACK_EFFICIENCY)))
    assert fitted == pytest.approx(5e-4, abs=1e-5)
