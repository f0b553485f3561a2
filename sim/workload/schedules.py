"""Pipeline schedules: the order in which a stage runs forward (F) and backward (B) passes, and
what that order holds in memory.

Each stage gets a list of (kind, micro-batch, chunk) with chunk the model chunk it holds (0 ..
virtual_stages-1; stage s's chunk c is the model's chunk c x pp + s, as Megatron-LM assigns
layers to virtual stages). GPipe (Huang et al. 2019): every forward, then every backward. 1F1B
(Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", section 2.2.1, PipeDream-Flush): pp - stage - 1 warm-up forwards, then one forward
and one backward in turn, then the remaining backwards. Interleaved 1F1B (same paper, section
2.2.2; Megatron-LM megatron/core/pipeline_parallel/schedules.py
``forward_backward_pipelining_with_interleaving``): micro-batches in groups of
``microbatch_group_size_per_vp_stage`` (default pp) run through chunk 0, then the same group
through chunk 1, ...; backwards run the chunks in reverse; warm-up depth
(pp - stage - 1) x 2 + (virtual_stages - 1) x group forwards (all of them when that reaches the
total). The group size is Llama 3's tunable number of micro-batches per round N (Dubey et al.
2024, "The Llama 3 Herd of Models", section 3.3.2): ``schedule(..., group=N)``; the scenario
schema does not expose it yet (every scenario runs N = pp, Megatron's default).

``peak_in_flight`` walks a stage's schedule (+1 at a chunk's F, -1 at its B) for the most chunks
it holds at once; ``stage_activation_peak_B`` weighs each in-flight chunk by its own layers (uneven
stages) and adds the output head's logits where they sit, for the memory model.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import ParallelismConfig

__all__ = ["peak_in_flight", "schedule", "stage_activation_peak_B", "stage_peak"]

Step = tuple[str, int, int]          # ("F" | "B", micro-batch, chunk on this stage)


@functools.lru_cache(maxsize=4096)
def schedule(kind: str, stage: int, pp: int, micro: int, vs: int = 1,
             group: int = 0, flushes: int = 1) -> tuple[Step, ...]:
    """The stage's steps in order (memoised: the plan search asks for the same ones often).
    *group*: micro-batches per round of the interleaved schedule (0: pp). *flushes*: schedules
    of micro / flushes micro-batches each, played one after another (each fills and drains the
    pipeline; ``ParallelismConfig.pipeline_flushes``), numbered on."""
    per = micro // flushes
    one = _schedule(kind, stage, pp, per, vs, group or pp)
    if flushes == 1:                # PERF: one schedule is its steps as they are (0 x per + m is m)
        return tuple(one)
    return tuple((k, f * per + m, c) for f in range(flushes) for k, m, c in one)


def _schedule(kind: str, stage: int, pp: int, micro: int, vs: int, group: int) -> list[Step]:
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
    return _interleaved(stage, pp, micro, vs, group)


def _interleaved(stage: int, pp: int, micro: int, vs: int, group: int) -> list[Step]:
    total = micro * vs
    # The k-th forward and the k-th backward: round k // (group x vs), place in it k % (group x vs).
    # PERF: every one listed in two passes, then dealt out (no call per step; a plan times
    # schedules of thousands of steps)
    at = [divmod(k, group * vs) for k in range(total)]
    fwd: list[Step] = [("F", rnd * group + pos % group, pos // group) for rnd, pos in at]
    bwd: list[Step] = [("B", rnd * group + pos % group, vs - 1 - pos // group) for rnd, pos in at]
    warm = min((pp - stage - 1) * 2 + (vs - 1) * group, total)
    out = fwd[:warm]
    for f, b in zip(range(warm, total), range(total)):      # one forward then one backward
        out.append(fwd[f])
        out.append(bwd[b])
    out += bwd[total - warm:]
    return out


def peak_in_flight(steps: Sequence[Step], weights: Sequence[float] | None = None) -> float:
    """The most a stage holds at once while it plays *steps*: +weights[chunk] at each forward of a
    chunk, -weights[chunk] at its backward (*weights* None: 1 per chunk, i.e. micro-batch chunks
    in flight). 1F1B: stage s holds min(pp - s, micro); interleaved: Megatron's warm-up depth + 1
    chunks; GPipe: every micro-batch."""
    held = peak = 0.0
    for kind, _m, c in steps:
        w = 1.0 if weights is None else weights[c]
        held += w if kind == "F" else -w
        peak = max(peak, held)
    return peak


def stage_peak(kind: str, stage: int, pp: int, micro: int, vs: int,
               weights: Sequence[float], group: int = 0) -> float:
    """``peak_in_flight`` of the stage's schedule with chunk *weights*, without walking more than
    a few rounds: after the warm-up the steady phase repeats every round of group x vs forwards
    (one backward each) and the cool-down only frees, so a schedule of enough micro-batches to
    hold the warm-up and two rounds reaches the same peak. GPipe holds every forward."""
    if kind == "gpipe":
        return micro * weights[0]
    n = group or pp
    if len(set(weights)) == 1:                  # equal chunks: Megatron's warm-up depth + 1
        warm = (pp - stage - 1) * 2 + (vs - 1) * n if vs > 1 else pp - stage - 1
        return min(warm + 1, micro * vs) * weights[0]
    rounds = -(-(2 * pp + (vs - 1) * n) // (n * vs)) + 2
    # PERF: bounded walk (a scenario may ask for 10^9 micro-batches; the refusal comes later)
    return peak_in_flight(schedule(kind, stage, pp, min(micro, rounds * n), vs, group), weights)


def stage_activation_peak_B(par: ParallelismConfig, layer_B: float, head_B: float = 0.0) -> float:
    """Activation bytes of the busiest pipeline stage at its schedule's peak: every chunk in flight
    holds its own layers x *layer_B* (one micro-batch's activations of one layer), and the chunk
    with the output head (the last stage's last chunk) also *head_B* (its logits). The embedding
    stores no activation of its own beyond the first layer's input, which *layer_B* counts."""
    kind = par.schedule
    vs = par.virtual_stages                     # 1 unless interleaved (the config's rule)
    micro, pp = par.microbatches // par.pipeline_flushes, par.pp   # one schedule's (each drains)
    per = par.model_chunk_layers                # stage s's chunk c: model chunk c x pp + s
    return _peak_B(kind, vs, micro, pp, per, par.microbatch_group, layer_B, head_B)


# PERF: memoised on everything it reads (a plan's layouts and XLA's remat trials ask the same
# schedule again with the same bytes: 32,000 calls in the v5p plan search, 4,458 distinct)
@functools.lru_cache(maxsize=8192)
def _peak_B(kind: str, vs: int, micro: int, pp: int, per: tuple[int, ...], group: int,
            layer_B: float, head_B: float) -> float:
    """``stage_activation_peak_B`` of the schedule's facts."""
    peak = 0.0
    seen: set[tuple[float, ...]] = set()
    for stage in range(pp):
        weights = [per[c * pp + stage] * layer_B for c in range(vs)]
        if stage == pp - 1:
            weights[vs - 1] += head_B
        # An earlier stage with the same chunks holds at least as much (a deeper warm-up of the
        # same forwards and backwards): only the first of each kind is walked.
        if tuple(weights) not in seen:
            seen.add(tuple(weights))
            peak = max(peak, stage_peak(kind, stage, pp, micro, vs, weights, group))
    return peak
