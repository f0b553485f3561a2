"""Views of result records: the text tables and JSON objects the commands print.

Pure functions of typed records (``sim.results.RunResult``, ``sim.plan`` plans, sweep rows,
``sim.topology.analysis.summarize`` summaries, ``sim.collectives.CollectiveResult``): nothing
here runs a model, reads a file or prints. ``sim.commands`` prints what they return; the JSON field
names are the interfaces DESIGN.md lists, so a change here is a change for every script.
"""

from __future__ import annotations

from .plan import candidate_json, plan_json, plan_text, runners_up
from .run import step_json, step_text
from .tables import collective_csv, collective_table, sweep_text, topology_text
from .text import dump_json
from .whatif import whatif_json, whatif_text

__all__ = ["dump_json", "step_json", "step_text", "topology_text",
           "collective_csv", "collective_table", "candidate_json", "runners_up", "plan_json",
           "plan_text", "sweep_text", "whatif_json", "whatif_text"]
