"""Independent pieces of one command on several cores (PERF, issue 32): a process per piece.

The pieces share nothing (each builds its own topology and caches), so a piece returns what it
would return in this process; the results come back in the order of the items, and a piece's
error is raised as the same piece would raise it in one process (the first item's first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["ordered_map"]

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Sequence[T], workers: int, description: str,
                progress: Callable[[Iterable[Any], int, str], Iterable[Any]] | None = None) -> list[R]:
    """``[fn(x) for x in items]`` on up to *workers* processes (*fn* and the items must pickle);
    *progress* draws one step per finished piece."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    track = progress or (lambda it, n, d: it)
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        futures = [pool.submit(fn, x) for x in items]
        for _ in track(as_completed(futures), len(futures), description):
            pass
        return [f.result() for f in futures]
