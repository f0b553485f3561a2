"""sweep and run --set: overrides, ranges, rows, scaling efficiency, resume, workers, Dask, plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.config import apply_overrides, read_scenario_raw
from sim.errors import ConfigError
from sim.sweep import parse_over, read_table, run_sweep, scaling_efficiency

REPO = Path(__file__).resolve().parent.parent
S70 = str(REPO / "scenarios" / "llama3-70b-1024xh100.yaml")


def test_set_overrides_are_validated_like_the_file() -> None:
    raw, _, _ = read_scenario_raw("default")
    out = apply_overrides(raw, ["cluster.chips=16", "parallelism.tp=4", "model.layers=16",
                                "stragglers.slow_fraction=0.01"])
    assert out["cluster"]["chips"] == 16 and out["parallelism"]["tp"] == 4
    assert out["model"] == {"preset": "llama3-8b", "layers": 16}
    assert raw["cluster"]["chips"] == 8                        # the base is not modified
    for bad, match in [("cluster.chipz=3",
                        r"unknown key 'cluster.chipz'; valid under cluster: background_load, chip, chips"),
                       ("parallelism=4", r"'parallelism' is a section"),
                       ("nokey", r"expected KEY=VALUE"),
                       ("bogus.x=1", r"unknown key 'bogus.x'"),
                       ("cluster.chips=[1, 2]", r"expected one value")]:
        with pytest.raises(ConfigError, match=match):
            apply_overrides(raw, [bad])


def test_one_tensor_of_a_custom_remat_policy_can_be_set() -> None:
    """training.remat_policy.TENSOR sets one tensor of MaxText's custom policy (added to a mapping,
    or starting one over `recompute` / `custom`); a named preset is refused, not replaced."""
    raw, _, _ = read_scenario_raw(str(REPO / "scenarios" / "llama3-8b-tpu-v6e-256.yaml"))
    out = apply_overrides(raw, ["training.remat_policy.query_proj=offload",
                                "training.remat_policy.key_proj=device"])
    assert out["training"]["remat_policy"] == {"query_proj": "offload", "key_proj": "device"}
    assert "remat_policy" not in raw["training"]             # the base is not modified
    custom = apply_overrides(raw, ["training.remat_policy=custom"])
    assert apply_overrides(custom, ["training.remat_policy.mlpwo=offload"])["training"][
        "remat_policy"] == {"mlpwo": "offload"}
    full = apply_overrides(raw, ["training.remat_policy=full"])
    with pytest.raises(ConfigError, match=r"named policy 'full'.*custom"):
        apply_overrides(full, ["training.remat_policy.mlpwo=offload"])
    # a scenario whose `recompute` keeps more than full remat would lose it without a word
    selective = apply_overrides(raw, ["training.recompute=selective"])
    with pytest.raises(ConfigError, match=r"not set \(training.recompute 'selective' decides"):
        apply_overrides(selective, ["training.remat_policy.mlpwo=offload"])
    assert apply_overrides(selective, ["training.remat_policy=custom",
                                       "training.remat_policy.mlpwo=offload"])["training"][
        "remat_policy"] == {"mlpwo": "offload"}
    with pytest.raises(ConfigError, match=r"given after training.remat_policy.mlpwo"):
        apply_overrides(raw, ["training.remat_policy.mlpwo=offload", "training.remat_policy=full"])
    with pytest.raises(ConfigError, match=r"nested too deeply"):
        apply_overrides(raw, ["training.remat_policy.mlpwo.x=offload"])
    assert main(["run", "llama3-8b-tpu-v6e-256", "--set", "training.remat_policy.foo=offload"]) == 2


def test_ranges_and_value_lists() -> None:
    raw, _, _ = read_scenario_raw("default")
    assert parse_over("cluster.chips=64..8192x2", raw).values == (64, 128, 256, 512, 1024, 2048, 4096, 8192)
    assert parse_over("parallelism.tp=1..4", raw).values == (1, 2, 3, 4)
    assert parse_over("training.precision=bf16,fp8", raw).values == ("bf16", "fp8")
    for bad, match in [("cluster.chips=64..8", r"empty"), ("cluster.chips=", r"no values"),
                       ("cluster.bogus=1,2", r"unknown key"), ("cluster.chips=8..64x1", r"must be > 1"),
                       ("cluster.chips=8,8", r"appears twice")]:
        with pytest.raises(ConfigError, match=match):
            parse_over(bad, raw)


def test_linear_scaling_has_efficiency_one() -> None:
    rows = [{"status": "ok", "chips": c, "tokens_per_s_per_chip": 1000.0, "cluster.chips": c}
            for c in (8, 16, 32)]
    rows.append({"status": "infeasible", "cluster.chips": 64})
    scaling_efficiency(rows, ["cluster.chips"])
    assert [r["scaling_efficiency"] for r in rows] == [1.0, 1.0, 1.0, ""]


@pytest.mark.slow  # 16 70B points and a process pool (~6 s)
def test_sweep_rows_resume_and_workers(tmp_path: Path) -> None:
    raw, src, _ = read_scenario_raw(S70)
    axes = [parse_over("cluster.chips=64..512x2", raw), parse_over("parallelism.zero=1,3", raw)]
    out = tmp_path / "s.csv"
    one = run_sweep(raw, src, axes, out=out)
    assert len(one) == 8 and {r["status"] for r in one} == {"ok"}
    assert all(0 < float(r["scaling_efficiency"]) <= 1.0 + 1e-9 for r in one)
    cols = read_table(out)[0]
    for c in ("cluster.chips", "parallelism.zero", "step_time_s", "tokens_per_s", "mfu",
              "breakdown_s.compute", "software.framework", "scaling_efficiency"):
        assert c in cols
    # Resume: a table with half the points gets the other half; nothing is run twice.
    from sim.sweep import write_table

    write_table(out, one[:4])
    calls: list[int] = []
    again = run_sweep(raw, src, axes, out=out,
                      progress=lambda it, n, d: (calls.append(n), it)[1])
    assert calls == [4]
    assert [r["step_time_s"] for r in again][4:] == [r["step_time_s"] for r in one][4:]
    two = run_sweep(raw, src, axes, workers=2)
    assert [r["step_time_s"] for r in two] == [r["step_time_s"] for r in one]


def test_bad_points_are_rows_not_aborts(tmp_path: Path, capsys) -> None:
    assert main(["sweep", S70, "--over", "parallelism.tp=3,8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in rows] == ["invalid", "ok"]
    assert "parallelism" in rows[0]["error"]


@pytest.mark.slow  # starts a Dask cluster (~3 s)
def test_dask_local_cluster_gives_the_same_rows() -> None:
    distributed = pytest.importorskip("distributed")
    raw, src, _ = read_scenario_raw(S70)
    axes = [parse_over("cluster.chips=64..256x2", raw)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        on_dask = run_sweep(raw, src, axes, scheduler=cluster.scheduler_address)
    assert on_dask == run_sweep(raw, src, axes)


@pytest.mark.slow  # waits out the connection timeout (~5 s)
def test_unreachable_scheduler_is_one_line(capsys) -> None:
    assert main(["sweep", "default", "--over", "cluster.chips=8,16",
                 "--scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach a Dask scheduler" in err


def test_parquet_and_plots(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    out, png = tmp_path / "s.parquet", tmp_path / "s.png"
    assert main(["sweep", S70, "--over", "cluster.chips=64..256x2", "--out", str(out),
                 "--plot", str(png)]) == 0
    rows = read_table(out)
    assert len(rows) == 3 and rows[0]["status"] == "ok"
    assert png.stat().st_size > 10_000
    from sim.plots import plot_breakdown, plot_scaling

    fig = plot_scaling(rows, ["cluster.chips"], tmp_path / "a.svg")
    assert [ax.get_xlabel() for ax in fig.axes] == ["chips", "chips"]
    assert fig.axes[0].get_ylabel() == "tokens/s per chip"
    assert "scaling efficiency" in fig.axes[1].get_ylabel()
    fig = plot_breakdown(rows, ["cluster.chips"], tmp_path / "b.pdf")
    assert fig.axes[0].get_ylabel() == "step time (s)"
    assert (tmp_path / "b.pdf").read_bytes()[:4] == b"%PDF"



def test_the_scaling_plot_draws_the_measured_points_it_is_given(tmp_path: Path) -> None:
    from sim.plots import plot_scaling
    from sim.validate import measured_points, sweep_overlay

    rows = [{"status": "ok", "scenario": "s", "model": "llama3-70b", "topology": "dgx-h100",
             "chip": "H100-SXM", "chips": c, "tokens_per_s_per_chip": 1500.0, "scaling_efficiency": 1.0}
            for c in (64, 128)]
    pts = sweep_overlay(rows, ["cluster.chips"])      # published Llama 3 70B runs on DGX H100
    assert pts == measured_points("llama3-70b", "dgx-h100") != []
    assert sweep_overlay(rows, ["parallelism.tp"]) == []       # not a scaling plot: nothing to overlay
    fig = plot_scaling(rows, ["cluster.chips"], tmp_path / "s.svg", measured=pts, measured_label="m")
    (dots,) = fig.axes[0].collections
    assert dots.get_label() == "m" and len(dots.get_offsets()) == len(pts)
    fig = plot_scaling(rows, ["cluster.chips"], tmp_path / "t.svg")
    assert not fig.axes[0].collections                        # draws only what it is given

def test_weak_scaling_keeps_the_batch_per_chip(capsys) -> None:
    assert main(["sweep", S70, "--over", "cluster.chips=256..1024x2", "--weak", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    per_chip = {r["chips"]: r["tokens_per_s"] * r["step_time_s"] / r["chips"] for r in rows}
    assert len(set(round(v) for v in per_chip.values())) == 1     # tokens per step per chip fixed
    assert rows[0]["scaling_efficiency"] == 1.0


def test_a_wrong_type_in_over_is_an_input_error(capsys) -> None:
    assert main(["sweep", S70, "--over", "cluster.chips=64,abc"]) == 2
    assert "cluster.chips: expected an integer" in capsys.readouterr().err
    assert main(["sweep", S70, "--over", "training.precision=bf16,fp4"]) == 2
    assert main(["sweep", S70, "--over", "parallelism.tp=3,8", "--json"]) == 0   # a combination: rows


def test_review_cases_ranges_resume_parquet_tokens(tmp_path: Path, capsys) -> None:
    raw, src, _ = read_scenario_raw("default")
    assert parse_over("cluster.chips=8..32+8", raw).values == (8, 16, 24, 32)
    assert parse_over("stragglers.compute_jitter_sigma=0.1..0.3+0.1", raw).values == (0.1, 0.2, 0.3)
    # Resume from CSV: typed cells, efficiency against the same base, earlier points kept.
    out = tmp_path / "r.csv"
    args = ["sweep", S70, "--over", "cluster.chips=64,128", "--over", "parallelism.tp=4,8",
            "--out", str(out), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    args[3] = "cluster.chips=64,128,256"
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    def clean(rows):
        return [{k: v for k, v in r.items() if v != ""} for r in rows]

    assert clean(second[:4]) == clean(first)
    assert isinstance(second[0]["parallelism.tp"], int)
    assert all(r["scaling_efficiency"] < 1 for r in second[4:])
    # Another base on the same file is refused, not silently reused.
    assert main(args[:-1] + ["--set", "training.seq_len=2048"]) == 2
    assert "holds rows of another sweep" in capsys.readouterr().err
    # Parquet with an invalid point; token budgets change the cost columns.
    pytest.importorskip("pyarrow")
    pq = tmp_path / "p.parquet"
    assert main(["sweep", "default", "--over", "parallelism.tp=2,3", "--out", str(pq)]) == 0
    assert [r["status"] for r in read_table(pq)] == ["ok", "invalid"]
    capsys.readouterr()
    assert main(["sweep", "default", "--over", "training.tokens=1T,2T", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[1]["cost_usd"] == pytest.approx(2 * rows[0]["cost_usd"])


def test_zero_goodput_is_infeasible(capsys) -> None:
    assert main(["run", "default", "--set", "cluster.chips=1024", "--set", "training.global_batch=512",
                 "--set", "failures.horizon_days=0.01", "--set", "failures.rate_scale=10000",
                 "--set", "failures.checkpoint_interval_min=1000", "--set", "training.tokens=1e6"]) == 3
    assert "goodput 0" in capsys.readouterr().err
