"""Issue 34's first mechanisms: a value is bounded before it is shown, YAML aliases are bounded,
and nothing an input holds reaches the terminal raw (one test each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.config.fields import show
from sim.errors import one_line

SCENARIO = "name: {name}\ncluster: {{topology: dgx-h100, chips: 8}}\nmodel: llama3-8b\n" \
           "training: {{seq_len: 8192, global_batch: 8{extra}}}\n"


def _bomb(levels: int) -> str:
    """Each level an alias list of ten of the one before: 10^levels values expanded."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(9) + SCENARIO.format(name="bomb", extra=", remat_policy: *l8"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "expand to more than 100,000 values" in err and err.count("\n") == 1


def test_an_alias_inside_its_own_value_is_refused(tmp_path: Path, capsys) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("name: loop\ncluster: &c {topology: dgx-h100, chips: 8, again: *c}\n")
    assert main(["run", str(path)]) == 2
    assert "refers to the value that contains it" in capsys.readouterr().err


def test_a_few_aliases_and_a_merge_key_still_read(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("name: ok\ncluster: &c {topology: dgx-h100, chips: 8}\nmodel: llama3-8b\n"
                    "training: {<<: {seq_len: 2048}, global_batch: 8}\n"
                    "parallelism: {tp: 8}\n")
    assert main(["run", str(path), "--json"]) == 0


def test_show_is_bounded_while_it_renders() -> None:
    v: list = [1]
    for _ in range(60):            # 10^60 leaves by reference: a plain repr would never end
        v = [v] * 10
    assert len(show(v)) <= 64
    assert show("abc") == "'abc' (str)" and show(2.5) == "2.5 (float)"


@pytest.mark.parametrize("raw, shown", [("a\x1b[2Jb", "a\\x1b[2Jb"), ("bel\x07", "bel\\x07"),
                                        ("nul\x00", "nul\\x00"), ("del\x7f", "del\\x7f"),
                                        ("rtl\u202eX", "rtl\\u202eX"), ("two\nlines", "two lines")])
def test_control_characters_are_escaped(raw: str, shown: str) -> None:
    assert one_line(raw) == shown


def test_a_key_with_an_escape_sequence_reaches_stderr_escaped(tmp_path: Path, capsys) -> None:
    path = tmp_path / "esc.yaml"
    path.write_text(SCENARIO.format(name="esc", extra=', "bad\\e[2Jkey": 1'))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err


def test_a_message_is_cut_to_a_bounded_length() -> None:
    assert len(one_line("word " * 10_000)) == 2000


PLAN = ["plan", "--model", "llama3-8b", "--tokens", "1T", "--days", "30", "--max-chips", "64"]


@pytest.mark.parametrize("extra, says", [
    (["--topology", "dgx-h100", "--price", "dgx-h100=2,dgx-h100=3"], "priced twice"),
    (["--topology", "dgx-h100,dgx-h100"], "listed more than once"),
    (["--topology", "dgx-h100", "--batch-tokens", "1"], "less than one sequence"),
    (["--topology", "dgx-h100", "--seq-len", "1"], "would take"),
])
def test_plan_refuses_what_it_would_not_plan_as_asked(extra: list[str], says: str, capsys) -> None:
    assert main([*PLAN, *extra]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


@pytest.mark.slow  # one small plan (~10 s)
def test_a_deadline_no_topology_meets_exits_3(capsys) -> None:
    argv = ["plan", "--model", "llama3-70b", "--tokens", "15T", "--days", "1", "--topology",
            "dgx-h100", "--max-chips", "64", "--json"]
    assert main(argv) == 3
    assert '"meets_deadline": false' in capsys.readouterr().out


def test_an_output_that_is_a_pipe_is_refused_before_any_work(tmp_path: Path, capsys) -> None:
    import os

    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    argv = ["sweep", str(Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"),
            "--over", "training.micro_batch=1,2", "--out", str(fifo)]
    assert main(argv) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_sweep_refuses_a_set_value_that_fails_every_point_like_run(capsys) -> None:
    default = str(Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml")
    argv = ["--set", "training.precision=bf17"]
    assert main(["run", default, *argv]) == 2
    run_err = capsys.readouterr().err
    assert main(["sweep", default, "--over", "training.micro_batch=1,2", *argv]) == 2
    assert capsys.readouterr().err == run_err


def test_duplicate_degraded_links_are_refused(tmp_path: Path, capsys) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("name: twice\ncluster: {topology: dgx-h100, chips: 16, degraded_links: "
                    "[{link: [n0/nic0, leaf/s0/r0], factor: 0.5}, {link: [leaf/s0/r0, n0/nic0], "
                    "factor: 0.5}]}\nmodel: llama3-8b\ntraining: {seq_len: 8192, global_batch: 16}\n")
    assert main(["run", str(path)]) == 2
    assert "is listed already at cluster.degraded_links[0]" in capsys.readouterr().err


def test_a_chip_cut_off_by_down_links_is_infeasible(tmp_path: Path, capsys) -> None:
    links = ", ".join(f"{{link: [0, n0/nvs{s}], factor: 0}}" for s in range(4)) + \
        ", {link: [0, n0/nic0], factor: 0}"
    path = tmp_path / "cut.yaml"
    path.write_text(f"name: cut\ncluster: {{topology: dgx-h100, chips: 16, degraded_links: [{links}]}}\n"
                    "model: llama3-8b\ntraining: {seq_len: 8192, global_batch: 16}\n")
    assert main(["run", str(path)]) == 3
    err = capsys.readouterr().err
    assert "chip 0 is cut off" in err and err.count("\n") == 1


def test_vocab_tiling_past_the_tokens_is_refused(capsys) -> None:
    default = str(Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml")
    assert main(["run", default, "--set", "training.vocab_tiling=1000000000"]) == 2
    assert "chunks of no token" in capsys.readouterr().err


def test_a_name_with_an_escape_sequence_is_refused(tmp_path: Path, capsys) -> None:
    """The name heads the tables on stdout: a control character there would reach the terminal."""
    path = tmp_path / "esc-name.yaml"
    path.write_text(SCENARIO.format(name='"clear\\e[2J"', extra=""))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "name" in err and "control character" in err and "\x1b" not in err


def _nvlinks_down(tmp_path: Path, switches: range) -> Path:
    links = ", ".join(f"{{link: [0, n0/nvs{s}], factor: 0}}" for s in switches)
    path = tmp_path / "nvl.yaml"
    path.write_text(f"name: nvl\ncluster: {{topology: dgx-h100, chips: 16, degraded_links: [{links}]}}\n"
                    "model: llama3-8b\ntraining: {seq_len: 2048, global_batch: 16}\n"
                    "parallelism: {tp: 8}\n")
    return path


def test_a_gpu_with_some_nvlinks_down_runs_and_with_none_left_is_infeasible(tmp_path: Path,
                                                                         capsys) -> None:
    """NVLink SHARP spreads a GPU's traffic over the NVSwitch links it has left; with none left
    the answer is exit 3 naming the chip (routing crashed on both)."""
    assert main(["run", str(_nvlinks_down(tmp_path, range(1))), "--json"]) == 0
    capsys.readouterr()
    assert main(["run", str(_nvlinks_down(tmp_path, range(4)))]) == 3
    err = capsys.readouterr().err
    assert "chip 0: every NVLink to its node's NVSwitches is down" in err and err.count("\n") == 1


# The second audit of the new surfaces (issue 34): each case one line on stderr, exit 2 (3 where
# a valid plan cannot be met), never an internal error, a hang or a value silently changed.
_D = str(Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml")
_NINES = "9" * 5000


@pytest.mark.parametrize("args, words", [
    (["run", _D, "--set", f"training.seq_len={_NINES}"], "an integer of 5000 digits"),
    (["run", _D, "--set", f"training.tokens={_NINES[:500]}"], "an integer of 500 digits"),
    (["run", _D, "--set", "model.mtp_layers=1000000000"], "model.mtp_layers: must be <= 100"),
    (["run", _D, "--set", "model=gpt-oss-20b", "--set", "parallelism.ep=4", "--set", "model.moe.every=1000"],
     "model.moe.every: 1000 leaves no MoE layer"),
    (["run", _D, "--set", "cluster.topology=" + "T" * 300], "longer than a file name can be"),
    (["run", _D, "--trace", "/tmp/" + "L" * 300 + ".json"], "--trace: "),
    (["run", _D, "--trace", "o/ctl\x1b[2J.json"], "--trace: the path holds a control character"),
    (["run", _D, "--set", "cluster.chips=8", "--set", "cluster.chips=16"], "given more than once"),
    (["sweep", _D, "--over", "cluster.chips=8,8.0"], "a value appears twice"),
    (["sweep", _D, "--over", "training.remat_policy=full,bogus"], "training.remat_policy"),
    (["sweep", _D, "--set", "training.micro_batch=4", "--over", "training.micro_batch=1,2"],
     "also swept by --over"),
    (["plan", "--model", "llama3-8b", "--tokens", "1T", "--days", "30", "--topology", "dgx-h100",
      "--price", "=2"], "expected TOPOLOGY=USD_PER_CHIP_HOUR"),
])
def test_second_audit_cases_are_one_line(args, words, capsys) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_yaml_numbers_read_as_yaml_1_2_and_base_60_is_refused(tmp_path: Path, capsys) -> None:
    path = tmp_path / "b60.yaml"
    path.write_text(SCENARIO.format(name="b60", extra="").replace("seq_len: 8192", "seq_len: 1:30"))
    assert main(["run", str(path)]) == 2
    assert "'1:30' is a base-60 number" in capsys.readouterr().err
    from sim.config.yamlio import load_value
    assert load_value("1e-3", "x") == 0.001 and load_value("2e6", "x") == 2e6   # YAML 1.1: text


def test_a_model_name_with_a_control_character_is_refused(tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(SCENARIO.format(name="m", extra="").replace("model: llama3-8b",
                                                                'model: {preset: llama3-8b, name: "x\\ey"}'))
    assert main(["run", str(path)]) == 2
    assert "model.name" in capsys.readouterr().err


def test_a_lock_that_is_no_file_and_a_foreign_table_are_refused(tmp_path: Path, capsys) -> None:
    import os

    out = tmp_path / "x.csv"
    os.mkfifo(tmp_path / "x.csv.lock")
    sweep = ["sweep", _D, "--over", "training.micro_batch=1,2", "--workers", "1"]
    assert main(sweep + ["--out", str(out)]) == 2
    assert "is not a regular file" in capsys.readouterr().err
    (tmp_path / "y.csv.lock").mkdir()
    assert main(sweep + ["--out", str(tmp_path / "y.csv")]) == 2
    capsys.readouterr()
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("name,value\nalice,1\n")
    assert main(sweep + ["--out", str(foreign)]) == 2
    assert "is not a sweep table" in capsys.readouterr().err
    assert foreign.read_text() == "name,value\nalice,1\n"


def test_a_broken_neighbour_scenario_says_its_own_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "nb.yaml").write_text("name: nb\ncluster: {topology: dgx-h100, chips: 8\n")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(name="s", extra="").replace(
        "chips: 8}", "chips: 8, shared_with: nb.yaml}"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err and "neither a scenario file" not in err


def test_an_impossible_plan_says_so_on_stderr(capsys) -> None:
    assert main(["plan", "--model", "llama3-8b", "--tokens", "1T", "--days", "0.001",
                 "--topology", "dgx-h100", "--max-chips", "8"]) == 3
    out = capsys.readouterr()
    assert out.out and out.err.count("\n") == 1 and "infeasible: no topology" in out.err
