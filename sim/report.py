"""Views of result records: the text tables and JSON objects the commands print.

Pure functions of typed records (``sim.results.RunResult``, ``sim.plan`` plans, sweep rows,
``sim.topology.analysis.summarize`` summaries, ``sim.collectives.CollectiveResult``): nothing
here runs a model, reads a file or prints. ``sim.cli`` prints what they return; the JSON field
names are the interfaces DESIGN.md lists, so a change here is a change for every script.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:                 # type names only: importing the views stays as light as json
    from .collectives import CollectiveResult
    from .cost import CostRecord, TimeToTrain
    from .faults import FailureRecord
    from .plan import Candidate, PlanRequest, TopologyPlan
    from .results import RunResult, SharedJobRecord, StragglerRecord
    from .traces import WhatIf

__all__ = ["dump_json", "step_json", "step_text", "topology_text",
           "collective_csv", "collective_table", "candidate_json", "runners_up", "plan_json",
           "plan_text", "sweep_text", "whatif_json", "whatif_text"]


def dump_json(obj: Any) -> str:
    """Strict JSON (no NaN or Infinity): a non-finite number in an output is a bug of ours."""
    return json.dumps(obj, allow_nan=False)


# ----------------------------------------------------------------------------- run

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
        "cost_usd_per_million_tokens": s.cost_usd_per_million_tokens,
        "parallelism": s.parallelism,
        "critical_stage": s.critical_stage,
        "software": s.software,
        "seed": s.seed,
    }
    if s.link_sharing_s is not None:
        out["link_sharing_s"] = s.link_sharing_s
    if r.stragglers is not None:
        out.update(_stragglers_json(r.stragglers))
    if r.shared is not None:
        out["shared_with"] = _shared_json(r.shared)
    if r.distribution is not None:
        d = r.distribution
        out.update(steps=d.steps, step_time_dist_s={"mean": d.mean, "p50": d.p50, "p99": d.p99,
                                                    "min": d.min, "max": d.max})
    if r.failures is not None:
        out.update(_failures_json(r.failures, r.failures_train))
    out.update(_cost_json(r.cost))
    return out


def _stragglers_json(x: StragglerRecord) -> dict[str, Any]:
    return {"straggler_slowdown": x.slowdown, "straggler_replica": x.replica,
            "straggler_chips": list(x.replica_slow_chips), "straggler_excess_s": x.excess_s,
            "slow_chips": list(x.slow_chips), "replica_step_s": x.replica_step_s}


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
    }
    if train is not None:
        out.update(token_budget=train.token_budget, time_to_train_days=train.days)
    return out


def _cost_json(c: CostRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"usd_per_chip_hour": c.usd_per_chip_hour, "price_source": c.price_source}
    if c.train is not None:
        out.update(token_budget=c.train.token_budget, train_days=c.train.days, chip_hours=c.chip_hours,
                   cost_usd=c.cost_usd, goodput_applied=c.train.goodput_applied)
        if c.energy_MWh is not None:
            out["energy_MWh"] = c.energy_MWh
    return out


def _top(d: Mapping[str, float], n: int) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n])


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
        + (", FP8 linear layers" if scn.training.precision == "fp8" and s.software["fp8_linear"] else "")
        + ")",
        f"  step time        {s.step_time_s:.3f} s",
        f"  throughput       {s.tokens_per_s:,.0f} tokens/s ({s.tokens_per_s / s.chips:,.0f} per chip)",
        f"  MFU              {100 * s.mfu:.1f} %",
        f"  memory per chip  {s.memory_per_chip_GiB:.1f} GiB of {scn.cluster.chip.hbm_bytes / 2**30:.1f} GiB",
        f"  cost             ${s.cost_usd_per_million_tokens:.3f} per million tokens at "
        f"${r.cost.usd_per_chip_hour:.2f} per chip-hour ({r.cost.price_source})",
        "  breakdown        " + ", ".join(f"{k} {v:.3f} s" for k, v in s.breakdown_s.items() if v > 1e-9),
    ]
    c = r.cost
    if c.train is not None:
        assert c.chip_hours is not None and c.cost_usd is not None
        lines.append(f"  to train         {c.train.token_budget:.3g} tokens: {c.train.days:.1f} days"
                     + (" (goodput included)" if c.train.goodput_applied else "")
                     + f", {c.chip_hours:,.0f} chip-hours, ${c.cost_usd:,.0f}"
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
            f"{f.horizon_days:g} days (MTBF {f.mtbf_h:.2f} h), checkpoint every "
            f"{f.checkpoint_interval_min:.1f} min",
            f"  goodput          {100 * f.goodput:.1f} % (5-95%: {100 * lo:.1f}-{100 * hi:.1f}), "
            f"effective {f.effective_tokens_per_s:,.0f} tokens/s",
        ]
        if r.failures_train is not None:
            lines.append(f"  time to train    {r.failures_train.days:.1f} days for "
                         f"{r.failures_train.token_budget:.3g} tokens")
    if trace_file:
        lines.append(f"  trace            {trace_file} (open in ui.perfetto.dev)")
    return "\n".join(lines)


def _stragglers_text(x: StragglerRecord) -> list[str]:
    a = x.slowdown
    return [f"  stragglers       slowest replica {x.replica} finished "
            f"{x.excess_s:.3f} s after the median one"
            + (f" (slow chips {list(x.replica_slow_chips)})" if x.replica_slow_chips else ""),
            f"  slowdown         {a['slowdown']:.3f} x the straggler-free step "
            f"({a['straggler_free_step_s']:.3f} s); with only these stragglers kept:",
            f"                   by stage {_top(a['by_stage'], 4)}; by replica "
            f"{_top(a['by_replica'], 3)}" + (f"; by cause {_top(a['by_cause'], 4)}"
                                              if a["by_cause"] else "")]


# ----------------------------------------------------------------------------- topo show

def topology_text(info: Mapping[str, Any]) -> str:
    """``topo show``'s table of a ``summarize`` record (its JSON is the record itself)."""
    lines = [f"{info['topology']}: {info['chips']} x {info['chip']}"]
    if "slice" in info:
        wrap = "".join("w" if w else "-" for w in info["wraparound"])
        over = f" x {info['pods']} slices over DCN" if info["pods"] > 1 else ""
        lines.append(f"  slice            {info['slice']}{over}  "
                     f"(wraparound {wrap}{', twisted' if info['twisted'] else ''})")
        lines.append(f"  hosts            {info['nodes']}")
    else:
        lines.append(f"  nodes            {info['nodes']}  ({info['scalable_units']} scalable unit(s), "
                     f"{info['fabric_tiers']}-tier fabric, oversubscription {info['oversubscription']:g}:1)")
        if "transport" in info:
            lines.append(f"  network          {info['transport']} ({info['transport_name']}); NCCL "
                         f"protocols across nodes: {', '.join(info['net_protocols'])}")
    sw = ", ".join(f"{n} {k}" for k, n in info["switches"].items()) or "none"
    lines.append(f"  switches         {sw}")
    lines.append("  links            " + ", ".join(f"{n} {k}" for k, n in info["links"].items()))
    lines.append(f"  bisection        {info['bisection_GBps']:,.0f} GB/s (one direction)")
    lines.append(f"  diameter         {info['diameter_hops']} hops")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- collective

