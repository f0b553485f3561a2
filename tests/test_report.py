"""Views of result records (sim/report.py): DESIGN.md's JSON fields and nccl-tests' columns,
built from hand-made records so that each expected value is visible here."""

from __future__ import annotations

import math

import pytest

from sim.collectives import CollectiveResult
from sim.report import collective_csv, dump_json, step_json, sweep_text
from sim.results import StepResult


def _step(**extra: object) -> StepResult:
    return StepResult(
        scenario="s", topology="dgx-h100", chip="H100-SXM", chips=8, step_time_s=2.0,
        tokens_per_step=16_000, model_flops_per_step=8e15, peak_flops_per_chip=1e15,
        memory_per_chip_GiB=40.0, memory_breakdown_GiB={"weights": 40.0},
        breakdown_s={"compute": 1.5, "exposed_comm": 0.5}, usd_per_chip_hour=3.6,
        parallelism={"tp": 8}, critical_stage=0, engine_events=10, seed=0, extra=dict(extra))


def test_step_json_has_the_design_fields_and_the_extras() -> None:
    out = step_json(_step(goodput=0.9))
    for key in ("scenario", "chips", "step_time_s", "tokens_per_s", "tokens_per_s_per_chip", "mfu",
                "model_flops_per_step", "memory_per_chip_GiB", "breakdown_s",
                "cost_usd_per_million_tokens"):
        assert key in out, key
    assert out["tokens_per_s"] == 8_000 and out["tokens_per_s_per_chip"] == 1_000
    assert out["mfu"] == pytest.approx(8e15 / (2.0 * 8 * 1e15))      # PaLM: model FLOPs / peak
    # 8 chips x $3.6/h = $0.008/s; 8,000 tokens/s -> $1 per million tokens.
    assert out["cost_usd_per_million_tokens"] == pytest.approx(1.0)
    assert sum(out["breakdown_s"].values()) == out["step_time_s"] and out["goodput"] == 0.9


def test_dump_json_refuses_non_finite_numbers() -> None:
    assert dump_json({"a": 1.5}) == '{"a": 1.5}'
    with pytest.raises(ValueError):
        dump_json({"a": math.nan})


def test_collective_csv_has_nccl_tests_columns() -> None:
    r = CollectiveResult("allreduce", "ring", "simple", 1024, 8, 1e-5, 1e-6, 9e-6)
    lines = collective_csv([r], "float", 4).splitlines()
    assert lines[0] == "size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps"
    # algbw = 1024 B / 10 us = 0.1024 GB/s; busbw = algbw x 2 (n - 1) / n = 0.1792 GB/s
    assert lines[1] == "1024,256,float,10.00,0.10,0.18"


def test_sweep_text_shows_why_a_row_did_not_run() -> None:
    rows = [{"cluster.chips": 8, "status": "ok", "step_time_s": 2.0, "mfu": 0.5},
            {"cluster.chips": 12, "status": "invalid", "error": "not whole nodes"}]
    text = sweep_text(rows, ["cluster.chips"], table_file="t.csv")
    lines = text.splitlines()
    assert lines[1].split()[:4] == ["8", "ok", "2", "50.0%"]
    assert lines[2].endswith("  not whole nodes") and lines[-1] == "table: t.csv"
