"""The tables of ``topo show``, ``collective`` (nccl-tests' layout and CSV columns) and ``sweep``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:                 # type names only
    from ..collectives import CollectiveResult

__all__ = ["topology_text", "collective_csv", "collective_table", "sweep_text"]


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
