"""Expert layers' own layout (MoE parallel folding): parallelism.etp and edp, the folded expert
groups of ``Layout``, their refusals, and the training suite's mapping of ETP.

Megatron-Core (megatron/core/parallel_state.py, ``initialize_model_parallel``) builds a second
rank generator for the expert layers, order tp-ep-dp-pp with tp = expert_tensor_parallel_size
(default: tensor_model_parallel_size), ep = expert_model_parallel_size and dp = world / (etp x ep x
pp); ``_megatron_groups`` below restates its group rule from that definition, as the oracle.
"""

from __future__ import annotations

import csv
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sim.config import ParallelismConfig, scenario_from_dict
from sim.errors import ConfigError
from sim.validate.training_map import map_runs
from sim.validate.training_parallel import parallelism
from sim.validate.training_rows import RowReader
from sim.validate.training_rules import _Unsupported
from sim.workload.layout import Layout

REPO = Path(__file__).resolve().parent.parent
QWEN3_235B = "mbridge-25.11-H100-Qwen3_235B_a22B-256"


def _scn(par: dict[str, Any], model: str = "mixtral-8x7b", chips: int = 64) -> Any:
    return scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": chips}, "model": model,
                               "training": {"seq_len": 4096}, "parallelism": par}, "test.yaml")


def _layout(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int = 0, offset: int = 0) -> Layout:
    return Layout(tp, cp, dp, pp, ep, shard_dp=dp, replicas=1, offset=offset, etp=etp)


# ----------------------------------------------------------------------------- the config


def test_etp_defaults_to_tp_and_edp_is_what_the_experts_leave() -> None:
    par = _scn({"tp": 2, "ep": 4}).parallelism
    assert (par.etp, par.dp, par.edp) == (2, 32, 8)              # 2 x 32 / (2 x 4)
    assert par.plan_error == ""
    folded = _scn({"tp": 2, "ep": 8, "etp": 1}).parallelism        # 2 x 32 / (1 x 8)
    assert (folded.etp, folded.edp) == (1, 8) and folded.plan_error == ""
    assert _scn({"tp": 8}, model="llama3-8b").parallelism.etp == 8   # dense: etp = tp, no refusal


def test_ep_may_fold_over_tensor_and_context_parallel_ranks() -> None:
    # ep 8 does not divide dp = 4; it divides tp x dp = 16 once the experts are unsplit (etp 1)
    par = _scn({"tp": 4, "ep": 8, "etp": 1}, chips=16).parallelism
    assert par.dp == 4 and par.edp == 2 and par.plan_error == ""
    # etp = tp with cp > 1: ep divides cp x dp = 8, not dp = 4
    par = _scn({"tp": 2, "cp": 2, "ep": 8}, chips=16).parallelism
    assert par.dp == 4 and par.edp == 1 and par.plan_error == ""


@pytest.mark.parametrize("par, model, chips, match", [
    ({"tp": 1, "etp": 2}, "llama3-8b", 64,
     r"parallelism.etp: 2 needs an MoE model \(model.moe\); valid: leave it out \(it defaults to tp = 1\)"),
    ({"tp": 8, "ep": 4}, "llama3-8b", 64, r"parallelism.ep: 4 needs an MoE model"),
    ({"tp": 1, "ep": 3}, "mixtral-8x7b", 64, r"parallelism.ep: 3 does not divide model.moe.experts = 8"),
    ({"tp": 8, "ep": 4}, "mixtral-8x7b", 16,              # etp = tp, cp = 1: today's rule and words
     r"parallelism.ep: 4 does not divide dp = 2; valid: a divisor of dp, or parallelism.etp below "
     r"tp = 8 so that ep x etp divides tp x dp = 16$"),
    ({"tp": 2, "ep": 8, "etp": 16}, "mixtral-8x7b", 64,
     r"parallelism.ep: ep x etp = 8 x 16 = 128 does not divide the tp x cp x dp = 2 x 1 x 32 = 64 "
     r"ranks of a pipeline stage; valid: ep and etp whose product divides 64$"),
    ({"tp": 2, "cp": 2, "ep": 8, "etp": 4}, "mixtral-8x7b", 16,
     r"ep x etp = 8 x 4 = 32 does not divide the tp x cp x dp = 2 x 2 x 4 = 16 ranks"),
])
def test_plans_the_experts_cannot_fold_are_refused(par: dict[str, Any], model: str, chips: int,
                                                     match: str) -> None:
    s = _scn(par, model, chips)
    assert s.parallelism.plan_error.startswith("test.yaml: ")
    with pytest.raises(ConfigError, match=match):
        s.parallelism.checked()


