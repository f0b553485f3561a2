"""Reading the validation data: where it lives, CSV files and their cells, checked at the edge.

Every error is a ``ConfigError`` naming the file, the line and the column (STYLE.md P3).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from ..errors import ConfigError

__all__ = ["GPUS_PER_NODE", "RUNS_FILE", "SPLITS", "default_data_dir", "integer", "number",
           "read_csv", "required_integer"]

SPLITS = ("calibration", "test")       # the split column of runs.csv (collectives and training)
RUNS_FILE = "runs.csv"                 # one row per measured run (collectives and training)
GPUS_PER_NODE = 8                      # every GPU topology bundled is a DGX/HGX node of 8 GPUs


def default_data_dir() -> Path:
    """The bundled validation data (``sim/data/validation``; the repository's ``validation/`` links to it)."""
    return Path(__file__).resolve().parent.parent / "data" / "validation"


def read_csv(path: Path) -> tuple[tuple[str, ...], list[tuple[int, dict[str, str]]]]:
    """Header and (line number, row) pairs of a CSV file; a missing file is a ConfigError."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = tuple(reader.fieldnames or ())
            rows = [(reader.line_num, row) for row in reader]
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte at offset {e.start}); save it as UTF-8") from None
    except csv.Error as e:
        raise ConfigError(f"{path}: not a valid CSV file ({e})") from None
    for line, row in rows:
        if None in row or any(v is None for v in row.values()):
            raise ConfigError(f"{path}:{line}: expected {len(header)} columns {list(header)}")
    return header, rows


def number(text: str, where: str, field: str, *, zero_ok: bool = False) -> float | None:
    """A finite number > 0 (>= 0 when *zero_ok*), or None for a blank cell; else a ConfigError."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {field}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{where}: {field}: expected a finite number {'>=' if zero_ok else '>'} 0, "
                          f"got {text!r}")
    return value


def integer(text: str, where: str, field: str, *, minimum: int = 1) -> int | None:
    """A whole number >= *minimum* (>= 0), as ``number`` reads it (so ``1.6e4`` is one), or None
    for a blank cell; else a ConfigError."""
    value = number(text, where, field, zero_ok=minimum <= 0)
    if value is None:
        return None
    if value != int(value):
        raise ConfigError(f"{where}: {field}: expected an integer, got {text.strip()!r}")
    if value < minimum:
        raise ConfigError(f"{where}: {field}: expected an integer >= {minimum}, got {int(value)}")
    return int(value)


def required_integer(text: str, where: str, field: str, *, minimum: int = 1) -> int:
    """``integer`` for a column that must not be blank."""
    value = integer(text, where, field, minimum=minimum)
    if value is None:
        raise ConfigError(f"{where}: {field}: expected an integer, got {text!r}")
    return value
