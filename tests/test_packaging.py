"""Packaging: a built wheel carries its data and runs the README's commands outside the checkout;
the README's set-up commands are the ones CI runs; --version and help texts are complete."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main

REPO = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", setup, re.S)


def test_readme_has_two_setup_commands_and_ci_runs_the_second() -> None:
    cmds = _readme_commands()
    assert len(cmds) == 2, cmds
    assert all("\n" not in c and c.startswith("python3 -m venv .venv && . .venv/bin/activate") for c in cmds)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert cmds[1] in ci, "the CI script must run the README's test command verbatim"
    # ... and then the slow lane that command leaves out, which the README names.
    slow = "python -m pytest -q -m slow"
    assert any(line.startswith(slow) for line in ci[ci.index(cmds[1]) + 1:]), "CI must run the slow lane"
    assert f"`{slow}`" in (REPO / "README.md").read_text()


def test_version_and_help(capsys) -> None:
    assert main(["--version"]) == 0
    assert re.match(r"clustersim \S+", capsys.readouterr().out)
    assert main(["validate", "--help"]) == 0
    out = capsys.readouterr().out
    for suite in ("collectives", "training", "failures", "compute"):
        assert suite in out


@pytest.mark.slow
def test_wheel_runs_the_readme_commands_outside_the_checkout(tmp_path: Path) -> None:
    wheels, target, cwd = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    cwd.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
                    str(REPO)], check=True, capture_output=True)
    wheel = next(wheels.glob("clustersim-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}

    def sim(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "sim", *args], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    where = subprocess.run([sys.executable, "-c", "import sim; print(sim.__file__)"], cwd=cwd,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(target)), where        # the wheel's copy, not the checkout's
    assert "dgx-h100: 16 x H100-SXM" in sim("topo", "show", "dgx-h100", "--chips", "16")
    assert "step time" in sim("run", "default")
    assert "within budget" in sim("validate", "--suite", "collectives")
    assert "within budget" in sim("validate", "--suite", "compute")
