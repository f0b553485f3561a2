"""What fails and how often: interruption causes by the unit they take down, per chip generation,
with the spread between published fleets (``sim.faults`` plays them over days).

**Units.** A cause strikes one unit and interrupts a synchronous job, since every rank waits on
every other: a ``chip`` (the GPU or TPU itself: core, HBM, SRAM, on-die processor, thermal
sensor, silent data corruption) or a ``host`` (the server around its chips: CPU, memory, SSD,
power, NIC, chassis, its network links and switch ports, host maintenance, and the software its
ranks run: framework bugs, NCCL watchdog timeouts). Software counts per host because the
per-node failure rate of Meta's research clusters is the same for 8-GPU and 1,024-GPU jobs
(Kokolis et al. 2025, figure 7, validation/failures.md section 6): no job-level term that does
not grow with the job shows in it. Planned interruptions are per job (``FailuresConfig``).
A failure takes down its unit's *swap unit*: the host, or where chips fail together beyond a host
the whole domain (an NVL72 rack's NVLink domain, a TPU cube behind its optical switches;
``job_units``), which is what a spare must replace and what replica recovery loses.

**Rates.** The reference fleet is Meta's Llama 3 pre-training (Dubey et al. 2024, section
3.3.4, Table 5: 419 unexpected interruptions in 54 days on 16,384 H100 in 2,048 Grand Teton
hosts): each cause's count over its unit-hours. A chip family's fleets are that table times a
fleet factor, log-normal with the median and spread of the published fleets of that family
relative to it (``FLEET_SOURCES``), so a prediction's 5-95% band says how much fleets differ,
not only how the Monte Carlo scatters. A family with one source takes the spread pooled over
the families with several.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Cause", "Units", "REFERENCE_CAUSES", "FLEET_SOURCES", "REFERENCE_PER_1000_HOST_DAYS",
           "fleet_lognormal", "job_units", "cause_rates_per_hour"]


@dataclass(frozen=True, slots=True)
class Cause:
    """An interruption cause: the unit it strikes and its rate per unit-hour in the reference
    fleet; ``silent`` (silent data corruption) is found only after a detection delay."""

    name: str
    category: str
    unit: str                  # chip | host
    per_unit_hour: float
    silent: bool = False


# Llama 3 405B pre-training, 54-day snapshot (Dubey et al. 2024, Table 5): counts per cause.
_LLAMA3_HOURS = 54 * 24
_LLAMA3_CHIPS = 16384
_REFERENCE_HOST_CHIPS = 8
_LLAMA3_HOSTS = _LLAMA3_CHIPS // _REFERENCE_HOST_CHIPS
_LLAMA3_TABLE: tuple[tuple[str, str, str, int], ...] = (
    ("faulty-gpu", "GPU", "chip", 148), ("gpu-hbm3", "GPU", "chip", 72),
    ("software-bug", "Dependency", "host", 54), ("network-switch-cable", "Network", "host", 35),
    ("host-maintenance", "Unplanned Maintenance", "host", 32), ("gpu-sram", "GPU", "chip", 19),
    ("gpu-system-processor", "GPU", "chip", 17), ("nic", "Host", "host", 7),
    ("nccl-watchdog", "Unknown", "host", 7), ("silent-data-corruption", "GPU", "chip", 6),
    ("gpu-thermal-sensor", "GPU", "chip", 6), ("ssd", "Host", "host", 3),
    ("power-supply", "Host", "host", 3), ("server-chassis", "Host", "host", 2),
    ("io-expansion-board", "Host", "host", 2), ("dependency", "Dependency", "host", 2),
    ("cpu", "Host", "host", 2), ("system-memory", "Host", "host", 2),
)

REFERENCE_CAUSES: tuple[Cause, ...] = tuple(
    Cause(n, c, u, k / ((_LLAMA3_CHIPS if u == "chip" else _LLAMA3_HOSTS) * _LLAMA3_HOURS),
          silent=(n == "silent-data-corruption"))
    for n, c, u, k in _LLAMA3_TABLE)
# The reference fleet's unexpected interruptions per 1,000 host-days (8-GPU hosts): 3.79.
REFERENCE_PER_1000_HOST_DAYS = 1000 * 419 / (_LLAMA3_HOSTS * 54)

# Published fleets, as unexpected interruptions per 1,000 8-GPU host-days (or per 1,000 chip-days
# x 8 for TPUs) over the reference's 3.79: (chip family, rate, what and where).
FLEET_SOURCES: tuple[tuple[str, float, str], ...] = (
    ("H100", REFERENCE_PER_1000_HOST_DAYS,
     "Llama 3 405B, 16,384 H100, 54 days: 419 unexpected interruptions (Dubey et al. 2024, 3.3.4)"),
    ("H100", 2.3, "Meta FT-HSDP production workload at 32K H100: 2.3 interruptions per 1,000 "
     "servers a day (arXiv 2602.00277, via a technical digest; validation/failures.md)"),
    ("H100", 1000 * (24 * 60 / 18) / (98304 / 8),
     "Meta FT-HSDP at ~100K H100 (98,304 in 12 replicas): one failure every 18 minutes (same "
     "source)"),
    ("A100", 1000 * (24 / 7.9) / 128,
     "Meta RSC-1, jobs of 1,024 A100: mean time to failure 7.9 h (Kokolis et al. 2025, fig. 7)"),
    ("A100", 6.50, "Meta RSC-1 (16k A100): 6.50 failures per 1,000 node-days (same, section IV)"),
    ("A100", 2.34, "Meta RSC-2 (8k A100): 2.34 failures per 1,000 node-days (same)"),
    ("A100", 1000 * 2 / 124, "OPT-175B, 992 A100 on a cloud: '~2 machines go down every day' "
     "(metaseq OPT chronicles, final update)"),
    ("A100", 1000 / (7 * 48), "BLOOM-176B, 384 A100 (48 nodes) on Jean Zay: 'every week or so "
     "... one of the gpus dies' (bigscience tr11 chronicles)"),
    ("B200", REFERENCE_PER_1000_HOST_DAYS * math.sqrt(2000 * 5000 / (1000 * 3000)),
     "GB200 NVL72 against H100 mean time between interruptions, 1,000-3,000 vs 2,000-5,000 "
     "GPU-days (SemiAnalysis, second-hand; the only Blackwell figure found)"),
    ("TPU", 8 * 1000 * 0.0008 / 4,
     "TPU v4: 0.08% of machines (4-chip hosts) fail a day (Zu et al., NSDI'24, as tabulated by "
     "an aggregator; uncertain)"),
)
# Families without sources of their own borrow the nearest generation's.
_FAMILY_SOURCES = {"B300": "B200"}


def _logs(family: str) -> list[float]:
    fam = _FAMILY_SOURCES.get(family, family)
    return [math.log(rate / REFERENCE_PER_1000_HOST_DAYS) for f, rate, _ in FLEET_SOURCES if f == fam]


def _pooled_sigma() -> float:
    """The spread within families that have several fleets, pooled (population variance)."""
    num = den = 0.0
    for fam in {f for f, _, _ in FLEET_SOURCES}:
        xs = _logs(fam)
        if len(xs) > 1:
            mean = sum(xs) / len(xs)
            num += sum((x - mean) ** 2 for x in xs)
            den += len(xs)
    return math.sqrt(num / den)


def fleet_lognormal(family: str) -> tuple[float, float]:
    """(median, sigma of the log) of the fleet factor of *family*'s fleets over the reference:
    the geometric mean and the spread of its published fleets (a single fleet: the pooled
    spread); a family with none: the reference's own (median 1) with the pooled spread."""
    xs = _logs(family)
    if not xs:
        return 1.0, _pooled_sigma()
    mean = sum(xs) / len(xs)
    if len(xs) == 1:
        return math.exp(mean), _pooled_sigma()
    return math.exp(mean), math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


