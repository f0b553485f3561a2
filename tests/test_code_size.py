"""House rules of issue 26 (STYLE.md: small modules, short functions), checked on the source:
no module of sim/ over 400 lines, no function over 80 (from its ``def`` to its last line,
docstring included). A module or function that grows past them is split where its parts differ,
as training.py was into stages, job, straggler_step, shared_step, training and run."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parent.parent / "sim"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    return sorted(SIM.rglob("*.py"))


def test_no_module_over_400_lines() -> None:
    long = {str(p.relative_to(SIM)): n for p in _sources()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_80_lines() -> None:
    long = []
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"sim/{p.relative_to(SIM)}:{node.lineno} {node.name}: {n} lines")
    assert not long, "\n".join(long)


def test_the_rules_see_a_long_function(tmp_path: Path) -> None:
    """The walk finds a nested function's length too (the rule is not vacuous)."""
    body = "\n".join(f"        x{i} = {i}" for i in range(90))
    tree = ast.parse(f"def outer():\n    def inner():\n{body}\n    return inner\n")
    sizes = {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert sizes == {"outer": 93, "inner": 91}
