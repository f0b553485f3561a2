"""The parallel plan, resolved once: the ``parallelism`` section read, every rule a plan must
meet checked in one place (``plan_problem``), and every derived value computed.

``read_parallelism`` reads the section where the loader reaches it and refuses what is wrong with
it alone or with the cluster (dp, the schedule, the ZeRO shard group): those are input errors.
``resolve_plan`` then checks the plan against the model and the training section (heads, kv heads
and the FFN split over tp; layers over pp x virtual stages; the sequence over cp; experts and dp
over ep; the global batch over micro_batch x dp; whole micro-batch groups per stage for the
interleaved schedule) and fills in the sizes: micro-batches, the global batch, layers per chunk,
tokens per context-parallel rank. A plan that breaks one of those rules is a valid scenario that
cannot run: it loads with the rule in ``plan_error`` (the validation suites count it as a
refusal, not as an unmappable row) and ``build_workload`` refuses it with that ConfigError.
``sim.workload`` reads the sizes and re-checks nothing.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from ..models import ModelSpec
from .fields import Section
from .schema import ClusterConfig, ParallelismConfig, PlanSizes, TrainingConfig

__all__ = ["plan_problem", "read_parallelism", "resolve_plan"]


def read_parallelism(s: Section, cluster: ClusterConfig) -> ParallelismConfig:
    """The section as given, with dp; checked against the cluster. ``resolve_plan`` completes it."""
    tp, pp, cp, ep = (s.integer(k, 1) for k in ("tp", "pp", "cp", "ep"))
    chips = cluster.chips
    if chips % (tp * pp * cp):
        raise ConfigError(f"parallelism: tp*pp*cp = {tp}*{pp}*{cp} = {tp * pp * cp} does not divide "
                          f"the {chips} chips of the cluster; valid: a product that divides {chips}")
    dp = chips // (tp * pp * cp)
    schedule = s.text("schedule", "1f1b", ("1f1b", "interleaved", "gpipe"))
    vs = s.integer("virtual_stages", 1)
    if vs > 1 and schedule != "interleaved":
        raise ConfigError(f"parallelism.virtual_stages: {vs} needs schedule: interleaved, got {schedule!r}")
    zero = s.integer("zero", 1, minimum=0, maximum=3)       # ZeRO stages 0-3 (Rajbhandari 2020)
    group = s.opt_int("zero_group")
    if group is not None:
        if dp % group:
            divisors = [d for d in range(1, dp + 1) if dp % d == 0]
            shown = ", ".join(str(d) for d in divisors[:12]) + (", ..." if len(divisors) > 12 else "")
            raise ConfigError(f"{s.at('zero_group')}: {group} does not divide dp = {dp}; valid: "
                              f"a divisor of dp ({shown})")
        if zero == 0 and group != dp:
            raise ConfigError(f"{s.at('zero_group')}: {group} shards nothing with zero: 0; "
                              "set parallelism.zero to 1, 2 or 3, or leave zero_group out")
    return ParallelismConfig(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, zero=zero, schedule=schedule,
                             virtual_stages=vs, sequence_parallel=s.flag("sequence_parallel", True),
                             zero_group=0 if group is None or group == dp else group)


def resolve_plan(par: ParallelismConfig, model: ModelSpec, tr: TrainingConfig,
                 source: str) -> ParallelismConfig:
    """*par* with its sizes, or with the first rule it breaks on *model* and *tr* (prefixed with
    *source*, the scenario's file) as its ``plan_error``."""
    problem = plan_problem(par, model, tr)
    if problem is not None:
        return replace(par, sizes=None, plan_error=f"{source}: {problem}")
    per_step = tr.micro_batch * par.dp
    batch = tr.global_batch if tr.global_batch is not None else _default_batch(par, tr)
    return replace(par, sizes=PlanSizes(microbatches=batch // per_step, sequences_per_step=batch,
                                        layers_per_chunk=model.layers // par.chunks,
                                        local_seq_len=tr.seq_len // par.cp), plan_error="")


def _default_batch(par: ParallelismConfig, tr: TrainingConfig) -> int:
    """Sequences per step when the scenario gives none: 4 micro-batches per pipeline stage, so the
    pipeline bubble, (pp - 1) / micro-batches of the step (Narayanan et al. 2021), stays under a
    quarter."""
    return par.dp * tr.micro_batch * max(1, 4 * par.pp)


def plan_problem(par: ParallelismConfig, model: ModelSpec, tr: TrainingConfig) -> str | None:
    """The first rule the plan breaks, as ``FIELD: what is wrong; valid: ...``; None if none."""
    m = model
    if m.heads % par.tp:
        return f"parallelism.tp: {par.tp} does not divide model.heads = {m.heads}"
    if m.kv_heads % par.tp and par.tp % m.kv_heads:
        return (f"parallelism.tp: {par.tp} and model.kv_heads = {m.kv_heads} "
                "must divide one another")
    if m.ffn_hidden % par.tp:
        return f"parallelism.tp: {par.tp} does not divide model.ffn_hidden = {m.ffn_hidden}"
    if m.layers % par.chunks:
        return (f"model.layers: {m.layers} is not divisible by pp x virtual_stages "
                f"= {par.pp} x {par.virtual_stages}; valid: a layer count that is a "
                f"multiple of {par.chunks}")
    if tr.seq_len % par.cp:
        return f"training.seq_len: {tr.seq_len} is not divisible by cp = {par.cp}"
    if par.ep > 1:
        if m.moe is None:
            return f"parallelism.ep: {par.ep} needs an MoE model (model.moe)"
        if m.moe.experts % par.ep:
            return f"parallelism.ep: {par.ep} does not divide model.moe.experts = {m.moe.experts}"
        if par.dp % par.ep:
            return f"parallelism.ep: {par.ep} does not divide dp = {par.dp}"
    per_step = tr.micro_batch * par.dp            # sequences one micro-batch round takes in all
    if tr.global_batch is not None and tr.global_batch % per_step:
        return (f"training.global_batch: {tr.global_batch} is not divisible by micro_batch x dp "
                f"= {tr.micro_batch} x {par.dp}; valid: a multiple of {per_step}")
    batch = tr.global_batch if tr.global_batch is not None else _default_batch(par, tr)
    if par.virtual_stages > 1 and par.pp > 1 and (batch // per_step) % par.pp:
        return (f"training.global_batch: interleaved pipelines need a number of "
                f"micro-batches divisible by pp = {par.pp}")
    return None