@dataclass(frozen=True, slots=True)
class Units:
    """The units a job spans: chips, hosts, and swap units (the hosts, or the failure domains a
    host sits in: NVL72 racks, TPU cubes) with the chips each swap unit holds."""

    chips: int
    hosts: int
    swap_units: int
    chips_per_swap_unit: int
    swap_unit: str             # "host" | "domain"


def job_units(chips: int, chips_per_host: int, chips_per_domain: int = 0) -> Units:
    """The units *chips* span: hosts of *chips_per_host* and, where chips fail together beyond a
    host (*chips_per_domain* > chips_per_host), domains of *chips_per_domain*, the swap unit."""
    per_host = max(1, chips_per_host)
    hosts = max(1, math.ceil(chips / per_host))
    if chips_per_domain > per_host:
        return Units(chips, hosts, max(1, math.ceil(chips / chips_per_domain)), chips_per_domain,
                     "domain")
    return Units(chips, hosts, hosts, per_host, "host")


def cause_rates_per_hour(causes: tuple[Cause, ...], chips: int) -> tuple[float, ...]:
    """Each cause's rate for a job of *chips*, per hour, in the reference fleet: a chip cause per
    chip, a host cause per 8 chips (the reference's hosts; a host's NICs, links and ranks grow
    with the chips it holds, so a 4-chip TPU host carries half an 8-GPU host's)."""
    return tuple(c.per_unit_hour * (chips if c.unit == "chip" else chips / _REFERENCE_HOST_CHIPS)
                 for c in causes)
