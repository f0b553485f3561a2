"""What an interruption costs a job, part by part, and how each recovery strategy changes it
(``failures.recovery``; ``sim.faults`` plays them). Every default follows the job: its size, its
model state, its storage and its step time. A scenario's own ``failures.*_s`` win.

- **Detection**: 60 s, the failure detection of Meta's synchronous recovery at ~100K GPUs (FT-HSDP,
  arXiv 2602.00277, breakdown as quoted by a digest: detection 60 s, scheduling 120 s, checkpoint
  load 120 s, NCCL init 300 s, first step 200 s; validation/failures.md).
- **Swap**: a replacement for the failed swap unit (``sim.reliability.job_units``): 120 s to
  schedule a free host (same breakdown); with hot spares, ones already allocated and initialised
  (no scheduling), a pool of 2% of the swap units by default (Lenovo's NVL72 guidance, as
  reported second-hand) that falls back to a cold replacement when it runs dry; a TPU cube
  swapped in by the optical switches, 10 s (Gemini report). A pool given to a whole-job restart
  (``failures.spares``: a dedicated cluster's idle units) that runs dry waits for the first
  repaired unit (``repair_h``).
- **Restart**: the framework and its communicators initialised again, then the first steps:
  NCCL initialisation of 300 s at 98,304 GPUs (same breakdown) scaling with the square root of the
  ranks (it is about 20 s at 512 GPUs, where Ai2 and Lambda's 512-B200 run recovered in a median
  3 min 42 s all told), and a first-step effect of 10 steps (200 s of a ~20 s step at 98K).
- **Checkpoint**: the model state, bf16 weights plus the optimizer's state
  (``optimizer_bytes_per_param``: 12 bytes by default), written and read at the storage bandwidth
  the job gets: 0.122 GB/s a chip (Llama 3: 2 TB/s sustained for 16,384 GPUs, section 3.3.4)
  unless ``failures.storage_GBps`` says; the interval Young/Daly's unless given.
- **In-memory checkpoints** (Gemini; ByteRobust: 0.01-0.04 s blocking a step): each rank's shard
  copied to a peer host's memory over the host link at every interval, and read back from it
  over the network; the interval never shorter than a step.
- **Replica recovery** (FT-HSDP): the surviving data-parallel replicas go on after a stall of the
  detection and 120 s of reconfiguration (3 minutes in all at ~100K GPUs); the lost replica
  restarts on a replacement, fetches the state from a peer and rejoins with a 120 s stall (the
  source: "about 2 min"). While it is away the job trains at (R - 1) / R of its rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import FailuresConfig
from .reliability import Units

__all__ = ["RECOVERIES", "Recovery", "recovery_costs", "young_daly_interval_s", "STORAGE_BPS_PER_CHIP"]

RECOVERIES = ("restart", "hot_spare", "replica", "in_memory_checkpoint")

DETECT_S = 60.0
SCHEDULE_S = 120.0
OCS_SWAP_S = 10.0
NCCL_INIT_REF_S, NCCL_INIT_REF_RANKS = 300.0, 98304
FIRST_STEPS = 10
STORAGE_BPS_PER_CHIP = 2e12 / 16384
REPLICA_RECONFIGURE_S = 120.0
REPLICA_REJOIN_STALL_S = 120.0


def young_daly_interval_s(mtbf_s: float, checkpoint_s: float) -> float:
    """Young (1974) first-order optimum: sqrt(2 x MTBF x checkpoint cost)."""
    return math.sqrt(2 * mtbf_s * checkpoint_s)


@dataclass(frozen=True)
class Recovery:
    """Seconds each part of an interruption costs one job under one strategy."""

    strategy: str
    detect_s: float
    swap_s: float              # a replacement ready (spare or scheduled)
    restart_s: float           # initialisation and the first steps
    load_s: float              # the checkpoint read back
    write_s: float             # one checkpoint's blocking write
    interval_s: float          # checkpoint period (work between checkpoints)
    repair_s: float            # a failed swap unit back in the spare pool
    spares: int | None         # spare swap units (None: a free one is always found)
    cold_swap_s: float | None  # a dry pool's fallback: a cold replacement (None: wait for repair)
    replicas: int              # data-parallel replicas (replica recovery)
    reconfigure_s: float       # replica recovery: the survivors' stall beyond detection
    rejoin_stall_s: float      # replica recovery: the stall when the lost replica rejoins

    @property
    def downtime_s(self) -> float:
        """A whole-job restart: detection, swap, restart, checkpoint load."""
        return self.detect_s + self.swap_s + self.restart_s + self.load_s

    def parts(self) -> dict[str, float]:
        """The parts of one unexpected interruption's downtime (whole-job strategies)."""
        if self.strategy == "replica":
            return {"detect": self.detect_s, "reconfigure": self.reconfigure_s,
                    "rejoin": self.rejoin_stall_s}
        return {"detect": self.detect_s, "swap": self.swap_s, "restart": self.restart_s,
                "checkpoint_load": self.load_s}


