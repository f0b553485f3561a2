"""Calibration constants: the one place for numbers fitted to measurements.

Each constant names the data it was fitted on (the ``calibration`` split of ../shared/validation
only) and how; ``tests/test_calibration.py`` re-runs each fit and checks the value here.
"""

from __future__ import annotations

# Achievable fraction of a link's line rate for bulk collective traffic, by link kind.
#
# nvlink: fitted on the calibration split's single-node NVSwitch runs in the bandwidth regime
#   (8xH100 all-gather, all-to-all, send/recv; 8xA100 all-reduce, send/recv; sizes >= 64 MiB):
#   the median of measured busbw / busbw predicted with the full NVLink rate (fit: see
#   ``sim.collectives.fit.fit_link_efficiency``). NCCL's own topology model assumes 20.6 of 25 GB/s
#   per NVLink4 link (0.82, topo.h), in line with this fit.
# ib: NIC / InfiniBand links. No calibration-split run is bound by the NICs alone (the multi-node
#   calibration runs are capped by NCCL's NVLSTree ceiling), so no fit: the InfiniBand data rate
#   after 64b/66b encoding, 64/66 = 0.97 (IBTA: NDR and HDR use 64b/66b).
LINK_EFFICIENCY: dict[str, float] = {
    "nvlink": 0.77,
    "ib": 64 / 66,
}
