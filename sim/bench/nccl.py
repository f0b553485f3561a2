"""The NCCL sweep of ``clustersim bench`` on a machine with more than one GPU: all-reduce and
all-gather over every GPU present, through ``torch.distributed`` (NCCL) in one spawned process per
GPU, timed as nccl-tests times them (out of place, float, each size after warm-up calls), one
result per size sent back as soon as it is timed.

Per size: 3 warm-up calls, then 10 timed calls (CUDA events around each); the row is the median
call of the slowest rank. ``size_bytes`` is nccl-tests' size: the whole buffer (all-gather: the
gathered output, ``count`` its elements).
"""

from __future__ import annotations

import os
import queue
import socket
from collections.abc import Iterator, Sequence
from typing import Any

from .runner import CaseSkipped
from .specs import REPS, WARMUP

__all__ = ["collective_times"]

_FLOAT_B = 4
# Seconds to wait for the next size: the first includes starting the processes, importing PyTorch
# and NCCL's communicator set-up.
_FIRST_TIMEOUT_S = 180.0
_NEXT_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collective_times(op: str, sizes: Sequence[int], gpus: int) -> Iterator[tuple[int, int, float]]:
    """(size_bytes, count, seconds) of *op* (``allreduce`` | ``allgather``) at each size over GPUs
    0..gpus-1, as each size is timed; ``CaseSkipped`` when a process fails or stops answering."""
    import torch.multiprocessing as mp  # type: ignore[import-not-found, unused-ignore]

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(rank, gpus, port, op, tuple(sizes), results), daemon=True)
             for rank in range(gpus)]
    for p in procs:
        p.start()
    try:
        for i in range(len(sizes)):
            try:
                item = results.get(timeout=_FIRST_TIMEOUT_S if i == 0 else _NEXT_TIMEOUT_S)
            except queue.Empty:
                raise CaseSkipped("the NCCL processes stopped answering") from None
            if item[0] == "error":
                raise CaseSkipped(str(item[1]))
            yield int(item[0]), int(item[1]), float(item[2])
    finally:
        for p in procs:
            p.join(timeout=30)
        for p in procs:
            if p.is_alive():
                p.terminate()


def _worker(rank: int, world: int, port: int, op: str, sizes: tuple[int, ...], results: Any) -> None:
    """One rank of the sweep (runs in its own process)."""
    import functools

    import torch  # type: ignore[import-not-found, unused-ignore]
    import torch.distributed as dist  # type: ignore[import-not-found, unused-ignore]

    from .torch_backend import median_call_s

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    try:
        dist.init_process_group("nccl", rank=rank, world_size=world)
        for size in sizes:
            count = size // (_FLOAT_B * world) * world          # whole elements on every rank
            out = torch.ones(count, device=dev, dtype=torch.float32)
            call = (functools.partial(dist.all_reduce, out) if op == "allreduce" else
                    functools.partial(dist.all_gather_into_tensor, out,
                                      torch.ones(count // world, device=dev, dtype=torch.float32)))
            for _ in range(WARMUP):
                call()
            torch.cuda.synchronize(dev)
            dist.barrier()
            slowest = torch.tensor([median_call_s(torch.cuda, call, REPS)], device=dev)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if rank == 0:
                results.put((count * _FLOAT_B, count, float(slowest.item())))
            del out, call
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line, which stops the sweep
        results.put(("error", f"rank {rank}: {type(e).__name__}: {str(e).strip()[:200]}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
