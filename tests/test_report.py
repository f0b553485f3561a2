"""Views of result records (sim/report/): DESIGN.md's JSON fields and nccl-tests' columns,
built from hand-made records so that each expected value is visible here."""

from __future__ import annotations

import math

import pytest

from sim.collectives import CollectiveResult
from sim.config import load_scenario
from sim.cost import CostRecord, TimeToTrain
from sim.goodput import FailureRecord
from sim.report import collective_csv, dump_json, step_json, step_text, sweep_text
from sim.results import RunResult, StepResult


def _step() -> StepResult:
    return StepResult(
        scenario="s", topology="dgx-h100", chip="H100-SXM", chips=8, step_time_s=2.0,
        tokens_per_step=16_000, model_flops_per_step=8e15, peak_flops_per_chip=1e15,
        memory_per_chip_GiB=40.0, memory_breakdown_GiB={"weights": 40.0},
        breakdown_s={"compute": 1.5, "exposed_comm": 0.5}, usd_per_chip_hour=3.6,
        parallelism={"tp": 8, "pp": 1, "cp": 1, "ep": 1, "dp": 1, "zero": 1, "zero_group": 1,
                     "slices": 1, "schedule": "1f1b", "microbatches": 4},
        critical_stage=0, engine_events=10, seed=0,
        software={"framework": "megatron-te", "attention": "cudnn", "elementwise": "fused",
                  "fp8_linear": True, "tp_comm_overlap": True, "optimizer": "adamw_fused"})


_FAILURES = FailureRecord(goodput=0.9, goodput_interval=(0.85, 0.95), interruptions=3.0,
                          interruptions_by_cause={"gpu": 2.0, "network": 1.0}, horizon_days=30.0,
                          mtbf_h=240.0, checkpoint_interval_min=30.0, hardware_swap_s=600.0,
                          effective_tokens_per_s=7_200.0)


def _run(**parts: object) -> RunResult:
    return RunResult(load_scenario("default"), _step(), CostRecord(3.6, "test"), **parts)  # type: ignore[arg-type]


def test_step_json_has_the_design_fields_and_the_extras() -> None:
    out = step_json(_run(failures=_FAILURES))
    for key in ("scenario", "chips", "step_time_s", "tokens_per_s", "tokens_per_s_per_chip", "mfu",
                "model_flops_per_step", "memory_per_chip_GiB", "breakdown_s",
                "cost_usd_per_million_tokens", "goodput", "interruptions", "goodput_interval"):
        assert key in out, key
    assert out["tokens_per_s"] == 8_000 and out["tokens_per_s_per_chip"] == 1_000
    assert out["mfu"] == pytest.approx(8e15 / (2.0 * 8 * 1e15))      # PaLM: model FLOPs / peak
    # 8 chips x $3.6/h = $0.008/s; 8,000 tokens/s -> $1 per million tokens.
    assert out["cost_usd_per_million_tokens"] == pytest.approx(1.0)
    assert sum(out["breakdown_s"].values()) == out["step_time_s"] and out["goodput"] == 0.9
    # DESIGN.md: interruptions is the count; the split per cause is interruptions_by_cause.
    assert out["interruptions"] == 3.0 and out["interruptions_by_cause"] == {"gpu": 2.0, "network": 1.0}
    assert out["usd_per_chip_hour"] == 3.6 and out["price_source"] == "test"
    assert "token_budget" not in out and "link_sharing_s" not in out


def test_the_time_to_train_is_in_the_json_and_the_table() -> None:
    """A token budget at 8,000 tokens/s: 8.64e9 tokens take 1e6 s = 11.6 days, 8 x 1e6 / 3600 =
    2,222 chip-hours at $3.6 = $8,000."""
    cost = CostRecord(3.6, "test", TimeToTrain(8.64e9, 1e6, False), 2_222.2, 8_000.0, None)
    r = RunResult(load_scenario("default"), _step(), cost)
    out = step_json(r)
    assert out["train_days"] == pytest.approx(1e6 / 86400) and out["cost_usd"] == 8_000.0
    assert "energy_MWh" not in out and out["goodput_applied"] is False
    assert "  to train         8.64e+09 tokens: 11.6 days, 2,222 chip-hours, $8,000" in step_text(r)


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
