"""Layering rules of STYLE.md, checked on the source: heavy or I/O imports stay in their module."""

from __future__ import annotations

import pytest

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parent.parent / "sim"

# module -> the only files (relative to sim/) that may import it
ALLOWED = {
    "yaml": {"config"},
    "simpy": {"engine", "network"},
    "matplotlib": {"plots.py"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_import_rules() -> None:
    offenders = []
    for path in SIM.rglob("*.py"):
        rel = path.relative_to(SIM)
        for mod, allowed in ALLOWED.items():
            if mod in _imports(path) and not (str(rel) in allowed or rel.parts[0] in allowed):
                offenders.append(f"{rel} imports {mod}")
    assert not offenders, offenders


def test_no_module_level_simpy_environment() -> None:
    for path in SIM.rglob("*.py"):
        assert "simpy.Environment()" not in "\n".join(
            line for line in path.read_text().splitlines() if not line.startswith((" ", "\t"))
        ), path


@pytest.mark.slow
def test_sim_is_mypy_clean() -> None:
    """``mypy sim`` (the STYLE guide's type check) finds nothing."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("mypy")
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "mypy", "sim", "--ignore-missing-imports",
                        "--no-error-summary"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]
