"""Units: SI inside the code; every conversion to or from a display unit lives here.

GB = 10^9 bytes, GiB = 2^30 bytes, Gb = 10^9 bits (the convention of ../shared/reference/FACTS.md).
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TFLOPS = 1e12
US = 1e-6
HOUR_S = 3600.0
DAY_S = 86400.0


def Gbps_to_Bps(gbit_per_s: float) -> float:
    """Network line rate in 10^9 bits/s to bytes/s (400 Gb/s -> 5e10 B/s)."""
    return gbit_per_s * 1e9 / 8


def GBps_to_Bps(gbyte_per_s: float) -> float:
    """10^9 bytes/s to bytes/s."""
    return gbyte_per_s * GB


def Bps_to_GBps(byte_per_s: float) -> float:
    """bytes/s to 10^9 bytes/s."""
    return byte_per_s / GB


def us_to_s(microseconds: float) -> float:
    return microseconds * US


def s_to_us(seconds: float) -> float:
    return seconds / US
