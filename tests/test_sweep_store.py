"""A sweep's table as a store that cannot lie (issue 34): a row cut short or edited is played
again, text stays text, empty columns survive a rewrite, big integers fit Parquet, one writer."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from sim.config import read_scenario_raw
from sim.errors import ConfigError
from sim.sweep import parse_over, read_table, run_sweep, write_table
from sim.sweep_store import ROW_HASH, locked

ROWS = [{"sweep_id": "abc", "training.precision": "007", "status": "ok", "error": "",
         "step_time_s": 1.25, "chips": 8, "flops": 3 * 10**19, "ok": True},
        {"sweep_id": "abc", "training.precision": "bf16", "status": "invalid",
         "error": "training.precision: bad", "step_time_s": "", "chips": 16, "flops": 5, "ok": False}]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_rows_read_back_as_written(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"t{suffix}"
    write_table(path, ROWS)
    back = read_table(path)
    assert len(back) == 2 and not any(ROW_HASH in r for r in back)
    assert ROW_HASH in (path.read_text() if suffix == ".csv" else ROW_HASH)
    assert back[0]["training.precision"] == "007" and back[0]["error"] == ""
    assert back[0]["step_time_s"] == 1.25 and back[0]["chips"] == 8 and back[0]["ok"] is True
    assert float(back[0]["flops"]) == 3e19 and back[1]["error"] == "training.precision: bad"
    write_table(path, back)                       # a rerun rewrites what it read: the same rows
    assert read_table(path) == back


def test_a_cut_or_edited_row_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_table(path, ROWS)
    text = path.read_text()
    path.write_text(text[: len(text) - 25])       # the last row cut inside a cell
    assert [r["chips"] for r in read_table(path)] == [8]
    path.write_text(text.replace("1.25", "9.25"))  # a number edited by hand
    assert [r["chips"] for r in read_table(path)] == [16]


def _hold(path: str, ready, go) -> None:
    with locked(Path(path)):
        ready.set()
        go.wait(10)


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    ctx = multiprocessing.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold, args=(str(out), ready, go))
    other.start()
    try:
        assert ready.wait(10)
        with pytest.raises(ConfigError, match="another sweep is writing"):
            with locked(out):
                pass
    finally:
        go.set()
        other.join(10)
    with locked(out):                            # free again once the first is done
        pass


@pytest.mark.slow  # two small sweeps (~4 s)
def test_a_finished_sweep_reruns_to_the_same_table(tmp_path: Path) -> None:
    raw, src, _ = read_scenario_raw("default")
    axes = [parse_over("training.micro_batch=1,2", raw)]
    out = tmp_path / "s.csv"
    first = run_sweep(raw, src, axes, out=out)
    text = out.read_text()
    calls: list[int] = []
    again = run_sweep(raw, src, axes, out=out, progress=lambda it, n, d: (calls.append(n), it)[1])
    assert calls == [0] and out.read_text() == text and "error" in again[0]
    assert [r["step_time_s"] for r in again] == [r["step_time_s"] for r in first]
