"""``plan``'s views: per topology, the smallest and the cheapest cluster meeting the deadline,
every size confirmed, the sizes refused and why the runners-up lost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:                 # type names only
    from ..plan import Candidate, PlanRequest, TopologyPlan

__all__ = ["candidate_json", "runners_up", "plan_json", "plan_text"]


def candidate_json(c: Candidate) -> dict[str, Any]:
    """One cluster size's pick: DESIGN.md's ``chips``, ``days``, ``cost_usd`` (left out where the
    topology has no price, as ``run --json`` leaves its cost out), ``chip_hours``, ``layout`` and
    the step behind them."""
    out = {"chips": c.chips, "days": c.days, "cost_usd": c.cost_usd,
           "chip_hours": c.chip_hours, "layout": c.layout,
           "step_time_s": c.step_time_s, "tokens_per_s": c.tokens_per_s, "mfu": c.mfu,
           "memory_per_chip_GiB": c.memory_GiB, "goodput": c.goodput,
           "energy_MWh": c.energy_MWh, "goodput_by_recovery": c.goodput_by_recovery,
           "breakdown_s": c.breakdown_s}
    if c.cost_usd is None:
        del out["cost_usd"]
    return out


def runners_up(tp_plan: TopologyPlan, chips: int, n: int = 3) -> list[str]:
    """Why the next-best layouts at *chips* lost to the chosen one."""
    cands = tp_plan.by_size.get(chips, [])
    if len(cands) < 2:
        return []
    best = cands[0]
    out = []
    for c in cands[1:1 + n]:
        out.append(f"{_layout_text(c.layout)}: {100 * (c.step_time_s / best.step_time_s - 1):.1f}% "
                   f"slower step ({c.step_time_s:.3f} s vs {best.step_time_s:.3f} s)")
    return out


def _layout_text(lay: Mapping[str, Any]) -> str:
    s = f"tp={lay['tp']} pp={lay['pp']}"
    if lay["virtual_stages"] > 1:
        s += f" vs={lay['virtual_stages']}"
    return s + f" zero={lay['zero']} mb={lay['micro_batch']} {lay['recompute']}"


def plan_json(plans: Sequence[TopologyPlan], req: PlanRequest) -> dict[str, Any]:
    """``plan --json``: per topology, the pick (smallest cluster meeting the deadline, else the
    closest) with its fields at the top, the smallest and the cheapest, every size confirmed,
    the sizes refused and the runners-up."""
    out: dict[str, Any] = {}
    for p in plans:
        main_pick = p.smallest or p.closest
        entry: dict[str, Any] = {"topology": p.topology, "chip": p.chip, "tokens": req.tokens,
                                 "days_limit": req.days, "meets_deadline": p.smallest is not None,
                                 "usd_per_chip_hour": p.usd_per_chip_hour,
                                 "price_source": p.price_source,
                                 "layouts_screened": p.layouts_screened}
        if p.usd_per_chip_hour is None:
            del entry["usd_per_chip_hour"]
        if main_pick is not None:
            entry.update(candidate_json(main_pick))
        entry["smallest"] = candidate_json(p.smallest) if p.smallest else None
        entry["cheapest"] = candidate_json(p.cheapest) if p.cheapest else None
        entry["sizes"] = [candidate_json(c) for _, c in sorted(p.best.items())]
        entry["refused"] = {str(k): v for k, v in sorted(p.refused.items())}
        entry["runners_up"] = runners_up(p, main_pick.chips) if main_pick else []
        out[p.topology] = entry
    return out


def plan_text(plans: Sequence[TopologyPlan], req: PlanRequest, plot_file: str | None = None) -> str:
    """``plan``'s report: the same facts as ``plan_json``, per topology, then side by side."""
    out = plan_json(plans, req)
    asked = req.global_batch
    lines = [f"plan: {req.model}, {req.tokens:.3g} tokens in {req.days:g} days "
             f"(sequence {req.seq_len}, {req.batch_tokens:,.0f} tokens per step, {req.precision}; "
             f"recovery {req.recovery})", ""]
    for name, e in out.items():
        price = (f"${e['usd_per_chip_hour']:.2f}/chip-hour: {e['price_source']}"
                 if "usd_per_chip_hour" in e else e["price_source"])
        lines.append(f"{name} ({e['chip']}, {price}); {e['layouts_screened']:,} layouts screened")
        for label, key in (("smallest", "smallest"), ("cheapest", "cheapest")):
            c = e[key]
            if c is None:
                continue
            lay = c["layout"]
            energy = f", {c['energy_MWh']:,.0f} MWh" if c["energy_MWh"] else ""
            lines.append(f"  {label:<9} {c['chips']:>6} chips  {c['days']:6.1f} days  "
                         f"{_dollars(c)}{c['chip_hours'] / 1e6:,.2f} M chip-hours{energy}"
                         f"  MFU {100 * c['mfu']:.1f}%  goodput {100 * c['goodput']:.1f}%")
            lines.append(f"            layout tp={lay['tp']} pp={lay['pp']} "
                         + (f"vs={lay['virtual_stages']} " if lay["virtual_stages"] > 1 else "")
                         + f"zero={lay['zero']} micro_batch={lay['micro_batch']} recompute={lay['recompute']}"
                         + (f" global_batch={lay['global_batch']} (the nearest the data-parallel width "
                            "divides)" if lay.get("global_batch", asked) != asked else ""))
            if c["goodput_by_recovery"]:
                lines.append("            goodput by recovery: " + ", ".join(
                    f"{k.replace('_', ' ')} {100 * v:.1f}%" for k, v in c["goodput_by_recovery"].items()))
        if not e["meets_deadline"]:
            if "chips" in e:
                lines.append(f"  no cluster up to the largest tried meets {req.days:g} days; closest: "
                             f"{e['chips']} chips in {e['days']:.1f} days")
            else:
                lines.append("  no cluster size can run this model: " + "; ".join(
                    f"{k} chips: {v}" for k, v in list(e["refused"].items())[:3]))
        for r in e["runners_up"]:
            lines.append(f"  runner-up {r}")
        lines.append("")
    picks = [(n, e) for n, e in out.items() if e.get("smallest")]
    if len(picks) > 1:
        lines.append("side by side (smallest cluster meeting the deadline):")
        for n, e in picks:
            c = e["smallest"]
            lines.append(f"  {n:<12} {c['chips']:>6} chips  {c['days']:6.1f} days  "
                         + (_dollars(c).rstrip() if "cost_usd" in c else "no price"))
        lines.append("where each step goes (share of the step; MFU is the compute's yield):")
        for n, e in picks:
            lines.append(f"  {n:<12} {_where(e['smallest'])}")
    if plot_file is not None:
        lines.append(f"plot: {plot_file}")
    return "\n".join(lines)


