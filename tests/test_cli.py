"""The command line: JSON fields of DESIGN.md, one-line errors with exit 2, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main

REPO = Path(__file__).resolve().parent.parent


def test_topo_show_json_fields(capsys) -> None:
    assert main(["topo", "show", "dgx-h100", "--chips", "1024", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for field in ("chips", "nodes", "switches", "links", "bisection_GBps", "diameter_hops"):
        assert field in info
    assert info["chips"] == 1024 and info["nodes"] == 128
    assert info["transport"] == "ib" and info["net_protocols"] == ["LL", "LL128", "Simple"]
    assert info["transport_name"] == "InfiniBand"


def test_topo_show_names_the_protocols_a_fabric_allows_across_nodes(capsys) -> None:
    assert main(["topo", "show", "aws-p4de", "--chips", "16"]) == 0
    assert ("network          efa (AWS EFA through aws-ofi-nccl); NCCL protocols across nodes: Simple"
            in capsys.readouterr().out)


def test_topo_show_table(capsys) -> None:
    assert main(["topo", "show", "tpu-v4", "--slice", "4x4x8", "--twisted"]) == 0
    out = capsys.readouterr().out
    assert "bisection" in out and "twisted" in out and "48 ocs" in out


def test_run_default_scenario(capsys) -> None:
    assert main(["run", str(REPO / "scenarios" / "default.yaml"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"] == "default-llama3-8b-8xh100" and out["chips"] == 8


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["topo", "show", "dgx-h100", "--chips", "12"], "not a whole number of 8-GPU nodes"),
        (["topo", "show", "nosuch"], "unknown topology 'nosuch'"),
        (["topo", "show", "dgx-h100", "--chips", "-8"], "expected a positive integer"),
        (["run", "does-not-exist.yaml"], "no such scenario file"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_errors_are_one_line_and_exit_2(argv, fragment) -> None:
    r = subprocess.run([sys.executable, "-m", "sim", *argv], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2
    assert fragment in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_collective_names_the_flag_of_a_model_error(capsys) -> None:
    """The model says ``algo hierarchical: ...``; ``clustersim collective`` names the flag."""
    assert main(["collective", "--topology", "dgx-h100", "--chips", "16", "--op", "allgather",
                 "--algo", "hierarchical"]) == 2
    assert ("clustersim: error: --algo hierarchical: does not implement allgather here"
            in capsys.readouterr().err)


def test_collective_takes_the_nccl_release(capsys) -> None:
    """--nccl-version: on P5, NCCL 2.18 (before tuner plugins) picks its own tree/LL for a small
    all-reduce, a current release runs AWS's tree/LL128; a malformed release is one line, exit 2."""
    base = ["collective", "--topology", "aws-p5", "--chips", "16", "--op", "allreduce",
            "--min-bytes", "1K", "--max-bytes", "1K"]
    assert main(base + ["--nccl-version", "2.18"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("tree/LL")
    assert main(base) == 0
    assert capsys.readouterr().out.rstrip().endswith("tree/LL128")
    r = subprocess.run([sys.executable, "-m", "sim", *base, "--nccl-version", "two"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--nccl-version: expected an NCCL release MAJOR.MINOR" in r.stderr


@pytest.mark.parametrize("text, size", [("65536", 65536), ("64K", 65536), ("64KB", 65536),
                                        ("64KiB", 65536), ("8MiB", 8 * 2**20), ("1g", 2**30)])
def test_byte_counts_read_as_nccl_tests_does(capsys, text, size) -> None:
    """--min-bytes/--max-bytes take nccl-tests' K/M/G (binary) with or without B or iB."""
    assert main(["collective", "--topology", "dgx-h100", "--op", "allreduce", "--csv",
                 "--min-bytes", text, "--max-bytes", text]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 2 and rows[1].split(",")[0] == str(size)


@pytest.mark.parametrize("text", ["0", "-8", "64Q", "MiB", "1.5M"])
def test_bad_byte_counts_are_one_line(capsys, text) -> None:
    assert main(["collective", "--topology", "dgx-h100", "--op", "allreduce",
                 "--min-bytes", text]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--min-bytes" in err and repr(text) in err


def test_the_algo_help_names_every_registered_algorithm() -> None:
    """``collective --algo``'s help lists the registry's names (sim/cli.py keeps them by hand so
    that parsing arguments does not import the collective models)."""
    from sim.cli import build_parser
    from sim.collectives.algorithms import ALGORITHMS

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    coll = sub.choices["collective"]                        # type: ignore[attr-defined]
    algo = next(a for a in coll._actions if a.dest == "algo")
    listed = algo.help.split("(", 1)[1].rstrip(")").split(", ")
    assert sorted(listed) == sorted(ALGORITHMS)


def test_the_console_entry_exits_with_mains_status_and_leaves_its_objects_to_the_os(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``clustersim`` / ``python -m sim`` (``entry``): main's exit status, every object moved out
    of the collector's reach before the interpreter's last collection (PERF: ``gc.freeze``)."""
    import gc

    import sim.cli

    monkeypatch.setattr(sim.cli, "main", lambda: 3)
    try:
        with pytest.raises(SystemExit) as stop:
            sim.cli.entry()
        assert stop.value.code == 3 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