def state_bytes(params: int, optimizer_bytes: float) -> float:
    """Model state a checkpoint holds: bf16 weights and the optimizer's bytes a parameter."""
    return params * (2.0 + optimizer_bytes)


def recovery_costs(cfg: FailuresConfig, units: Units, mtbf_s: float, *,
                   state_B: float, step_s: float, replicas: int, host_link_Bps: float,
                   network_Bps: float, ocs_spares: bool) -> Recovery:
    """The costs of *cfg*'s strategy for a job on *units* whose whole-job MTBF is *mtbf_s*."""
    strategy = cfg.recovery
    storage = (cfg.storage_GBps * 1e9 if cfg.storage_GBps is not None
               else STORAGE_BPS_PER_CHIP * units.chips)
    in_memory = strategy == "in_memory_checkpoint"
    shard = state_B / units.chips
    if in_memory:
        write = shard / host_link_Bps
        load = shard / network_Bps
    elif strategy == "replica":                # checkpoints to storage; a rejoining replica
        write = state_B / storage              # fetches its shards from a peer replica
        load = state_B * replicas / units.chips / network_Bps
    else:
        write = state_B / storage
        load = state_B / storage
    write = cfg.checkpoint_write_s if cfg.checkpoint_write_s is not None else write
    load = cfg.checkpoint_load_s if cfg.checkpoint_load_s is not None else load
    hot = strategy in ("hot_spare", "replica")
    if cfg.swap_s is not None:
        swap = cfg.swap_s
    elif ocs_spares and units.swap_unit == "domain":
        swap = OCS_SWAP_S
    else:
        swap = 0.0 if hot else SCHEDULE_S
    ranks = units.chips // replicas if strategy == "replica" else units.chips
    init = NCCL_INIT_REF_S * math.sqrt(ranks / NCCL_INIT_REF_RANKS)
    restart = cfg.restart_s if cfg.restart_s is not None else init + FIRST_STEPS * step_s
    if cfg.checkpoint_interval_min is not None:
        interval = cfg.checkpoint_interval_min * 60
    else:
        interval = young_daly_interval_s(mtbf_s, max(write, 1e-3))
        if in_memory:
            interval = max(interval, step_s)
    spares = cfg.spares
    if spares is None and strategy == "hot_spare":
        spares = max(1, math.ceil(0.02 * units.swap_units))
    cold = OCS_SWAP_S if ocs_spares and units.swap_unit == "domain" else SCHEDULE_S
    return Recovery(strategy, cfg.detect_s if cfg.detect_s is not None else DETECT_S, swap, restart,
                    load, write, interval, cfg.repair_h * 3600, spares, cold if hot else None,
                    replicas, REPLICA_RECONFIGURE_S, REPLICA_REJOIN_STALL_S)
