"""Hypothesis over issue 34's surfaces, beside tests/test_fuzz.py: what a message shows is safe
and bounded whatever the value, YAML of any shape reads or is refused in one line and in bounded
time, and a sweep table gives back every row it was given."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.fields import show
from sim.config.yamlio import parse_yaml
from sim.errors import ConfigError, one_line
from sim.sweep import read_table, write_table

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=200))
_VALUES = st.recursive(_SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=8),
                                                        st.dictionaries(st.text(max_size=8), kids,
                                                                        max_size=8)),
                       max_leaves=60)


@given(st.text(max_size=5000))
def test_one_line_is_one_safe_bounded_line(text: str) -> None:
    out = one_line(text)
    assert len(out) <= 2000 and "\n" not in out
    assert all(c.isprintable() or c == " " for c in out)


@given(_VALUES)
def test_show_is_short_for_any_value(value: object) -> None:
    assert len(show(value)) <= 80


def _aliases(depth: int, width: int) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12))
def test_aliases_of_any_shape_read_or_are_refused_at_once(depth: int, width: int) -> None:
    t0 = time.perf_counter()
    try:
        parse_yaml(_aliases(depth, width), Path("f.yaml"), "scenario")
        assert width ** depth <= 100_000 * 2
    except ConfigError as e:
        assert "expand to more than" in str(e)
    assert time.perf_counter() - t0 < 2.0


_CELLS = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
                   st.booleans(), st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")),
                                          max_size=20))
_ROWS = st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _CELLS, min_size=1),
                 min_size=1, max_size=6)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_ROWS)
def test_a_table_gives_back_the_rows_it_was_given(tmp_path: Path, suffix: str, rows: list) -> None:
    path = tmp_path / f"t{suffix}"
    try:
        write_table(path, rows)
    except Exception:                         # noqa: BLE001 - a column Parquet cannot type
        if suffix == ".csv":
            raise
        return
    back = read_table(path)
    assert len(back) == len(rows)             # every row trusted: none lost, none cut
    for mine, got in zip(rows, back):
        for k, v in mine.items():
            # the value, its text (a column of mixed kinds is text) or, for a number, the float
            # Parquet keeps it as
            assert v == "" or got[k] == v or str(got[k]) == str(v) or (
                isinstance(got[k], float) and isinstance(v, int) and got[k] == float(v)), (k, v, got)
