"""A comment is true or gone (STYLE.md): every file, test and module that the code, the tests and
the README point to exists, so a move or a rename cannot leave a stale pointer behind."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent

# Repository paths (sim/config/fields.py, tests/test_engine.py::test_x, validation/compute/,
# sim/validate/training*.py); not after a word, a dot, a slash or a brace, so that
# ``../shared/validation/`` and f"{root}/validation" are not taken for the repository's.
_PATH = re.compile(r"(?<![\w./{}-])((?:sim|tests|benchmarks|validation|topologies|scenarios|plots)"
                   r"/[\w./*-]*)(?:::(\w+))?")
# Dotted names of sim: sim.config, sim.validate.training_map.map_runs, sim.collectives.fit.
_DOTTED = re.compile(r"(?<![\w./-])(sim(?:\.\w+)+)")


def _texts() -> list[Path]:
    """Every text that may point somewhere: sim's code and data notes, tests, benchmarks, README
    (not this file, whose examples of stale pointers are stale on purpose)."""
    sim = [p for p in sorted((REPO / "sim").rglob("*"))
           if p.is_file() and p.suffix in {".py", ".md", ".yaml", ".toml"}]
    tests = [p for p in sorted((REPO / "tests").glob("*.py")) if p != Path(__file__).resolve()]
    return [*sim, *tests, *sorted((REPO / "benchmarks").glob("*.py")), REPO / "README.md",
            REPO / "plots" / "make_plots.sh"]


def _missing_path(path: str, name: str | None) -> str | None:
    """Why *path* (a glob; ``::name`` a test in it) points nowhere, or None when it exists."""
    found = sorted(REPO.glob(path))
    if not found:
        return "no such file or folder"
    if name and not any(re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", p.read_text(), re.M)
                        for p in found if p.is_file()):
        return f"no test {name} in it"
    return None


def _missing_name(dotted: str) -> str | None:
    """Why *dotted* (a module of sim, then attributes) names nothing, or None when it exists."""
    parts = dotted.split(".")
    module: ModuleType | None = None
    for k in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        break
    obj: object = module
    for i, attr in enumerate(parts[k:], start=k):
        if not hasattr(obj, attr):
            return f"{'.'.join(parts[:i])} has no {attr}"
        obj = getattr(obj, attr)
    return None


def test_paths_and_names_in_comments_and_docstrings_exist() -> None:
    stale = []
    for text in _texts():
        for n, line in enumerate(text.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{text.relative_to(REPO)}:{n}"
            for m in _PATH.finditer(line):
                path = m.group(1).rstrip(".,;:-")
                if why := _missing_path(path, m.group(2)):
                    stale.append(f"{where}: {path}: {why}")
            for m in _DOTTED.finditer(line):
                if why := _missing_name(m.group(1).rstrip(".")):
                    stale.append(f"{where}: {m.group(1)}: {why}")
    assert not stale, "\n".join(stale)


def test_the_checks_catch_stale_pointers() -> None:
    assert _missing_path("sim/config.py", None)                  # now the package sim/config/
    assert _missing_path("sim/engine.py", None)                  # now the package sim/engine/
    assert _missing_path("tests/test_engine.py", "test_no_such_test")
    assert _missing_path("sim/validate/training*.py", None) is None
    assert _missing_path("tests/test_references.py", "test_the_checks_catch_stale_pointers") is None
    assert _missing_name("sim.collectives.fit")
    assert _missing_name("sim.validate_training")
    assert _missing_name("sim.validate.training_map.map_runs") is None
    assert [m.group(1) for m in _PATH.finditer("see ../shared/validation/ and `sim/engine/step.py`.")] \
        == ["sim/engine/step.py"]
    assert [m.group(1) for m in _DOTTED.finditer("clustersim.x, ``sim.config.load_scenario``")] \
        == ["sim.config.load_scenario"]


def _layout() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_layout_names_every_module_of_sim_and_nothing_else() -> None:
    """Every ``name.py`` and ``folder/`` the Layout paragraph names exists (in sim/, one of its
    packages, or the repository), and every module and package of sim/ is named there."""
    named = set(re.findall(r"`([\w/.]+(?:\.py|/))`", _layout()))
    sim = REPO / "sim"
    missing = [n for n in sorted(named)
               if not ((REPO / n).exists() or (sim / n).exists() or any(sim.glob(f"*/{n}")))]
    assert not missing, missing
    modules = {f"{p.stem}.py" for p in sim.glob("*.py")} - {"__init__.py", "__main__.py"}
    packages = {f"{p.parent.name}/" for p in sim.glob("*/*.py")}
    assert modules | packages <= named, sorted((modules | packages) - named)
