"""Progress bars for work that can take more than a couple of seconds (rich, on stderr).

Shown only when stderr is a terminal, so pipes, CI logs and ``--json`` output stay clean.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["available_cores", "progress"]

T = TypeVar("T")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the OS says), at least 1."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                     # no affinity on this OS (macOS, Windows)
        return os.cpu_count() or 1


def progress(items: Iterable[T], total: int, description: str) -> Iterator[T]:
    """Yield *items*, drawing a bar of *total* steps on stderr when it is a terminal."""
    if total < 2 or not sys.stderr.isatty():
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)
