"""clustersim plan: the JSON fields scripts use, deadlines met and missed, bad input, the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.plan import layouts


def _plan(argv: list[str], capsys, status: int = 0) -> dict:
    assert main(["plan", *argv, "--json"]) == status
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow  # two searches up to 256 chips (~20 s); plan-json's golden is the quick plan
def test_plan_answers_per_topology(capsys, tmp_path: Path) -> None:
    png = tmp_path / "p.png"
    out = _plan(["--model", "llama3-8b", "--tokens", "300B", "--days", "30", "--max-chips", "256",
                 "--topology", "dgx-h100,tpu-v5e", "--price", "tpu-v5e=1.5", "--plot", str(png)], capsys)
    assert set(out) == {"dgx-h100", "tpu-v5e"}
    for name, e in out.items():
        for key in ("chips", "days", "cost_usd", "chip_hours", "layout"):
            assert key in e, (name, key)
        assert e["meets_deadline"] and e["days"] <= 30
        assert e["cost_usd"] == pytest.approx(e["chip_hours"] * e["usd_per_chip_hour"], rel=1e-9)
        assert e["chip_hours"] == pytest.approx(e["chips"] * e["days"] * 24, rel=1e-9)
        assert e["smallest"]["chips"] <= e["cheapest"]["chips"] or \
            e["cheapest"]["cost_usd"] <= e["smallest"]["cost_usd"]
        assert {"tp", "pp", "zero", "micro_batch", "recompute"} <= set(e["layout"])
    assert out["tpu-v5e"]["usd_per_chip_hour"] == 1.5 and out["tpu-v5e"]["price_source"] == "--price"
    assert png.stat().st_size > 5_000
    for e in out.values():                 # the confirmed step's parts add up to the step
        assert sum(e["breakdown_s"].values()) == pytest.approx(e["step_time_s"], rel=1e-6)


def test_the_report_says_where_each_step_goes() -> None:
    from sim.report.plan import _where
    c = {"mfu": 0.5, "breakdown_s": {"compute": 8.0, "exposed_comm": 1.5, "pipeline_bubble": 0.5,
                                     "optimizer": 0.001}}
    line = _where(c)
    assert line.startswith("MFU 50.0%, step compute 80%, exposed communication 15%, pipeline "
                           "bubble 5%")
    assert "optimizer" not in line.split(";")[0]              # under half a percent: left out
    assert line.endswith("loses most to exposed communication (1.50 s a step)")
    assert _where({"mfu": 0.4, "breakdown_s": {"compute": 5.0}}).endswith("the kernels' yield")


@pytest.mark.slow  # the 70B search up to 128 chips, twice (~20 s)
def test_an_impossible_deadline_shows_the_closest(capsys) -> None:
    # answered, then exit 3: a valid plan that cannot run (issue 34)
    out = _plan(["--model", "llama3-70b", "--tokens", "15T", "--days", "1", "--max-chips", "128",
                 "--topology", "dgx-h100"], capsys, status=3)
    e = out["dgx-h100"]
    assert not e["meets_deadline"] and e["smallest"] is None and e["days"] > 1
    assert main(["plan", "--model", "llama3-70b", "--tokens", "15T", "--days", "1",
                 "--max-chips", "128", "--topology", "dgx-h100"]) == 3
    assert "no cluster up to the largest tried meets 1 days; closest" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--model", "gpt5"], r"--model: unknown model 'gpt5'; valid: "),
    (["--tokens", "lots"], r"--tokens: expected a token count"),
    (["--days", "-3"], r"--days: expected a number of days"),
    (["--topology", "dgx-h999"], r"unknown topology 'dgx-h999'"),
    (["--price", "dgx-h100=free"], r"--price: expected TOPOLOGY=USD_PER_CHIP_HOUR"),
    (["--price", "tpu-v5p=3"], r"--price: tpu-v5p is not among --topology"),
])
def test_bad_plan_input(capsys, argv, match) -> None:
    import re

    base = {"--model": "llama3-8b", "--tokens": "1T", "--days": "30", "--topology": "dgx-h100"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    args = [x for kv in base.items() for x in kv] + ["--max-chips", "64"]
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(match, err), err


def test_layouts_divide_the_model_and_the_batch() -> None:
    for lay in layouts(64, 80, 64, True, 8, 512):
        dp = 64 // (lay["tp"] * lay["pp"])
        assert 80 % (lay["pp"] * lay["virtual_stages"]) == 0 and lay["tp"] <= 8
        assert 512 % (lay["micro_batch"] * dp) == 0


def test_validate_plot_axes(tmp_path: Path, capsys) -> None:
    from sim.plots import plot_validation

    fig = plot_validation([(1.0, 1.05, "a"), (2.0, 1.8, "b")], "step time", "s", tmp_path / "v.png", "t")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "measured step time (s)" and ax.get_ylabel() == "predicted step time (s)"
    assert main(["validate", "--suite", "compute", "--plot", str(tmp_path / "c.svg")]) == 0
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")
    assert main(["validate", "--suite", "failures", "--plot", str(tmp_path / "f.png")]) == 2


def test_a_rack_of_72_takes_the_nearest_batch_its_replicas_divide() -> None:
    """NVL72: 72 GPUs make 9, 18 or 36 replicas, which no power-of-two batch divides; each layout
    takes the nearest batch it does (never fewer sequences than replicas)."""
    from sim.plan import layouts
    lays = list(layouts(72, 80, 64, True, 72, 512))
    assert lays, "an NVL72 rack must have layouts"
    for lay in lays:
        dp = 72 // (lay["tp"] * lay["pp"])
        assert lay["global_batch"] % (lay["micro_batch"] * dp) == 0
        assert abs(lay["global_batch"] - 512) <= lay["micro_batch"] * dp / 2
    # a power-of-two cluster keeps the batch asked for
    assert {lay["global_batch"] for lay in layouts(64, 80, 64, True, 8, 512)} == {512}


def test_the_floor_skips_layouts_without_changing_the_plan(monkeypatch) -> None:
    """The search times layouts in the order of their floors and stops at a floor above the
    fourth-best step: its pick, runners-up and every confirmed size equal those of timing every
    layout (a floor of 0 s times them all), and it timed fewer."""
    import sim.engine
    from sim.plan import RANKED, PlanRequest, plan
    from sim.report.plan import plan_json

    req = PlanRequest(model="llama3-8b", tokens=300e9, days=30, topologies=("dgx-h100", "tpu-v5e"),
                      max_chips=16, prices={"tpu-v5e": 1.5})
    skipping = plan(req)
    monkeypatch.setattr(sim.engine, "step_floor", lambda *a, **k: 0.0)
    every = plan(req)
    assert plan_json(skipping, req) == plan_json(every, req)
    timed = untimed = 0
    for a, b in zip(skipping, every):
        for chips, cands in b.by_size.items():
            assert [c.layout for c in a.by_size[chips][:RANKED]] == [c.layout for c in cands[:RANKED]]
            assert [c.step_time_s for c in a.by_size[chips][:RANKED]] == \
                [c.step_time_s for c in cands[:RANKED]]
            timed += len(a.by_size[chips])
            untimed += len(cands) - len(a.by_size[chips])
    assert untimed > timed > 0


def test_xla_s_fit_waits_until_a_layout_is_timed_without_changing_the_plan(monkeypatch) -> None:
    """A TPU layout over its memory that XLA's rematerialization makes fit is screened on one
    trial, floored with no recomputation, and fitted only when it is timed (``sim.screen``):
    the same layouts screened and refused, the same ranked layouts and plan as fitting every one
    first, with fewer fits."""
    import sim.screen
    import sim.workload.xla_remat as xla
    from sim.plan import RANKED, PlanRequest, plan
    from sim.report.plan import plan_json

    fits: list[int] = []
    real_fit = xla.xla_fit

    def counted(*a):
        out = real_fit(*a)
        fits.append(out[0] is not a[0])
        return out
    monkeypatch.setattr(xla, "xla_fit", counted)
    req = PlanRequest(model="llama3-70b", tokens=15e12, days=90, topologies=("tpu-v5p",), max_chips=64)
    waiting = plan(req)
    waited = sum(fits)
    fits.clear()
    monkeypatch.setattr(sim.screen, "_deferred", lambda *a: False)
    eager = plan(req)
    assert plan_json(waiting, req) == plan_json(eager, req)
    a, b = waiting[0], eager[0]
    assert (a.layouts_screened, a.refused) == (b.layouts_screened, b.refused)
    for chips, cands in b.by_size.items():
        assert [(c.layout, c.step_time_s, c.memory_GiB) for c in a.by_size[chips][:RANKED]] == \
            [(c.layout, c.step_time_s, c.memory_GiB) for c in cands[:RANKED]]
    # (17 of 202 fits when MaxText's TP overlap held in the forward; 65 of 203 since its forward
    # TP collectives wait, which spreads the best steps and times more layouts)
    assert 0 < waited < sum(fits) / 2


def test_topologies_searched_in_processes_plan_as_one_process_does() -> None:
    """``plan`` on two cores searches each topology in its own process: the same plans, in the
    order asked, as the search in this process; a topology's error comes back as raised here."""
    from sim.errors import ConfigError
    from sim.plan import PlanRequest, plan
    from sim.report.plan import plan_json

    req = PlanRequest(model="llama3-8b", tokens=300e9, days=30, topologies=("tpu-v5e", "dgx-h100"),
                      max_chips=16, prices={"tpu-v5e": 1.5})
    alone = plan(req)
    spread = plan(req, workers=2)
    assert [p.topology for p in spread] == ["tpu-v5e", "dgx-h100"]
    assert plan_json(spread, req) == plan_json(alone, req)
    assert [p.layouts_screened for p in spread] == [p.layouts_screened for p in alone] != [0, 0]
    bad = PlanRequest(**{**req.__dict__, "max_chips": 4})      # below one DGX node
    with pytest.raises(ConfigError, match="--max-chips: 4 is below the smallest dgx-h100"):
        plan(bad, workers=2)


