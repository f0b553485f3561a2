"""The release rows as a regression gate (issue 32): each row of benchmarks/release.py, a whole
``python -m sim ...`` process timed against the bare-simpy reference, fails when its ratio is more
than 25% above the one stored in benchmarks/release_ratios.json (measured again up to 3 times
first: load only adds time), and is skipped when none is stored; a row with a memory limit
(``RSS_LIMIT_MiB``: the 131,072-GPU graph, 1 GiB) fails above it.

On demand: ``python -m pytest benchmarks/test_bench_release.py -m benchmark``. The quick rows'
test ids end in ``-quick``, so ``-k quick`` runs only them (and the check of the comparison
itself); .ci/run does so with CLUSTERSIM_BENCH_REPEATS=3 (5 runs per row otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import release

pytestmark = pytest.mark.benchmark
ATTEMPTS = 3


@pytest.mark.parametrize("name", [pytest.param(n, id=f"{n}-quick" if r.quick else n)
                                  for n, r in release.ROWS.items()])
def test_release_ratio(name: str) -> None:
    stored = release.stored_ratios().get(name)
    if stored is None:
        pytest.skip(f"{name}: no stored ratio in benchmarks/release_ratios.json; "
                    f"store one with: python benchmarks/release.py --rows {name} --update")
    # A shared machine's load only ever adds time: a row over the limit is measured again, up to
    # ATTEMPTS times, and fails only when every attempt is over (a real regression stays).
    for _ in range(ATTEMPTS):
        m = release.measure([name], release.default_repeats())[name]
        print(f"\n{name}: {m['median_s']:.2f} s, ratio {m['ratio']:.2f} (stored {stored:.2f}), "
              f"peak RSS {m['peak_rss_MiB']:.0f} MiB")
        if (why := release.regression(name, m["ratio"], stored)) is None:
            break
    assert why is None, why
    limit = release.RSS_LIMIT_MiB.get(name)
    assert limit is None or m["peak_rss_MiB"] <= limit, (name, m["peak_rss_MiB"], limit)


def test_quick_check_of_the_comparison(tmp_path: Path) -> None:
    path = tmp_path / "ratios.json"
    assert release.stored_ratios(path) == {}
    path.write_text(json.dumps({"ratios": {"run-16k": 10.0}}))
    assert release.stored_ratios(path) == {"run-16k": 10.0}
    assert release.regression("run-16k", 12.5, 10.0) is None                # +25%: the limit
    assert "26% above the stored 10.00" in release.regression("run-16k", 12.6, 10.0)
