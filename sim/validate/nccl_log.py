"""nccl-tests output as it is printed (the ``*_perf`` binaries' stdout): the table of sizes with
their out-of-place time, algbw and busbw, the ranks it lists and the NCCL version it names.

The table's header names its columns (``size count type redop root time algbw busbw #wrong``
then the in-place ones; older releases print no ``root``); a data row is a line of those fields
under it. ``mpirun --tag-output`` prefixes (``[1,0]<stdout>:``) are dropped. A row that is cut
short or garbled, a size out of order or a log without a table is one ``ConfigError`` naming the
file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

__all__ = ["NcclLogRow", "NcclLog", "read_nccl_tests_log", "looks_like_nccl_log"]

_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\b")
_VERSION = re.compile(r"NCCL version (\d+\.\d+(?:\.\d+)?)|nccl-library=(\d+)")


@dataclass(frozen=True, slots=True)
class NcclLogRow:
    size_bytes: int
    count: int
    dtype: str
    time_us: float             # out-of-place
    algbw_GBps: float
    busbw_GBps: float


@dataclass(frozen=True, slots=True)
class NcclLog:
    rows: tuple[NcclLogRow, ...]
    ranks: int | None          # the "# Rank N" lines it lists (None: none printed)
    nccl_version: str | None


def looks_like_nccl_log(path: Path) -> bool:
    """Whether *path* is printed nccl-tests output rather than a table of this project's columns."""
    try:
        with path.open(errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return False                   # the CSV reader says what is wrong with the path
    return "size" in head and "busbw" in head and not head.startswith("size_bytes,")


def _columns(line: str) -> list[str] | None:
    words = line.lstrip("#").split()
    if len(words) >= 8 and words[0] == "size" and "count" in words and "busbw" in words:
        return words
    return None


def read_nccl_tests_log(path: Path) -> NcclLog:
    """The out-of-place table of one nccl-tests output file (module docstring)."""
    path = Path(path)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    cols: list[str] | None = None
    rows: list[NcclLogRow] = []
    ranks: set[int] = set()
    version = None
    for n, raw in enumerate(lines, 1):
        line = _TAG.sub("", raw).rstrip()
        if m := _RANK.search(line):
            ranks.add(int(m.group(1)))
        if version is None and (v := _VERSION.search(line)):
            version = v.group(1) or _library_version(v.group(2))
        if line.lstrip().startswith("#"):
            cols = cols or _columns(line)
            continue
        if cols is None or not line.split() or not line.split()[0].isdigit():
            continue                   # before the table, or a line NCCL interleaves (INFO, WARN)
        rows.append(_row(line, cols, f"{path}:{n}", rows[-1].size_bytes if rows else -1))
    if not rows:
        raise ConfigError(f"{path}: no nccl-tests table found (a header '# size count type ... "
                          "busbw' and rows under it)")
    return NcclLog(tuple(rows), len(ranks) or None, version)


def _row(line: str, cols: list[str], where: str, last_size: int) -> NcclLogRow:
    words = line.split()
    if len(words) != len(cols):
        raise ConfigError(f"{where}: a row cut short or garbled: {len(words)} fields where the "
                          f"header names {len(cols)}: {line.strip()!r}")
    try:
        size, count = int(words[cols.index("size")]), int(words[cols.index("count")])
        time_us = float(words[cols.index("time")])
        algbw, busbw = float(words[cols.index("algbw")]), float(words[cols.index("busbw")])
    except ValueError:
        raise ConfigError(f"{where}: not a row of numbers: {line.strip()!r}") from None
    if size < 0 or time_us <= 0 or algbw < 0 or busbw < 0:
        raise ConfigError(f"{where}: size, time and bandwidths must be positive: {line.strip()!r}")
    if size < last_size:
        raise ConfigError(f"{where}: size {size} after {last_size}: sizes must not go down")
    return NcclLogRow(size, count, words[cols.index("type")], time_us, algbw, busbw)


def _library_version(code: str) -> str:
    """NCCL_VERSION_CODE (22104) as MAJOR.MINOR.PATCH."""
    c = int(code)
    return f"{c // 10000}.{c // 100 % 100}.{c % 100}"