@pytest.mark.parametrize("value, match", [
    (0, r"test.yaml: parallelism.etp: must be >= 1, got 0"),
    ("two", r"test.yaml: parallelism.etp: expected an integer, got 'two'"),
    (True, r"parallelism.etp: expected an integer"),
])
def test_bad_etp_values_are_input_errors(value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _scn({"tp": 2, "ep": 4, "etp": value})


def test_cli_refuses_etp_on_a_dense_model_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {topology: dgx-h100, chips: 8}\nmodel: llama3-8b\n"
                   "parallelism: {tp: 2, etp: 1}\n")
    r = subprocess.run([sys.executable, "-m", "sim", "run", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "parallelism.etp: 1 needs an MoE model" in r.stderr


# ----------------------------------------------------------------------------- the layout


def _megatron_groups(sizes: list[tuple[str, int]], vary: set[str]) -> list[list[int]]:
    """Megatron's groups of the *vary* dimensions: sizes in rank order (first fastest); one group
    per setting of the other dimensions (first fastest), its members the *vary* dimensions' ranks
    (first fastest)."""
    strides, n = {}, 1
    for name, size in sizes:
        strides[name] = n
        n *= size

    def ranks(names: list[str]) -> list[int]:
        dims = [range(dict(sizes)[k]) for k in names]
        return [sum(i * strides[k] for k, i in zip(names, idx))
                for idx in (tuple(reversed(p)) for p in itertools.product(*reversed(dims)))]

    fixed = [k for k, _ in sizes if k not in vary]
    members = ranks([k for k, _ in sizes if k in vary])
    return [[base + m for m in members] for base in ranks(fixed)]


def _old_ep_groups(lay: Layout, stage: int) -> list[list[int]]:
    """The expert-parallel groups before folding: ep consecutive data-parallel ranks at one
    (cp, tp) position, ordered by (dp // ep, cp, tp)."""
    return [[lay.device(t, c, g * lay.ep + e, stage) for e in range(lay.ep)]
            for g in range(lay.dp // lay.ep) for c in range(lay.cp) for t in range(lay.tp)]


@pytest.mark.parametrize("tp, dp, pp, ep", [(1, 8, 1, 8), (2, 16, 8, 8), (8, 4, 2, 2), (4, 6, 3, 3),
                                            (2, 8, 1, 1)])
def test_expert_groups_with_etp_tp_and_no_cp_are_the_groups_before_folding(
        tp: int, dp: int, pp: int, ep: int) -> None:
    lay = _layout(tp, 1, dp, pp, ep, offset=16)
    for stage in range(pp):
        old = _old_ep_groups(lay, stage)
        assert lay.ep_groups(stage) == old                   # same rank lists, same order
        assert lay.ep_group(stage) == old[0] == [lay.device(0, 0, d, stage) for d in range(ep)]
        for local in range(tp * dp):
            t, d = local % tp, local // tp
            assert lay.local_group("ep", local) == ((d // ep, t), ep)   # one id per old group
    # a plan that does not give etp lays its experts out so (etp resolves to tp)
    assert Layout.of(ParallelismConfig(tp=tp, pp=pp, ep=ep, dp=dp)) == _layout(tp, 1, dp, pp, ep, tp)


FOLDS = [(2, 1, 16, 2, 32, 1), (2, 1, 8, 1, 4, 2), (4, 2, 4, 2, 8, 1), (2, 2, 4, 1, 8, 2),
         (8, 1, 4, 1, 4, 2), (1, 4, 2, 3, 2, 1), (8, 1, 16, 2, 16, 4)]


@pytest.mark.parametrize("tp, cp, dp, pp, ep, etp", FOLDS)
def test_folded_groups_are_megatron_core_expert_groups(tp: int, cp: int, dp: int, pp: int,
                                                       ep: int, etp: int) -> None:
    lay = _layout(tp, cp, dp, pp, ep, etp)
    edp = tp * cp * dp // (etp * ep)
    assert lay.edp == edp
    expert = [("tp", etp), ("ep", ep), ("dp", edp), ("pp", pp)]
    n = tp * cp * dp
    for kind, vary in (("ep", "ep"), ("etp", "tp"), ("edp", "dp")):
        oracle = _megatron_groups(expert, {vary})
        ours = [g for s in range(pp) for g in getattr(lay, f"{kind}_groups")(s)]
        assert ours == oracle, kind
    # the dense groups are Megatron's dense generator's, cp included (order tp-cp-dp-pp)
    dense = [("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp)]
    assert [g for s in range(pp) for g in lay.tp_groups(s)] == _megatron_groups(dense, {"tp"})
    assert lay.stage_ranks == n


@pytest.mark.parametrize("tp, cp, dp, pp, ep, etp", FOLDS)
def test_each_kind_of_expert_group_covers_a_stage_once(tp: int, cp: int, dp: int, pp: int,
                                                       ep: int, etp: int) -> None:
    lay = _layout(tp, cp, dp, pp, ep, etp, offset=5)
    n = tp * cp * dp
    for stage in range(pp):
        stage_devices = list(range(5 + stage * n, 5 + (stage + 1) * n))
        for kind, size in (("ep", ep), ("etp", etp), ("edp", lay.edp)):
            groups = getattr(lay, f"{kind}_groups")(stage)
            assert len(groups) == n // size and all(len(g) == size for g in groups), kind
            assert sorted(r for g in groups for r in g) == stage_devices, kind   # disjoint, complete
            assert getattr(lay, f"{kind}_group")(stage) == groups[0], kind
            assert lay.groups(stage)[kind] == groups
            # local_group names the same partition: ranks share an id exactly when they share a group
            by_id: dict[tuple[int, ...], list[int]] = {}
            for local in range(n):
                gid, gsize = lay.local_group(kind, local)
                assert gsize == size
                by_id.setdefault(gid, []).append(stage_devices[local])
            assert sorted(by_id.values()) == sorted(groups), kind
        # ``groups`` lists a kind when first asked for: every kind, each as its own method's
        every = lay.groups(stage)
        assert dict(every) == {k: getattr(lay, f"{k}_groups")(stage)
                               for k in ("tp", "cp", "ep", "dp", "etp", "edp")}
        assert "pp" not in every and len(every) == 6
        # an expert-parallel group meets each expert tensor-parallel group at most once, and one
        # ep x etp block of consecutive ranks holds every expert once (edp copies of it per stage)
        for g in lay.ep_groups(stage):
            assert len({(r - 5) // etp for r in g}) == ep
        block = ep * etp
        for g in lay.edp_groups(stage):
            assert g[0] - stage_devices[0] < block and all(b - a == block for a, b in zip(g, g[1:]))


def test_etp_tp_with_cp_folds_the_context_ranks_into_expert_parallelism() -> None:
    # tp 2, cp 2, dp 2, ep 2: Megatron-Core's expert groups pair the two cp ranks of one dp rank
    # (devices 0 and 2), where ep carved from dp alone paired dp ranks (devices 0 and 4)
    lay = _layout(2, 2, 2, 1, 2)
    assert lay.ep_group(0) == [0, 2] and _old_ep_groups(lay, 0)[0] == [0, 4]
    assert lay.edp_groups(0) == [[0, 4], [1, 5], [2, 6], [3, 7]]


# ----------------------------------------------------------------------------- the training suite


def _row(run_id: str, **cells: str) -> dict[str, str]:
    with (REPO / "validation" / "training" / "runs.csv").open(newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == run_id)
    return {**row, **cells}


def test_qwen3_235b_maps_with_the_experts_folded_over_tensor_parallel_ranks() -> None:
    run = next(m for m in map_runs(REPO / "validation" / "training") if m.id == QWEN3_235B)
    assert run.supported, run.reason
    assert run.scenario is not None
    assert {k: run.scenario["parallelism"][k] for k in ("tp", "pp", "ep", "etp")} == {
        "tp": 2, "pp": 8, "ep": 32, "etp": 1}
    said = [a for a in run.assumptions if a.startswith("etp not published: 1")]
    assert len(said) == 1 and "ep = 32 does not divide dp = 16" in said[0]
    assert "expert_tensor_parallel_size 1" in said[0] and "edp = 1" in said[0]
    par = scenario_from_dict(run.scenario, run.id).parallelism
    assert (par.dp, par.etp, par.edp, par.plan_error) == (16, 1, 1, "")


def test_rows_whose_ep_divides_dp_keep_the_default_etp() -> None:
    r = RowReader(_row(QWEN3_235B, ep="16"), "runs.csv:1")
    par, _ = parallelism(r, 256, {"layers": 94, "moe": {"experts": 128, "top_k": 8}})
    assert "etp" not in par and not any("etp" in a for a in r.assumptions)


@pytest.mark.parametrize("notes, etp", [("VP=4; ETP=2", 2), ("expert tensor parallel size 4", 4),
                                        ("expert_tensor_parallel_size: 1", 1), ("ETP 2", 2)])
def test_a_published_etp_is_taken_from_the_notes(notes: str, etp: int) -> None:
    r = RowReader(_row(QWEN3_235B, notes=notes), "runs.csv:1")
    par, _ = parallelism(r, 256, {"layers": 94, "moe": {"experts": 128, "top_k": 8}})
    assert par["etp"] == etp and not any(a.startswith("etp not published") for a in r.assumptions)


def test_an_ep_that_divides_no_fold_is_unsupported() -> None:
    r = RowReader(_row(QWEN3_235B, ep="64"), "runs.csv:1")       # tp x dp = 32 ranks per stage
    with pytest.raises(_Unsupported, match=r"ep = 64 divides neither dp = 16 nor tp\*cp\*dp = 32"):
        parallelism(r, 256, {"layers": 94, "moe": {"experts": 128, "top_k": 8}})