_PARTS = {"compute": "compute", "exposed_comm": "exposed communication",
          "pipeline_bubble": "pipeline bubble", "straggler_wait": "straggler wait",
          "optimizer": "optimizer", "other": "other"}


def _where(c: Mapping[str, Any]) -> str:
    """A pick's step by part, largest first, and where it loses most beside compute."""
    parts = {k: v for k, v in c.get("breakdown_s", {}).items() if v > 0}
    total = sum(parts.values())
    if not total:
        return f"MFU {100 * c['mfu']:.1f}%"
    shares = ", ".join(f"{_PARTS.get(k, k)} {100 * v / total:.0f}%"
                       for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
                       if v >= 0.005 * total)
    lost = {k: v for k, v in parts.items() if k != "compute" and v >= 0.01 * total}
    worst = max(lost, key=lambda k: lost[k]) if lost else None
    tail = (f"; beside the kernels' own yield it loses most to {_PARTS.get(worst, worst)} "
            f"({lost[worst]:.2f} s a step)" if worst else
            "; nothing beside compute reaches 1% of the step: the loss is the kernels' yield")
    return f"MFU {100 * c['mfu']:.1f}%, step {shares}{tail}"


def _dollars(c: Mapping[str, Any]) -> str:
    """A size's cost in millions, then two spaces; nothing where its topology has no price."""
    return f"${c['cost_usd'] / 1e6:,.2f} M  " if "cost_usd" in c else ""
