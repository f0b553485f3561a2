"""Layering rules of STYLE.md and DESIGN.md, checked on the source: heavy or I/O imports stay in
their module, and sim's own imports only go down the data flow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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


# The layers of sim, lowest first: DESIGN.md's data flow (config -> topology -> workload ->
# engine/network/collectives -> results -> report/plots/trace -> sweep -> validate) with the
# modules it leaves out put where their imports place them. An entry is a top-level module or
# package of sim/, or a dotted sub-module that sits in another layer than its package (the
# longest entry that prefixes a module's name is its layer).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "models", "progress", "parallel", "reliability"),  # leaves: no sim imports
    ("hardware",),                                     # chip catalogue
    ("software", "topology_spec", "compute"),          # stack profiles; topology specs; kernel formulas
    #                                                    and fits (compute.kernels, compute.tables)
    ("calibration_moe",),                              # the MoE kernels' and EP overlap's constants
    ("calibration", "precision"),                      # fitted constants; training precisions
    ("compute.folder_fit",),                           # those fits on a folder of your own tables
    ("config",),                                       # YAML -> typed scenario
    ("topology",),                                     # spec + size -> graph
    ("workload", "traces", "recovery"),                # scenario -> per-rank ops; measured trace ->
    #                                                    per-worker program, replay, what-if
    ("compute.model",),                                # workload's ops -> seconds on a chip
    ("compute.rows",),                                 # a kernel-table row's modelled time
    ("tp_overlap",),                                   # what a layer's GEMMs hide of its TP traffic
    ("network",),                                      # routing, links, fluid sharing
    ("collectives", "engine", "stragglers", "faults", "cost"),
    ("goodput",),                                      # a scenario's failures: units, rates, recovery
    ("results",),                                      # run records
    ("stage_ends",),                                   # the pipeline ends' kernel time, once a set
    ("stages",),                                       # workload + network -> per-stage plans
    ("stage_floors",),                                 # floors under a stage's passes (plan screen)
    ("job",),                                          # a scenario resolved once for its step
    ("straggler_step", "shared_step"),                 # the step with stragglers; beside a 2nd job
    ("training",),                                     # one step of a job -> StepResult
    ("run",),                                          # the one entry: scenario -> RunResult
    ("screen",),                                       # a size's layouts floored and timed
    ("plan",),                                         # searches clusters with run's steps
    ("report", "plots", "trace", "bench"),             # views of the records; measuring a GPU's tables
    ("sweep_store",),                                  # a sweep's table on disk
    ("sweep",),                                        # many scenarios
    ("validate",),                                     # predictions against measurements
    ("commands",),                                     # what each command does with its arguments
    ("cli", "__init__"),                               # the command line; the public API
    ("__main__",),                                     # python -m sim
)


def _module_name(path: Path) -> tuple[str, ...]:
    """sim/compute/model.py -> ("compute", "model"); sim/validate/__init__.py -> ("validate",);
    sim/__init__.py -> ("__init__",)."""
    parts = path.relative_to(SIM).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return parts


def _is_module(parts: tuple[str, ...]) -> bool:
    """Whether sim.<parts> is a module or a package (sim/workload/ has no ``__init__.py``)."""
    where = SIM.joinpath(*parts)
    return bool(parts) and (where.with_suffix(".py").is_file() or any(where.glob("*.py")))


def _sim_imports(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """(line, imported module of sim) for every import of sim in *path*: module level, inside
    functions and under ``TYPE_CHECKING`` alike; ``from .. import x`` names sub-module ``x`` where
    there is one, else the package itself (``("__init__",)`` for sim's own)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name[:-1]
    if name == ("__init__",):
        package = ()
    out: list[tuple[int, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, tuple(a.name.split(".")[1:]) or ("__init__",))
                    for a in node.names if a.name == "sim" or a.name.startswith("sim.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module is None or node.module.split(".")[0] != "sim":
                    continue
                base: tuple[str, ...] = tuple(node.module.split(".")[1:])
            else:
                assert node.level - 1 <= len(package), (path, node.lineno, "import above sim")
                base = package[:len(package) - (node.level - 1)]
                base += tuple(node.module.split(".")) if node.module else ()
            if node.module is None or node.level == 0 and base == ():
                for a in node.names:
                    sub = base + (a.name,)
                    out.append((node.lineno, sub if _is_module(sub) else base or ("__init__",)))
            else:
                out.append((node.lineno, base or ("__init__",)))
    return out


def _layer(parts: tuple[str, ...]) -> tuple[str, int]:
    """The entry of LAYERS that holds module *parts* and its layer index."""
    for k in range(len(parts), 0, -1):
        entry = ".".join(parts[:k])
        for i, layer in enumerate(LAYERS):
            if entry in layer:
                return entry, i
    raise AssertionError(f"sim.{'.'.join(parts)} is in no layer of LAYERS")


def test_every_module_of_sim_has_a_layer() -> None:
    tops = {p.stem for p in SIM.glob("*.py")} | {p.parent.name for p in SIM.glob("*/*.py")}
    entries = {e for layer in LAYERS for e in layer}
    assert tops <= entries, f"place these in LAYERS: {sorted(tops - entries)}"
    assert all(_is_module(tuple(e.split("."))) or e == "__init__" for e in entries), entries


def test_imports_only_go_down_the_layers() -> None:
    """A module of sim imports only modules of a lower layer of LAYERS, or of its own entry.

    The layers, lowest first: errors, units, models, progress, parallel -> hardware -> software,
    topology_spec, compute (kernels, tables) -> calibration -> config -> topology -> workload ->
    compute.model -> network -> collectives, engine, stragglers, faults, cost -> results ->
    stages -> job -> straggler_step, shared_step -> training -> run -> plan -> report, plots,
    trace -> sweep -> validate -> commands -> cli, sim/__init__.py ->
    __main__.

    The rule: DESIGN.md's data flow is one way, so nothing upstream names anything downstream:
    not at module level, not inside a function (a lazy import is still a dependency), not for
    type checking. A back-edge here means some code is in the wrong module: move it down the flow
    (as the gathering of measured points moved from ``sim.plots`` to ``sim.validate.overlay``),
    or pass the value in from the caller.
    """
    offenders = []
    for path in sorted(SIM.rglob("*.py")):
        me, mine = _layer(_module_name(path))
        for line, target in _sim_imports(path):
            entry, theirs = _layer(target)
            if entry != me and theirs >= mine:
                offenders.append(f"sim/{path.relative_to(SIM)}:{line}: {me} (layer {mine}) imports "
                                 f"sim.{'.'.join(target)} ({entry}, layer {theirs})")
    assert not offenders, "\n".join(offenders)


def test_the_layer_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The import walk resolves relative, absolute, function-level and TYPE_CHECKING imports."""
    src = SIM / "compute" / "model.py"
    found = {t for _, t in _sim_imports(src)}
    assert {("calibration",), ("workload", "transformer"), ("compute", "kernels")} <= found
    found = {t for _, t in _sim_imports(SIM / "report" / "plan.py")}  # under TYPE_CHECKING
    assert ("plan",) in found
    found = {t for _, t in _sim_imports(SIM / "cli.py")}              # inside functions
    assert ("validate",) in found
    found = {t for _, t in _sim_imports(SIM / "commands.py")}
    assert ("plots",) in found and ("run",) in found
    found = {t for _, t in _sim_imports(SIM / "__init__.py")}
    assert ("errors",) in found


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


@pytest.mark.slow
def test_sim_is_ruff_clean() -> None:
    """``ruff check sim tests benchmarks`` (the rules of pyproject.toml's [tool.ruff]) finds nothing."""
    pytest.importorskip("ruff")
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format",
                        "concise", "sim", "tests", "benchmarks"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
