"""The format-neutral form of a measured per-operation trace: one row per recorded op.

Every trace reader (``sim.traces.megatron`` for the parquet traces of the StragglerAnalysis
artifact; a PyTorch-profiler / Kineto JSON reader would sit beside it) turns its files into an
``OpTable`` and a ``TraceMeta``; the dependency model (``sim.traces.program``) and the what-if
analysis (``sim.traces.whatif``) read only these two records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import ConfigError

__all__ = ["OpTable", "TraceMeta", "TraceReader"]


# Most ranks a measured job may have (the largest jobs traced run ~100k GPUs).
MAX_RANKS = 10_000_000


@dataclass(frozen=True, slots=True)
class TraceMeta:
    """The measured job's layout. ``dsp`` (the artifact's ``dsp_size``) multiplies the data-parallel
    degree (world size = dp x dsp x pp x tp); ``vpp`` is the number of model chunks per stage."""

    name: str
    dp: int
    pp: int
    tp: int
    vpp: int = 1
    dsp: int = 1
    world_size: int = 0

    def __post_init__(self) -> None:
        for f in ("dp", "pp", "tp", "vpp", "dsp"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_RANKS:
                raise ConfigError(f"trace meta {self.name!r}: {f}: expected a positive integer up to "
                                  f"{MAX_RANKS:,}, got {v!r}")
        want = self.dp * self.dsp * self.pp * self.tp
        if want > MAX_RANKS:
            raise ConfigError(f"trace meta {self.name!r}: dp x dsp x pp x tp = {want:,} ranks; at most "
                              f"{MAX_RANKS:,}")
        if self.world_size != want:
            raise ConfigError(
                f"trace meta {self.name!r}: world_size {self.world_size} != dp x dsp x pp x tp = "
                f"{self.dp} x {self.dsp} x {self.pp} x {self.tp} = {want}")


@dataclass(frozen=True)
class OpTable:
    """Measured ops, column by column (one entry per op; times in seconds from any origin).

    ``dp``/``stage``: the worker (data-parallel rank, pipeline stage); ``rank``: its global rank;
    ``optype``: e.g. ``forward-compute``, ``forward-send``, ``grads-reduce-scatter``;
    ``seq``: the op's order among the ops of its type on its worker in its step;
    ``chunk``: the model chunk within the stage (-1 where none); ``gchunk``: the chunk in the
    whole model (-1 where none); ``start_s``/``dur_s``: measured start and duration.
    """

    source: str
    dp: np.ndarray
    stage: np.ndarray
    rank: np.ndarray
    step: np.ndarray
    optype: np.ndarray            # str objects
    seq: np.ndarray
    chunk: np.ndarray
    gchunk: np.ndarray
    start_s: np.ndarray
    dur_s: np.ndarray
    notes: tuple[str, ...] = ()     # what the reader could not map or had to assume, one line each

    def __len__(self) -> int:
        return int(self.dp.shape[0])


class TraceReader(Protocol):
    """Reads one trace format into the neutral table (a variation point chosen by file suffix)."""

    def __call__(self, path: Path, meta: TraceMeta) -> OpTable: ...
