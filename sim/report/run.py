"""``run``'s views of a ``RunResult``: its JSON object (DESIGN.md's fields, then what the scenario
asked for besides the step) and its table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config.remat import xla_rematerialized
from .text import top

if TYPE_CHECKING:                 # type names only: importing the views stays as light as json
    from ..config import Scenario
    from ..cost import CostRecord, TimeToTrain
    from ..goodput import FailureRecord
    from ..results import RunResult, SharedJobRecord, StragglerRecord

__all__ = ["step_json", "step_text"]


def step_json(r: RunResult) -> dict[str, Any]:
    """``run --json`` (and each sweep row before flattening): DESIGN.md's fields, then what the
    scenario asked for besides the step (stragglers or the neighbour job, the step-time
    distribution, failures, cost), in that order."""
    s = r.step
    out: dict[str, Any] = {
        "scenario": s.scenario,
        "topology": s.topology,
        "chip": s.chip,
        "chips": s.chips,
        "step_time_s": s.step_time_s,
        "tokens_per_s": s.tokens_per_s,
        "tokens_per_s_per_chip": s.tokens_per_s / s.chips,
        "mfu": s.mfu,
        "model_flops_per_step": s.model_flops_per_step,
        "memory_per_chip_GiB": s.memory_per_chip_GiB,
        "memory_breakdown_GiB": s.memory_breakdown_GiB,
        "breakdown_s": s.breakdown_s,
        "cost_usd_per_million_tokens": s.cost_usd_per_million_tokens,   # dropped below if None
        "parallelism": s.parallelism,
        "critical_stage": s.critical_stage,
        "software": s.software,
        "seed": s.seed,
    }
    if s.cost_usd_per_million_tokens is None:     # DESIGN.md: only when a price is known
        del out["cost_usd_per_million_tokens"]
    if s.link_sharing_s is not None:
        out["link_sharing_s"] = s.link_sharing_s
    if remat := xla_rematerialized(r.scenario.training.remat_policy_name):
        out["xla_rematerialized"] = list(remat)
    if r.stragglers is not None:
        out.update(_stragglers_json(r.stragglers))
    if r.shared is not None:
        out["shared_with"] = _shared_json(r.shared)
    if r.distribution is not None:
        d = r.distribution
        out.update(steps=d.steps, step_time_dist_s={"mean": d.mean, "p50": d.p50, "p99": d.p99,
                                                    "min": d.min, "max": d.max})
    if r.failures is not None:
        out.update(_failures_json(r.failures, r.failures_time_to_train))
    out.update(_cost_json(r.cost))
    return out


def _stragglers_json(x: StragglerRecord) -> dict[str, Any]:
    a = x.attribution
    return {"straggler_slowdown": {"slowdown": a.slowdown, "straggler_free_step_s": a.straggler_free_step_s,
                                   "by_stage": a.by_stage, "by_replica": a.by_replica,
                                   "by_cause": a.by_cause},
            "straggler_replica": x.slowest_replica, "straggler_chips": list(x.slowest_replica_chips),
            "straggler_excess_s": x.excess_s, "slow_chips": list(x.slow_chips),
            "replica_step_s": x.replica_step_s}


def _shared_json(n: SharedJobRecord) -> dict[str, Any]:
    return {"scenario": n.scenario, "chips": n.chips, "step_time_alone_s": n.step_time_alone_s,
            "slowdown": n.slowdown, "neighbour_step_time_s": n.neighbour_step_time_s,
            "neighbour_step_time_alone_s": n.neighbour_step_time_alone_s}


def _failures_json(f: FailureRecord, train: TimeToTrain | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "goodput": f.goodput,
        "goodput_interval": list(f.goodput_interval),
        "interruptions": f.interruptions,                   # DESIGN.md: the count
        "interruptions_by_cause": f.interruptions_by_cause,
        "interruptions_total": f.interruptions,             # the same count, as 0.1.x printed it
        "horizon_days": f.horizon_days,
        "mtbf_h": f.mtbf_h,
        "checkpoint_interval_min": f.checkpoint_interval_min,
        "hardware_swap_s": f.hardware_swap_s,
        "effective_tokens_per_s": f.effective_tokens_per_s,
        "recovery": f.recovery,
        "mtbf_interval_h": list(f.mtbf_interval_h),
        "recovery_s_per_interruption": f.recovery_per_interruption_s,
        "recovery_s": f.recovery_s,
        "lost_hours": f.lost_hours,
    }
    if train is not None:
        out.update(token_budget=train.token_budget, time_to_train_days=train.days)
    return out


def _cost_json(c: CostRecord) -> dict[str, Any]:
    """The price and its source, and a token budget's time, chip-hours, cost and energy. No price
    known: the dollar fields are left out (a sweep table's cells blank, Parquet nulls) and
    ``price_source`` says so."""
    out: dict[str, Any] = {"usd_per_chip_hour": c.usd_per_chip_hour, "price_source": c.price_source}
    if c.usd_per_chip_hour is None:
        del out["usd_per_chip_hour"]
    if c.train is not None:
        out.update(token_budget=c.train.token_budget, train_days=c.train.days, chip_hours=c.chip_hours,
                   cost_usd=c.cost_usd, goodput_applied=c.train.goodput_applied)
        if c.cost_usd is None:
            del out["cost_usd"]
        if c.energy_MWh is not None:
            out["energy_MWh"] = c.energy_MWh
    return out


def _precision_text(scn: Scenario) -> str:
    """", FP8 linear layers" (the format the linear layers run) where a low precision is active."""
    recipe = scn.recipe
    return f", {recipe.name.upper()} linear layers" if recipe is not None else ""


def _low_precision_mfu(scn: Scenario, mfu: float) -> str:
    """Beside MFU (PaLM's, against the dense BF16 peak, which an FP8 or FP4 run can pass): the
    same FLOPs against the peak of the format the linear layers run."""
    recipe = scn.recipe
    if recipe is None:
        return ""
    chip = scn.cluster.chip
    of_low = mfu * chip.bf16_flops / chip.peak_flops(recipe.name)
    return f" of the dense BF16 peak ({100 * of_low:.1f} % of the {recipe.name.upper()} peak)"


def step_text(r: RunResult, trace_file: str | None = None) -> str:
    """``run``'s table: the plan, the step and its breakdown, then what else the scenario asked
    for."""
    s, scn = r.step, r.scenario
    p = s.parallelism
    m = scn.model
    lines = [
        f"{s.scenario}: {m.name} ({m.total_params() / 1e9:.1f} B parameters) on {s.chips} x {s.chip} "
        f"({s.topology}" + (f", {p['slices']} slices over DCN" if p["slices"] > 1 else "") + ")",
        f"  parallelism      tp={p['tp']} pp={p['pp']} cp={p['cp']} ep={p['ep']} dp={p['dp']} "
        f"zero={p['zero']}"
        + (f" zero_group={p['zero_group']}" if p["zero_group"] != p["dp"] else "")
        + f" {p['schedule']}, {p['microbatches']} micro-batches",
        f"  software         {s.software['framework']} (attention {s.software['attention']}, "
        f"{s.software['elementwise']} elementwise ops"
        + (", TP comm overlapped" if s.software["tp_comm_overlap"] else "")
        + (" in the backward" if s.software.get("tp_comm_overlap_passes") == "backward" else "")
        + _precision_text(scn)
        + ")",
        *([f"  kernel tables    {s.software['kernel_tables']} (the compute model fitted on these tables)"]
          if s.software.get("kernel_tables") else []),
        f"  step time        {s.step_time_s:.3f} s",
        f"  throughput       {s.tokens_per_s:,.0f} tokens/s ({s.tokens_per_s / s.chips:,.0f} per chip)",
        f"  MFU              {100 * s.mfu:.1f} %" + _low_precision_mfu(scn, s.mfu),
        f"  memory per chip  {s.memory_per_chip_GiB:.1f} GiB of {scn.cluster.chip.usable_hbm_bytes / 2**30:.1f} GiB"
        + _host_text(s.memory_breakdown_GiB) + _xla_remat_text(scn),
        "  cost             " + _cost_text(r),
        "  breakdown        " + ", ".join(f"{k} {v:.3f} s" for k, v in s.breakdown_s.items() if v > 1e-9),
    ]
    c = r.cost
    if c.train is not None:
        assert c.chip_hours is not None
        lines.append(f"  to train         {c.train.token_budget:.3g} tokens: {c.train.days:.1f} days"
                     + (" (goodput included)" if c.train.goodput_applied else "")
                     + f", {c.chip_hours:,.0f} chip-hours"
                     + (f", ${c.cost_usd:,.0f}" if c.cost_usd is not None else "")
                     + (f", {c.energy_MWh:,.0f} MWh (TDP x PUE 1.1)" if c.energy_MWh is not None else ""))
    lines += _stragglers_text(r.stragglers) if r.stragglers is not None else []
    if s.link_sharing_s:
        lines.append(f"  shared links     +{s.link_sharing_s:.3f} s: the step's transfers met on "
                     "links over capacity (pipeline sends, gradient reductions)")
    if r.shared is not None:
        n = r.shared
        other = (f"its step {n.neighbour_step_time_s:.3f} s (alone {n.neighbour_step_time_alone_s:.3f} s)"
                 if n.neighbour_step_time_s is not None else "no step of it finished meanwhile")
        lines.append(f"  shared fabric    with {n.scenario} on the next {n.chips} chips: "
                     f"{n.slowdown:.2f}x this job's step alone ({n.step_time_alone_s:.3f} s); "
                     + other)
    if r.distribution is not None:
        d = r.distribution
        lines.append(f"  over {d.steps} steps   mean {d.mean:.3f} s, p50 {d.p50:.3f} s, "
                     f"p99 {d.p99:.3f} s")
    if r.failures is not None:
        f = r.failures
        lo, hi = f.goodput_interval
        lines += [
            f"  failures         {f.interruptions:.0f} unexpected interruptions in "
            f"{f.horizon_days:g} days (MTBF {f.mtbf_h:.2f} h, fleets "
            f"{f.mtbf_interval_h[0]:.2f}-{f.mtbf_interval_h[1]:.2f} h), checkpoint every "
            f"{f.checkpoint_interval_min:.1f} min",
            f"  goodput          {100 * f.goodput:.1f} % (5-95%: {100 * lo:.1f}-{100 * hi:.1f}, "
            f"fleets and chance), effective {f.effective_tokens_per_s:,.0f} tokens/s",
            f"  recovery         {f.recovery}: {f.recovery_per_interruption_s / 60:.1f} min an "
            f"interruption ({_parts(f.recovery_s)}); most time lost to {f.dominant.replace('_', ' ')}",
        ]
        if r.failures_time_to_train is not None:
            lines.append(f"  time to train    {r.failures_time_to_train.days:.1f} days for "
                         f"{r.failures_time_to_train.token_budget:.3g} tokens")
    if trace_file:
        lines.append(f"  trace            {trace_file} (open in ui.perfetto.dev)")
    return "\n".join(lines)


def _parts(parts: dict[str, float]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in parts.items() if v > 0)


def _cost_text(r: RunResult) -> str:
    """The cost line's text: dollars per million tokens at the price and its source, or, without
    a price, the one line that says so (``sim.cost.no_price_note``)."""
    per_m = r.step.cost_usd_per_million_tokens
    if per_m is None or r.cost.usd_per_chip_hour is None:
        return r.cost.price_source
    return (f"${per_m:.3f} per million tokens at ${r.cost.usd_per_chip_hour:.2f} per chip-hour "
            f"({r.cost.price_source})")


def _stragglers_text(x: StragglerRecord) -> list[str]:
    a = x.attribution
    return [f"  stragglers       slowest replica {x.slowest_replica} finished "
            f"{x.excess_s:.3f} s after the median one"
            + (f" (slow chips {list(x.slowest_replica_chips)})" if x.slowest_replica_chips else ""),
            f"  slowdown         {a.slowdown:.3f} x the straggler-free step "
            f"({a.straggler_free_step_s:.3f} s); with only these stragglers kept:",
            f"                   by stage {top(a.by_stage, 4)}; by replica "
            f"{top(a.by_replica, 3)}" + (f"; by cause {top(a.by_cause, 4)}" if a.by_cause else "")]


def _xla_remat_text(scn: Scenario) -> str:
    """What XLA recomputes beyond the scenario's policy to fit the chip (``sim.workload.xla_remat``)."""
    remat = xla_rematerialized(scn.training.remat_policy_name)
    return f" (XLA recomputes {', '.join(remat)} beyond the policy to fit)" if remat else ""


def _host_text(mem: dict[str, float]) -> str:
    """What the run keeps in host memory per chip (offloaded activations, optimizer state)."""
    host = mem.get("offloaded_host", 0.0)
    return f", {host:.1f} GiB more on the host" if host > 0.05 else ""
