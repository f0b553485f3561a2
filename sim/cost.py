"""What a run costs: the price assumed and its source, and for a token budget the time to train,
chip-hours, cost and energy (goodput included when the scenario models failures).

Energy is the chips' TDP x hours x PUE: chips at their thermal design power the whole time (an
upper bound; training runs near it) and the data centre's overhead on top. PUE 1.1 is assumed,
the order of hyperscale fleets (Google reports a fleet-wide trailing-twelve-month PUE of about
1.10). Chips without a published TDP (TPU v5e/v5p/v6e) get no energy figure.
"""

from __future__ import annotations

from typing import Any

from .units import DAY_S

__all__ = ["PUE", "cost_summary"]

PUE = 1.1


def cost_summary(scn: Any, step: Any, goodput: float | None = None) -> dict[str, Any]:
    """Fields for ``run --json`` (and the table): price, and with ``training.tokens`` the time,
    chip-hours, cost and energy to train that many tokens."""
    chip = scn.cluster.chip
    price = scn.cost.usd_per_chip_hour
    source = ("scenario cost.usd_per_chip_hour" if scn.raw.get("cost", {}) and
              "usd_per_chip_hour" in (scn.raw.get("cost") or {}) else chip.price_source)
    out: dict[str, Any] = {"usd_per_chip_hour": price, "price_source": source}
    tokens = scn.training.tokens
    if tokens is None:
        return out
    if goodput is not None and goodput <= 0:
        from .errors import InfeasibleError

        raise InfeasibleError("failures: goodput 0: at these failure rates and checkpoint interval "
                              "the job never completes a checkpoint; no time to train exists")
    rate = step.tokens_per_s * (goodput if goodput is not None else 1.0)
    seconds = tokens / rate
    chip_hours = scn.cluster.chips * seconds / 3600
    out.update(token_budget=tokens, train_days=seconds / DAY_S, chip_hours=chip_hours,
               cost_usd=chip_hours * price, goodput_applied=goodput is not None)
    if chip.tdp_W is not None:
        out["energy_MWh"] = chip_hours * chip.tdp_W * PUE / 1e6
    return out
