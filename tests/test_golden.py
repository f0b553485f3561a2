"""Every command's output on the bundled scenarios, byte for byte, against what it printed when the
golden files were made (tests/golden/README.md says at which commit and why).

These are refactoring guards, not accuracy checks: the expected bytes are the program's own
output, recorded once, so any change to a printed number, field or line shows up here. A change
that is meant to move an output regenerates the files (``CLUSTERSIM_UPDATE_GOLDEN=1 python -m
pytest tests/test_golden.py -m 'slow or not slow'``) and says why in its commit; accuracy is held by
the validation suites and their budgets.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from sim.cli import main

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("CLUSTERSIM_UPDATE_GOLDEN") == "1"

_SLOW_SCENARIOS = {"llama3-405b-98304xh100", "llama3-70b-1024xh100-stragglers"}
# Each of these takes ~20 s a run, so it is played once: the 98k step as JSON (every number; the
# table's layout is the other scenarios'), the straggler step as its table (the JSON of the
# same straggler scenario is run-stragglers-small, on 128 GPUs over two steps).
_ONCE = {"run-llama3-405b-98304xh100", "run-json-llama3-70b-1024xh100-stragglers"}
_SCENARIOS = sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml"))
_TOPOLOGIES = sorted(p.stem for p in (REPO / "topologies").glob("*.yaml"))


def _case(name: str, argv: str, slow: bool = False) -> object:
    marks = [pytest.mark.slow] if slow else []
    if name == "validate-training":     # plays the session's training_report (tests/conftest.py)
        marks.append(pytest.mark.xdist_group("training_report"))
    return pytest.param(name, argv, id=name, marks=marks)


CASES = (
    [_case(f"run-{s}", f"run scenarios/{s}.yaml", s in _SLOW_SCENARIOS) for s in _SCENARIOS
     if f"run-{s}" not in _ONCE]
    + [_case(f"run-json-{s}", f"run scenarios/{s}.yaml --json", s in _SLOW_SCENARIOS) for s in _SCENARIOS
       if f"run-json-{s}" not in _ONCE]
    + [_case(f"topo-{t}", f"topo show {t}") for t in _TOPOLOGIES]
    + [
        _case("topo-json-tpu-v4-twisted", "topo show tpu-v4 --slice 4x4x8 --twisted --json"),
        _case("topo-json-dgx-h100-1024", "topo show dgx-h100 --chips 1024 --json"),
        _case("run-trace", "run scenarios/default.yaml --trace {tmp}/step.json"),
        _case("run-trace-all", "run scenarios/llama3-8b-8xh100.yaml --trace {tmp}/step.json --trace-ranks all"),
        _case("run-tokens", "run scenarios/llama3-70b-1024xh100.yaml --set training.tokens=15T --json"),
        _case("run-failures-seed", "run scenarios/llama3-70b-1024xh100-failures.yaml --seed 3 --json"),
        _case("run-what-if", "run scenarios/default.yaml --set cluster.chips=16 --set parallelism.tp=4"),
        _case("run-stragglers-small",
              "run scenarios/llama3-70b-1024xh100-stragglers.yaml --set cluster.chips=128 --steps 2 --json",
              slow=True),
        _case("run-shared-with", "run scenarios/llama3-70b-1024xh100.yaml --set cluster.chips=512 "
                                 "--set cluster.shared_with=scenarios/llama3-70b-1024xh100.yaml --json"),
        _case("run-degraded", "run tests/golden/degraded.yaml --json"),
        _case("collective-dgx-h100", "collective --topology dgx-h100 --chips 16 --op allreduce --max-bytes 1G"),
        _case("collective-tpu-v4", "collective --topology tpu-v4 --chips 256 --op allgather --algo torus --csv"),
        _case("collective-nvl72", "collective --topology gb200-nvl72 --chips 144 --op reducescatter"),
        _case("collective-p5-2.18", "collective --topology aws-p5 --chips 16 --op allreduce --nccl-version 2.18 --csv"),
        _case("collective-a4", "collective --topology gcp-a4 --chips 16 --op allgather --csv"),
        _case("collective-3tier", "collective --topology h100-3tier --chips 1024 --op alltoall --max-bytes 64M"),
        _case("collective-dragonfly", "collective --topology slingshot-dragonfly --chips 64 --op broadcast"),
        _case("collective-sendrecv", "collective --topology dgx-h100 --chips 16 --op sendrecv --csv"),
        _case("collective-sharp", "collective --topology dgx-h100 --chips 256 --op allreduce --sharp --csv"),
        _case("sweep", "sweep scenarios/default.yaml --over cluster.chips=8,16 --workers 1"),
        _case("sweep-json", "sweep scenarios/default.yaml --over parallelism.tp=1,2,3 --workers 1 --json"),
        _case("plan", "plan --model llama3-8b --tokens 1T --days 30 --topology dgx-h100,tpu-v5p --max-chips 64",
              slow=True),
        _case("plan-json", "plan --model llama3-8b --tokens 1T --days 30 --topology dgx-h100 --max-chips 32 --json"),
        _case("whatif", "whatif validation/stragglers/trace-AR.parquet --json"),
        _case("validate-compute", "validate --suite compute --json"),
        _case("validate-collectives", "validate --suite collectives --json", slow=True),
        _case("validate-failures", "validate --suite failures --json"),
        _case("validate-stragglers", "validate --suite stragglers --json"),
        _case("validate-training", "validate --suite training --json", slow=True),
        _case("bad-tp", "run scenarios/default.yaml --set parallelism.tp=3"),
        _case("bad-key", "run scenarios/default.yaml --set cluster.chipz=8"),
        _case("bad-oom", "run scenarios/llama3-70b-1024xh100.yaml --set parallelism.tp=1 --set parallelism.pp=1 "
                           "--set training.global_batch=1024"),
        _case("bad-op", "collective --topology dgx-h100 --op allfoo"),
        _case("bad-plan", "plan --model llama9 --tokens 1T --days 30 --topology dgx-h100"),
    ]
)


def _play(argv: str, tmp: Path) -> str:
    """The command's exit status, stdout and stderr as one text, the temporary folder named <tmp>."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv.replace("{tmp}", str(tmp)).split())
    text = f"$ clustersim {argv}\nexit {code}\n--- stdout\n{out.getvalue()}--- stderr\n{err.getvalue()}"
    files = sorted(tmp.iterdir())
    for f in files:
        text += f"--- file {f.name}\n{f.read_text()}\n"
    return re.sub(re.escape(str(tmp)), "<tmp>", text)


@pytest.mark.parametrize(("name", "argv"), CASES)
def test_output_is_unchanged(name: str, argv: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if name == "validate-training":
        request.getfixturevalue("shared_training_report")
    got = _play(argv, tmp_path)
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.write_text(got)
    assert path.exists(), f"no golden file {path.name}; make it with CLUSTERSIM_UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{name}: the output of `clustersim {argv}` changed"
