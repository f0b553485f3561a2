"""What a run costs: the price assumed and its source, and for a token budget the time to train,
chip-hours, cost and energy (goodput included when the scenario models failures).

Time to train is tokens / (tokens/s x goodput), here and nowhere else (``run``'s failures and
cost, ``plan``'s candidates). Energy is the chips' TDP x hours x PUE: chips at their thermal
design power the whole time (an upper bound; training runs near it) and the data centre's
overhead on top. PUE 1.1 is assumed, the order of hyperscale fleets (Google reports a fleet-wide
trailing-twelve-month PUE of about 1.10). Chips without a published TDP (TPU v5e/v5p/v6e) get no
energy figure. Without a price (no ``cost.usd_per_chip_hour`` and none in the catalogue: GB200,
GB300, TPU7x) everything but the dollars is reported, and ``price_source`` says so (``no_price_note``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import InfeasibleError
from .units import DAY_S

if TYPE_CHECKING:                       # type names only
    from .config import Scenario
    from .hardware import Chip

__all__ = ["PUE", "TimeToTrain", "CostRecord", "time_to_train", "energy_MWh", "cost_summary",
           "no_price_note"]

PUE = 1.1


@dataclass(frozen=True)
class TimeToTrain:
    """How long a token budget takes at a step's rate, goodput applied where it is known."""

    token_budget: float
    seconds: float
    goodput_applied: bool

    @property
    def days(self) -> float:
        return self.seconds / DAY_S


@dataclass(frozen=True)
class CostRecord:
    """The price of a chip-hour and where it comes from; with ``training.tokens``, the time to
    train that budget and its chip-hours, cost and energy (None: the chip has no TDP). Without a
    price, ``usd_per_chip_hour`` and ``cost_usd`` are None and ``price_source`` says why."""

    usd_per_chip_hour: float | None
    price_source: str
    train: TimeToTrain | None = None
    chip_hours: float | None = None
    cost_usd: float | None = None
    energy_MWh: float | None = None


def time_to_train(tokens: float, tokens_per_s: float, goodput: float | None = None) -> TimeToTrain:
    """*tokens* at *tokens_per_s* times *goodput* (None: no failures modelled, every second
    trains). InfeasibleError when the goodput is 0: the job never completes a checkpoint."""
    if goodput is not None and goodput <= 0:
        raise InfeasibleError("failures: goodput 0: at these failure rates and checkpoint interval "
                              "the job never completes a checkpoint; no time to train exists")
    rate = tokens_per_s * (goodput if goodput is not None else 1.0)
    return TimeToTrain(tokens, tokens / rate, goodput is not None)


def energy_MWh(chip: Chip, chip_hours: float) -> float | None:
    """Chip-hours at the chip's TDP times PUE, in MWh; None for a chip without a published TDP."""
    return chip_hours * chip.tdp_W * PUE / 1e6 if chip.tdp_W is not None else None


def no_price_note(chip: Chip, how: str = "set cost.usd_per_chip_hour") -> str:
    """What every output says, once, in place of a cost it cannot give."""
    return f"no price known for {chip.name}; {how}"


def cost_summary(scn: Scenario, tokens_per_s: float, goodput: float | None = None) -> CostRecord:
    """The price of *scn*'s chips and, with ``training.tokens``, the time, chip-hours, cost and
    energy to train that many tokens at *tokens_per_s* (times *goodput*, when failures are
    modelled). No price known: the same record without the dollars (``no_price_note``)."""
    chip = scn.cluster.chip
    price = scn.cost.usd_per_chip_hour
    if price is None:
        source = no_price_note(chip)
    else:
        source = ("scenario cost.usd_per_chip_hour" if scn.raw.get("cost", {}) and
                  "usd_per_chip_hour" in (scn.raw.get("cost") or {}) else chip.price_source)
    tokens = scn.training.tokens
    if tokens is None:
        return CostRecord(price, source)
    train = time_to_train(tokens, tokens_per_s, goodput)
    chip_hours = scn.cluster.chips * train.seconds / 3600
    return CostRecord(price, source, train, chip_hours,
                      None if price is None else chip_hours * price, energy_MWh(chip, chip_hours))
