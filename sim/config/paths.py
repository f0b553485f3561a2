"""Where clustersim's files are: the bundled data folders, and output files checked before work."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError

__all__ = ["DATA_DIR", "PLOT_SUFFIXES", "check_name", "check_output_path", "scenario_dir", "topology_dir"]

# The bundled data ships inside the package (sim/data/; the repository's top-level topologies/,
# scenarios/ and validation/ are links to it), so an installed clustersim finds it anywhere.
DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def topology_dir() -> Path:
    """Folder of the bundled topologies (``$CLUSTERSIM_TOPOLOGIES`` overrides)."""
    return Path(os.environ.get("CLUSTERSIM_TOPOLOGIES", DATA_DIR / "topologies"))


def scenario_dir() -> Path:
    """Folder of the bundled scenarios: ``clustersim run default`` finds ``default.yaml`` there."""
    return DATA_DIR / "scenarios"


# Figure formats matplotlib writes for --plot.
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


# What a file name may be (Linux: NAME_MAX bytes a component, PATH_MAX bytes in all); longer
# ones make every file-system call fail (ENAMETOOLONG), so they are refused by name first.
_NAME_MAX_B = 255
_PATH_MAX_B = 4096


# An output's name leaves room for the files written beside it (a sweep's ``.lock`` and
# ``.<pid>.tmp``).
_OUTPUT_SPARE_B = 16


def check_name(path: str, where: str, spare_B: int = 0) -> str:
    """*path*, given by the user, if the file system can take it: printable (it is echoed on the
    terminal), within the length limits less *spare_B* bytes a name; a ConfigError naming
    *where* otherwise."""
    if not path.isprintable():
        raise ConfigError(f"{where}: the path holds a control character; give a printable file name")
    raw = os.fsencode(path)
    limit = _NAME_MAX_B - spare_B
    if len(raw) > _PATH_MAX_B - spare_B or any(len(part) > limit for part in raw.split(b"/")):
        raise ConfigError(f"{where}: {path[:60]!r}... is longer than a file name can be here ({limit} "
                          f"bytes a name, {_PATH_MAX_B - spare_B} in all)")
    return path


def check_output_path(path: str, flag: str, suffixes: Sequence[str] = ()) -> Path:
    """An output file the command can write (with one of *suffixes*, when given), checked before
    any work: a ConfigError otherwise."""
    if not path:
        raise ConfigError(f"{flag}: empty file name; give the path of the file to write")
    p = Path(check_name(path, flag, _OUTPUT_SPARE_B))
    if p.is_dir():
        raise ConfigError(f"{flag}: {path!r} is a folder; give a file name inside it")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag}: folder {str(parent)!r} does not exist; create it first")
    if (p.exists() and not os.access(p, os.W_OK)) or (not p.exists() and not os.access(parent, os.W_OK)):
        raise ConfigError(f"{flag}: cannot write {path!r} (permission denied)")
    if suffixes and p.suffix not in suffixes:
        raise ConfigError(f"{flag}: {path!r}: valid suffixes are {', '.join(suffixes)}")
    if p.exists() and not p.is_file():
        # opening a named pipe for writing waits for a reader; a device is no file to write
        raise ConfigError(f"{flag}: {path!r} is not a regular file (a pipe, socket or device); "
                          "give the path of a file to write")
    _probe(p, path, flag)
    return p


def _probe(p: Path, path: str, flag: str) -> None:
    """Open *p* for writing as the command will, then leave it as it was (permissions are not
    all: a read-only file system, a full quota, root on /proc)."""
    existed = p.exists()
    try:
        with p.open("ab"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag}: cannot write {path!r} ({e.strerror or e})") from None
    if not existed:
        p.unlink(missing_ok=True)
