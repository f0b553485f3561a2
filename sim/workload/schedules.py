"""Pipeline schedules: the order in which a stage runs forward (F) and backward (B) passes.

Each stage gets a list of (kind, micro-batch, chunk) with chunk the model chunk it holds (0 ..
virtual_stages-1). GPipe: every forward, then every backward. 1F1B (Narayanan et al. 2021,
PipeDream-Flush): pp - stage - 1 warm-up forwards, then one forward and one backward in turn, then
the remaining backwards. Interleaved 1F1B (Megatron-LM ``forward_backward_pipelining_with_
interleaving``): micro-batches in groups of pp cycle through the chunks; warm-up
(pp - stage - 1) * 2 + (v - 1) * pp forwards.
"""

from __future__ import annotations

import functools

__all__ = ["schedule"]

Step = tuple[str, int, int]          # ("F" | "B", micro-batch, chunk on this stage)


@functools.lru_cache(maxsize=4096)
def schedule(kind: str, stage: int, pp: int, micro: int, vs: int = 1) -> tuple[Step, ...]:
    """The stage's steps in order (memoised: the plan search asks for the same ones often)."""
    return tuple(_schedule(kind, stage, pp, micro, vs))


def _schedule(kind: str, stage: int, pp: int, micro: int, vs: int) -> list[Step]:
    if kind == "gpipe":
        return [("F", m, 0) for m in range(micro)] + [("B", m, 0) for m in reversed(range(micro))]
    if kind == "1f1b" or vs == 1:
        warm = min(pp - stage - 1, micro)
        out: list[Step] = [("F", m, 0) for m in range(warm)]
        f, b = warm, 0
        while f < micro:
            out.append(("F", f, 0))
            f += 1
            out.append(("B", b, 0))
            b += 1
        out += [("B", m, 0) for m in range(b, micro)]
        return out
    return _interleaved(stage, pp, micro, vs)


def _interleaved(stage: int, pp: int, micro: int, vs: int) -> list[Step]:
    total = micro * vs

    def fwd(k: int) -> Step:
        group, pos = divmod(k, pp * vs)
        chunk = pos // pp
        return ("F", group * pp + pos % pp, chunk)

    def bwd(k: int) -> Step:
        group, pos = divmod(k, pp * vs)
        chunk = vs - 1 - pos // pp
        return ("B", group * pp + pos % pp, chunk)

    warm = min((pp - stage - 1) * 2 + (vs - 1) * pp, total)
    out: list[Step] = [fwd(k) for k in range(warm)]
    f, b = warm, 0
    while f < total:
        out.append(fwd(f))
        f += 1
        out.append(bwd(b))
        b += 1
    out += [bwd(k) for k in range(b, total)]
    return out