def collective_csv(results: Sequence[CollectiveResult], dtype: str, dtype_bytes: int) -> str:
    """nccl-tests' columns, exactly DESIGN.md's: size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps."""
    lines = ["size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps"]
    for r in results:
        lines.append(f"{r.size_bytes},{r.size_bytes // dtype_bytes},{dtype},{r.time_s * 1e6:.2f},"
                     f"{r.algbw_GBps:.2f},{r.busbw_GBps:.2f}")
    return "\n".join(lines)


def collective_table(results: Sequence[CollectiveResult], op: str, ranks: int, topology: str,
                     chip: str, dtype: str, dtype_bytes: int) -> str:
    """nccl-tests' table layout, with the algorithm and protocol chosen for each size."""
    lines = [f"# {op} on {ranks} ranks of {topology} ({chip}); GB = 1e9 bytes",
             f"# {'size':>12} {'count':>12} {'type':>8} {'time(us)':>11} {'algbw(GB/s)':>12} "
             f"{'busbw(GB/s)':>12}  algorithm"]
    for r in results:
        lines.append(f"  {r.size_bytes:>12} {r.size_bytes // dtype_bytes:>12} {dtype:>8} "
                     f"{r.time_s * 1e6:>11.2f} {r.algbw_GBps:>12.2f} {r.busbw_GBps:>12.2f}  "
                     f"{r.algo}/{r.proto}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- plan

def candidate_json(c: Candidate) -> dict[str, Any]:
    """One cluster size's pick: DESIGN.md's ``chips``, ``days``, ``cost_usd``, ``chip_hours``,
    ``layout`` and the step behind them."""
    return {"chips": c.chips, "days": c.days, "cost_usd": c.cost_usd,
            "chip_hours": c.chip_hours, "layout": c.layout,
            "step_time_s": c.step_time_s, "tokens_per_s": c.tokens_per_s, "mfu": c.mfu,
            "memory_per_chip_GiB": c.memory_GiB, "goodput": c.goodput,
            "energy_MWh": c.energy_MWh}


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
    lines = [f"plan: {req.model}, {req.tokens:.3g} tokens in {req.days:g} days "
             f"(sequence {req.seq_len}, {req.batch_tokens:,.0f} tokens per step, {req.precision})", ""]
    for name, e in out.items():
        lines.append(f"{name} ({e['chip']}, ${e['usd_per_chip_hour']:.2f}/chip-hour: {e['price_source']}); "
                     f"{e['layouts_screened']:,} layouts screened")
        for label, key in (("smallest", "smallest"), ("cheapest", "cheapest")):
            c = e[key]
            if c is None:
                continue
            lay = c["layout"]
            energy = f", {c['energy_MWh']:,.0f} MWh" if c["energy_MWh"] else ""
            lines.append(f"  {label:<9} {c['chips']:>6} chips  {c['days']:6.1f} days  "
                         f"${c['cost_usd'] / 1e6:,.2f} M  {c['chip_hours'] / 1e6:,.2f} M chip-hours{energy}"
                         f"  MFU {100 * c['mfu']:.1f}%  goodput {100 * c['goodput']:.1f}%")
            lines.append(f"            layout tp={lay['tp']} pp={lay['pp']} "
                         + (f"vs={lay['virtual_stages']} " if lay["virtual_stages"] > 1 else "")
                         + f"zero={lay['zero']} micro_batch={lay['micro_batch']} recompute={lay['recompute']}")
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
            lines.append(f"  {n:<12} {c['chips']:>6} chips  {c['days']:6.1f} days  ${c['cost_usd'] / 1e6:,.2f} M")
    if plot_file is not None:
        lines.append(f"plot: {plot_file}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- sweep

def sweep_text(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], table_file: str | None = None,
               plot_file: str | None = None) -> str:
    """``sweep``'s table: the swept keys, the status and the headline numbers of every row (the
    reason after a row that did not run), then where the table and plot went."""
    cols = list(keys) + ["status", "step_time_s", "tokens_per_s_per_chip", "mfu"]
    if any("scaling_efficiency" in r for r in rows):
        cols.append("scaling_efficiency")
    cols.append("cost_usd_per_million_tokens")
    width = {c: max(len(c), 10) for c in cols}
    head = "  ".join(f"{c:>{width[c]}}" for c in cols)
    lines = [head]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            if isinstance(v, float):
                v = f"{v:.4g}" if c != "mfu" else f"{100 * v:.1f}%"
            cells.append(f"{str(v):>{width[c]}}")
        line = "  ".join(cells)
        if r.get("status") != "ok":
            line += f"  {r.get('error', '')}"
        lines.append(line)
    if table_file is not None:
        lines.append(f"table: {table_file}")
    if plot_file is not None:
        lines.append(f"plot:  {plot_file}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- whatif

def whatif_json(w: WhatIf) -> dict[str, Any]:
    """``whatif --json``: ``slowdown``, ``by_stage``, ``by_dp_rank``, ``by_optype`` (keyed as in the
    trace), ``steps`` (per step ``measured_s``, ``replayed_s``, ``ideal_s``) and more."""
    return {
        "trace": w.name,
        "slowdown": w.slowdown,
        "by_stage": w.by_stage,
        "by_dp_rank": w.by_dp_rank,
        "by_optype": w.by_optype,
        "by_worker": w.by_worker,
        "steps": {str(int(s)): {"measured_s": float(m), "replayed_s": float(r), "ideal_s": float(i),
                                "slowdown": float(r / i)}
                  for s, m, r, i in zip(w.steps, w.measured_s, w.replayed_s, w.ideal_s)},
        "replay_error_median_pct": w.replay_error_median_pct,
        "skipped_steps": list(w.skipped),
    }


def whatif_text(w: WhatIf, files: Sequence[str] = ()) -> str:
    """The what-if analysis as a short report: step times, S, its attribution, who is to blame."""
    def med(a: np.ndarray) -> float:
        return float(np.median(a))

    lines = [
        f"trace {w.name}: {len(w.steps)} complete steps"
        + (f" ({len(w.skipped)} partial skipped)" if w.skipped else ""),
        f"step time (median): measured {med(w.measured_s):.4f} s, replayed {med(w.replayed_s):.4f} s "
        f"(median |error| {w.replay_error_median_pct:.2f}%), straggler-free {med(w.ideal_s):.4f} s",
        f"slowdown S = mean replayed / mean straggler-free = {w.slowdown:.4f}",
        "attributed slowdown (only these ops at their measured times):",
        f"  by stage:   {_top(dict(sorted(w.by_stage.items())), 99)}",
        f"  by dp rank: {_top(dict(sorted(w.by_dp_rank.items())), 99)}",
        f"  by op type: {_top(w.by_optype, 6)}",
    ]
    if w.by_worker:
        lines.append(f"workers to blame (dp/stage): {_top(w.by_worker, 5)}")
    worst = np.argsort(-w.step_slowdown, kind="stable")[:5]
    lines.append("steps to blame: " + ", ".join(f"{int(w.steps[i])} {w.step_slowdown[i]:.3f}" for i in worst))
    lines += [f"wrote {f}" for f in files]
    return "\n".join(lines)