@pytest.mark.parametrize("topology, chips, model", [
    ("dgx-h100", 64, "llama3-70b"), ("tpu-v5p", 128, "llama3-70b"),
    ("dgx-h100", 16, {"preset": "mixtral-8x7b", "layers": 8})])
def test_a_layout_read_alone_is_the_scenario_read_whole(topology: str, chips: int, model) -> None:
    """The plan search reads a size's first scenario whole and only the training and parallelism
    sections of the others (``sim.config.with_layout``): every layout of the size gives the same
    scenario, or the same error, as reading it whole."""
    from sim.config import scenario_from_dict, with_layout
    from sim.errors import ConfigError
    from sim.plan import PlanRequest, _scenario

    req = PlanRequest(model=model, tokens=1e12, days=30, topologies=(topology,),
                      prices={topology: 2.0})
    first = None
    compared = refused = 0
    for lay in layouts(chips, 80 if model == "llama3-70b" else 8, 64 if model == "llama3-70b" else 32,
                       topology.startswith("dgx"), 8, 512):
        for seq in (req.seq_len, 4096):
            raw = _scenario(PlanRequest(**{**req.__dict__, "seq_len": seq}), topology, chips, lay,
                            512, topology.startswith("dgx"))
            whole = scenario_from_dict(raw, "plan")
            first = first or whole
            assert with_layout(first, raw) == whole
            compared += 1
            # a layout the model or the batch refuses: the same message
            for section, key, value in (("parallelism", "tp", 3), ("parallelism", "pp", 7),
                                        ("training", "micro_batch", 0)):
                bad = {**raw, section: {**raw[section], key: value}}
                with pytest.raises(ConfigError) as e:
                    scenario_from_dict(bad, "plan")
                with pytest.raises(ConfigError) as alone:
                    with_layout(first, bad)
                assert str(alone.value) == str(e.value)
                refused += 1
    assert compared > 20 and refused == 3 * compared
