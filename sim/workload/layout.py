"""Which device holds which rank: Megatron's order, tensor-parallel innermost.

Rank coordinates (tp, cp, dp, pp) map to device ``((pp * dp_size + dp) * cp_size + cp) * tp_size
+ tp`` (Megatron-LM ``RankGenerator`` default order "tp-cp-ep-dp-pp"), so a TP group is 8
consecutive GPUs of one DGX node and a TPU's TP group is a line along the fastest torus axis.
Expert-parallel groups are consecutive data-parallel ranks. With ``zero_group`` (hybrid sharding),
a ZeRO/FSDP shard group is ``zero_group`` consecutive data-parallel ranks (one TPU slice when
``zero_group = dp / slices``) and the ranks at the same place in the other groups hold replicas.
Pipeline stages are the outermost coordinate, so with ``pp > 1`` on several TPU slices a slice
holds whole stages (pipeline transfers cross the DCN) and ``dp / slices`` is no longer one slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ParallelismConfig

__all__ = ["Layout"]


@dataclass(frozen=True, slots=True)
class Layout:
    """The rank <-> device mapping of a plan; its sizes are the config's (``Layout.of``)."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    shard_dp: int                 # data-parallel ranks per ZeRO shard group (all of dp unless hybrid)
    replicas: int                 # copies of the sharded state: dp / shard_dp
    offset: int = 0               # the job's first device (a second job on the same fabric)

    @classmethod
    def of(cls, par: ParallelismConfig, offset: int = 0) -> "Layout":
        return cls(par.tp, par.cp, par.dp, par.pp, par.ep, par.shard_dp, par.replicas, offset)

    def __post_init__(self) -> None:
        assert self.shard_dp * self.replicas == self.dp, self

    def device(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return self.offset + ((pp * self.dp + dp) * self.cp + cp) * self.tp + tp

    def tp_group(self, stage: int = 0) -> list[int]:
        return [self.device(t, 0, 0, stage) for t in range(self.tp)]

    def cp_group(self, stage: int = 0) -> list[int]:
        return [self.device(0, c, 0, stage) for c in range(self.cp)]

    def dp_group(self, stage: int = 0) -> list[int]:
        """Ranks that hold the same parameters: data- and context-parallel ranks of one stage."""
        return [self.device(0, c, d, stage) for d in range(self.dp) for c in range(self.cp)]

    def shard_group(self, stage: int = 0) -> list[int]:
        """Ranks that split one copy of the ZeRO-sharded state: the first shard group's ranks."""
        return [self.device(0, c, d, stage) for d in range(self.shard_dp) for c in range(self.cp)]

    def replica_groups(self, stage: int = 0) -> list[list[int]]:
        """Every set of ranks that hold the same shard in different replicas (hybrid sharding);
        all of them reduce their gradients at once, so they share the links between replicas."""
        # (replica, d, c, t) -> [d, c, t] rows of replicas
        g = self._grid(stage).reshape(self.replicas, self.shard_dp, self.cp, self.tp)
        return g.transpose(1, 2, 3, 0).reshape(-1, self.replicas).tolist()

    def ep_group(self, stage: int = 0) -> list[int]:
        return [self.device(0, 0, d, stage) for d in range(self.ep)]

    # Every group of one kind in a stage (they run their collectives at the same moment).
    # PERF: index arithmetic on the stage's (dp, cp, tp) grid of devices, the same numbers as
    # ``device`` in the same order (98,304 GPUs: 6,144 ranks a stage, groups of every kind for
    # each of 16 stages; benchmarks/test_bench_training.py).

    def _grid(self, stage: int) -> np.ndarray:
        """Devices of *stage* indexed [dp, cp, tp]."""
        n = self.dp * self.cp * self.tp
        return (self.offset + stage * n + np.arange(n)).reshape(self.dp, self.cp, self.tp)

    def tp_groups(self, stage: int = 0) -> list[list[int]]:
        return self._grid(stage).reshape(-1, self.tp).tolist()

    def cp_groups(self, stage: int = 0) -> list[list[int]]:
        return self._grid(stage).transpose(0, 2, 1).reshape(-1, self.cp).tolist()

    def ep_groups(self, stage: int = 0) -> list[list[int]]:
        g = self._grid(stage).reshape(self.dp // self.ep, self.ep, self.cp, self.tp)
        return g.transpose(0, 2, 3, 1).reshape(-1, self.ep).tolist()

    def dp_groups(self, stage: int = 0) -> list[list[int]]:
        return self._grid(stage).transpose(2, 0, 1).reshape(self.tp, -1).tolist()

    def shard_groups(self, stage: int = 0) -> list[list[int]]:
        g = self._grid(stage).reshape(self.replicas, self.shard_dp, self.cp, self.tp)
        return g.transpose(0, 3, 1, 2).reshape(self.replicas * self.tp, -1).tolist()

    def stage_pairs(self, stage: int, step: int = 1) -> list[tuple[int, int]]:
        """Every rank of *stage* with its peer in stage + *step* (pipeline send/recv)."""
        other = (stage + step) % self.pp
        return list(zip(self._grid(stage).ravel().tolist(), self._grid(other).ravel().tolist()))

    def groups(self, stage: int) -> dict[str, list[list[int]]]:
        return {"tp": self.tp_groups(stage), "cp": self.cp_groups(stage),
                "ep": self.ep_groups(stage), "dp": self.dp_groups(stage)}

    def local_group(self, kind: str, local: int) -> tuple[tuple[int, ...], int]:
        """(group id, size) of the *kind* group ("tp", "cp", "ep", "dp") of the stage-local rank
        *local* = (dp * cp + cp) * tp + tp: the mapping of ``device`` within one stage."""
        t = local % self.tp
        c = (local // self.tp) % self.cp
        d = local // (self.tp * self.cp)
        if kind == "tp":
            return (d, c), self.tp
        if kind == "cp":
            return (d, t), self.cp
        if kind == "ep":
            return (d // self.ep, c, t), self.ep
        return (t,), self.dp * self.cp

    def stage_pair(self, stage: int) -> tuple[int, int]:
        """Representative devices of stage and stage + 1 (pipeline send/recv)."""
        return self.device(0, 0, 0, stage), self.device(0, 0, 0, (stage + 1) % self.pp)
