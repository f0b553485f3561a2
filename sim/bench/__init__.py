"""``clustersim bench``: measure, on the local GPU, the kernel tables the compute model is fitted
on (``validation/compute/README.md``'s files and columns), so that ``sim.compute.tables`` fits
them as it fits the committed H100 tables.

``cases`` the case lists, the output tables and the time estimate; ``specs`` what one row times
(FLOPs, bytes, cells, the model's time); ``runner`` the command (checks, estimate, the rows written
as they are timed) over a ``TimingBackend``; ``torch_backend`` that backend on a CUDA GPU through
PyTorch (an optional extra, imported only there) and ``nccl`` its NCCL sweep.
"""

from __future__ import annotations

from .runner import CaseSkipped, TimingBackend, bench
from .torch_backend import open_torch

__all__ = ["CaseSkipped", "TimingBackend", "bench", "open_torch"]
