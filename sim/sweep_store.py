"""A sweep's table on disk (``sweep --out``): rows that resume can trust, columns that keep
their types, one writer at a time.

Every row carries ``row_sha``, its cells hashed as written; on resume a row whose cells do not
hash to it (cut short by a kill, edited) is left out and its point played again. A CSV cell is
read back as the number it was written from only where writing that number gives the same text
(``"007"`` stays text); empty cells stay empty, so a column of empty errors survives a rewrite.
Integers past int64 become floats in Parquet. The table is written to a temporary file of this
process and renamed over the old one, under a lock (``<table>.lock``) a second sweep is refused on.
"""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["ROW_HASH", "locked", "read_table", "write_table"]


def read_table(path: Path) -> list[dict[str, Any]]:
    """The rows of a sweep table written by ``write_table`` (CSV or Parquet, by suffix) whose
    ``row_sha`` matches their cells: a row cut short or edited (a kill in the middle of a copy, a
    hand edit) is left out, so the sweep plays its point again. Empty cells read as ""."""
    if path.suffix == ".parquet":
        pq = _pyarrow(path)
        try:
            table = pq.read_table(path)
            rows = [{k: "" if v is None else v for k, v in r.items()} for r in table.to_pylist()]
        except Exception as e:                   # noqa: BLE001 - any unreadable file, named
            raise ConfigError(f"--out: cannot read {str(path)!r} to resume ({e})") from None
        _check_sweep_table(path, table.column_names if table.num_rows else [ROW_HASH])
        return [_unhashed(r) for r in rows if r.get(ROW_HASH) == _row_hash(r)]
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            cells = list(reader)
            header = list(reader.fieldnames or [ROW_HASH])       # an empty file: a new table
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"--out: cannot read {str(path)!r} to resume ({e})") from None
    _check_sweep_table(path, header)
    # a short row has None for its missing cells (and a long one a None key): never whole
    return [_unhashed({k: _typed(v) for k, v in r.items()}) for r in cells
            if None not in r and None not in r.values() and r.get(ROW_HASH) == _row_hash(r)]


def _check_sweep_table(path: Path, columns: list[str]) -> None:
    """A file a sweep would resume is a sweep table: overwriting any other table would lose it."""
    if ROW_HASH not in columns:
        raise ConfigError(f"--out: {str(path)!r} is not a sweep table (no {ROW_HASH} column) and "
                          "the sweep would overwrite it; give a new file, or remove this one")


def _unhashed(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the sweep made it (its hash is the table's, added again when written)."""
    row.pop(ROW_HASH, None)
    return row


def _typed(text: Any) -> Any:
    """A CSV cell back as the value it was written from: int, float or bool where writing that
    value gives this very text back, else the text ("007" stays "007")."""
    if not isinstance(text, str):
        return text
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            v = kind(text)
        except ValueError:
            continue
        if str(v) == text:
            return v
    return text


ROW_HASH = "row_sha"             # a row's cells hashed (``_row_hash``): how resume trusts a row


def _row_hash(row: Mapping[str, Any]) -> str:
    """The row's non-empty cells, as the CSV writes them, hashed (its own hash left out)."""
    import hashlib

    cells = sorted((str(k), str(v)) for k, v in row.items()
                   if k != ROW_HASH and v is not None and v != "")
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()[:16]


def write_table(path: Path, rows: list[dict[str, Any]]) -> None:
    """CSV (``.csv``) or Parquet (``.parquet``); columns in first-seen order, missing cells empty."""
    import os

    if path.suffix == ".parquet":
        rows = _storable(rows)
    rows = [{**{k: v for k, v in r.items() if k != ROW_HASH}, ROW_HASH: _row_hash(r)} for r in rows]
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    # this process's own temporary file (two writers must not share one), renamed over the table
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    if path.suffix == ".parquet":
        pq = _pyarrow(path)
        import pyarrow as pa

        table = pa.table({c: [_cell(r.get(c)) for r in rows] for c in columns})
        pq.write_table(table, tmp)
    else:
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
            w.writeheader()
            w.writerows({c: r.get(c, "") for c in columns} for r in rows)
    tmp.replace(path)


def _storable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*rows* with every column Parquet holds in one type, made so before the rows are hashed (the
    hash is of what is stored): numbers mixing integers and floats, or integers past int64 (a
    large model's FLOPs per step), as floats; other mixes as text."""
    kinds: dict[str, set[str]] = {}
    for r in rows:
        for k, v in r.items():
            if v is not None and v != "":
                kinds.setdefault(k, set()).add(_kind(v))
    floats = {k for k, ks in kinds.items() if ks <= {"int", "float", "bigint"} and ks & {"float", "bigint"}}
    text = {k for k, ks in kinds.items() if len(ks) > 1 and k not in floats}
    if not floats and not text:
        return rows
    return [{k: (float(v) if k in floats else str(v)) if k in floats | text and v is not None
             and v != "" else v for k, v in r.items()} for r in rows]


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "bigint" if abs(v) >= 2**63 else "int"
    return "float" if isinstance(v, float) else "str" if isinstance(v, str) else "other"


def _cell(v: Any) -> Any:
    """A Parquet cell: missing values are nulls (a number column stays numeric)."""
    return None if v is None or v == "" else (str(v) if not isinstance(v, (int, float, str, bool)) else v)


def _pyarrow(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"--out {path.name}: Parquet needs pyarrow (pip install pyarrow); "
                          "or write a .csv") from None
    return pq


@contextlib.contextmanager
def locked(out: Path | None) -> Iterator[None]:
    """*out*'s lock (``<out>.lock`` beside it, left there) held for the block, or a ConfigError
    at once when another process holds it: two sweeps on one table would each drop the other's
    rows (where the OS has no ``fcntl``, no lock)."""
    if out is None:
        yield
        return
    try:
        import fcntl
    except ImportError:                       # not POSIX
        yield
        return
    lock = out.with_name(out.name + ".lock")
    if lock.exists() and not lock.is_file():
        # opening a named pipe waits for a writer; a folder cannot be locked
        raise ConfigError(f"--out: {str(lock)!r} (the table's lock) is not a regular file; remove it "
                          "or give another --out")
    try:
        fh = lock.open("a")
    except OSError as e:
        raise ConfigError(f"--out: cannot create the table's lock {str(lock)!r} ({e.strerror})") from None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigError(f"--out: another sweep is writing {str(out)!r} (it holds "
                              f"{lock.name}); wait for it to finish, or give another file") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
