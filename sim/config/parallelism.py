"""The parallel plan, resolved once: the ``parallelism`` section read, every rule a plan must
meet checked in one place (``plan_problem``), and every derived value computed.

``read_parallelism`` reads the section where the loader reaches it and refuses what is wrong with
it alone or with the cluster (dp, the schedule, the ZeRO shard group): those are input errors.
``resolve_plan`` then checks the plan against the model and the training section (heads, kv heads
and the FFN split over tp; layers over pp x virtual stages; the sequence over cp; the experts over
ep, and ep x etp over the ranks of a stage (below); the global batch over micro_batch x dp; whole
micro-batch groups per stage for the interleaved schedule) and fills in the sizes: micro-batches,
the global batch, the layers of every model chunk, tokens per context-parallel rank.

Uneven pipelines. ``stage_layers`` lists the layers explicitly: one entry per stage (pp entries),
or one per model chunk in model order (pp x virtual_stages entries; entry c x pp + s is stage s's
chunk c, the order in which Megatron-LM assigns layer ranges to virtual stages). The shorthand
``first_stage_layers`` / ``last_stage_layers`` follows Megatron-LM's
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
(``get_num_layers_to_build`` in megatron/core/transformer/transformer_block.py): the first (last)
stage holds that many layers, and the rest are spread evenly over the other stages, which must
divide them. A stage's layers are split over its chunks as evenly as they go; where Megatron asserts
that they divide by virtual_stages, the short chunks here are the first stage's first ones and
every other stage's last ones, so that the chunk with the embedding (the first stage's first) and
the one with the output head and loss (the last stage's last) are the light ones, as Llama 3 lays
out 126 layers on 16 x 8 chunks (Dubey et al. 2024, section 3.3.2: those two chunks hold only the
embedding and only the output projection and loss). Zero layers are allowed only where the
embedding or the head sits (the first and the last entry of ``stage_layers``, the first and last
stage of the shorthand). Without any of the three keys the layers split evenly and must divide by
pp x virtual_stages. A plan that breaks one of those rules is a valid scenario that
cannot run: it loads with the rule in ``plan_error`` (the validation suites count it as a
refusal, not as an unmappable row) and ``build_workload`` refuses it with that ConfigError.
``sim.workload`` reads the sizes and re-checks nothing.

Expert layers. Megatron-Core folds the ranks of a pipeline stage twice (MoE parallel folding, Liu et
al. 2025, arXiv 2504.14960): attention on tp x cp x dp, the experts on etp x ep x edp of the same
ranks (megatron/core/parallel_state.py, ``initialize_model_parallel``: a second ``RankGenerator`` of
sizes tp = expert_tensor_parallel_size, ep = expert_model_parallel_size, dp = world / (etp x ep x
pp), cp = 1; expert_tensor_parallel_size defaults to tensor_model_parallel_size; NVIDIA/Megatron-LM
@d98e8a6). So ep need not divide dp: the plan needs ep x etp to divide tp x cp x dp, and ep the
experts; an etp other than tp, or an ep above 1, needs an MoE model. With etp = tp (its default)
and cp = 1 the rule is today's "ep divides dp", and so is its refusal.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from ..models import ModelSpec
from .fields import Section, show
from .schema import ClusterConfig, ParallelismConfig, PlanSizes, TrainingConfig

__all__ = ["data_parallel", "plan_problem", "read_parallelism", "resolve_plan"]


def data_parallel(chips: int, tp: int, pp: int, cp: int) -> int:
    """Data-parallel ranks (``ParallelismConfig.dp``): the *chips* over tp x pp x cp, which the
    caller has checked divides them. The one place dp is derived (the loader and the training
    suite's row mapping ask it)."""
    return chips // (tp * pp * cp)


def _slices_a_stage_spans(pods: int, pp: int) -> int:
    """The TPU slices one pipeline stage's data-parallel ranks span (pipeline stages are the
    outermost coordinate: sim/workload/layout.py): pods / pp where pp divides pods, else 1 (a
    stage within one slice, or stages that straddle slices unevenly: no default group)."""
    return pods // pp if pods % pp == 0 else 1


def read_parallelism(s: Section, cluster: ClusterConfig) -> ParallelismConfig:
    """The section as given, with dp; checked against the cluster. ``resolve_plan`` completes it."""
    tp, pp, cp, ep = (s.integer(k, 1) for k in ("tp", "pp", "cp", "ep"))
    etp = s.integer("etp", tp, maximum=1_000_000)     # Megatron-Core's default: tp
    chips = cluster.chips
    if chips % (tp * pp * cp):
        raise ConfigError(f"parallelism: tp*pp*cp = {tp}*{pp}*{cp} = {tp * pp * cp} does not divide "
                          f"the {chips} chips of the cluster; valid: a product that divides {chips}")
    dp = data_parallel(chips, tp, pp, cp)
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
    elif zero >= 1 and (spanned := _slices_a_stage_spans(cluster.pods, pp)) > 1 and not dp % spanned:
        # TPU slices over the DCN are data-parallel replicas unless told otherwise: ZeRO/FSDP
        # shards within a slice, as MaxText's defaults mesh them (base.yml dcn_data_parallelism
        # -1, dcn_fsdp_parallelism 1); zero_group: dp shards across the slices too
        group = dp // spanned
    stage_layers = _stage_layers(s, pp, vs)
    first, last = s.opt_int("first_stage_layers", minimum=0), s.opt_int("last_stage_layers", minimum=0)
    if stage_layers and (first is not None or last is not None):
        given = "first_stage_layers" if first is not None else "last_stage_layers"
        raise ConfigError(f"parallelism: stage_layers and {given} are both given; valid: either "
                          "the explicit stage_layers list or the first/last shorthand")
    if pp == 1 and (first is not None or last is not None):
        key = "first_stage_layers" if first is not None else "last_stage_layers"
        raise ConfigError(f"{s.at(key)}: needs a pipeline (pp >= 2), got pp = 1; leave it out")
    # Llama 3's tunable micro-batches per round N (Dubey et al. 2024, section 3.3.2; Megatron-LM's
    # microbatch_group_size_per_vp_stage): at least pp, so that every stage's warm-up covers a round.
    mgroup = s.opt_int("microbatch_group")
    if mgroup is not None and (schedule != "interleaved" or mgroup < pp):
        raise ConfigError(f"{s.at('microbatch_group')}: {mgroup} micro-batches per round need "
                          f"schedule: interleaved and at least pp = {pp}; got schedule "
                          f"{schedule!r}; valid: an integer >= {pp} with the interleaved schedule")
    # Pipeline schedules run one after another within a step, each its own fill and drain: NeMo
    # AutoModel and torchtitan accumulate gradients over local batches, one
    # torch.distributed.pipelining schedule.step() each (n_microbatches = local_batch_size /
    # pp_microbatch_size; AutoModel recipes/llm/train_ft.py _run_train_optim_step,
    # components/distributed/pipelining/functional.py build_pipeline_schedule). Megatron runs every
    # micro-batch of the step in one schedule (1).
    flushes = s.integer("pipeline_flushes", 1)
    return ParallelismConfig(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=dp, zero=zero, schedule=schedule,
                             virtual_stages=vs, sequence_parallel=s.flag("sequence_parallel", True),
                             zero_group=0 if group is None or group == dp else group,
                             stage_layers=stage_layers, first_stage_layers=first,
                             last_stage_layers=last,
                             microbatch_group=0 if mgroup is None or mgroup == pp else mgroup,
                             pipeline_flushes=flushes)


def _stage_layers(s: Section, pp: int, vs: int) -> tuple[int, ...]:
    """``stage_layers`` as given (checked for its shape alone), or () when absent."""
    if not s.has("stage_layers"):
        return ()
    v = s.raw["stage_layers"]
    where = s.at("stage_layers")
    if (not isinstance(v, list) or not v
            or any(isinstance(x, bool) or not isinstance(x, int) for x in v)):
        raise ConfigError(f"{where}: expected a list of layer counts (integers), got {show(v)}")
    lengths = [pp] if vs == 1 else [pp, pp * vs]
    if len(v) not in lengths:
        valid = (f"{pp} (one per stage)" if vs == 1 else
                 f"{pp} (one per stage) or {pp * vs} (one per model chunk, pp x virtual_stages)")
        raise ConfigError(f"{where}: {len(v)} entries {v} for pp = {pp}"
                          + (f" x virtual_stages = {vs}" if vs > 1 else "") + f"; valid: {valid}")
    inner = v[1:-1]
    if any(x < 0 for x in v) or any(x == 0 for x in inner):
        raise ConfigError(f"{where}: {v} has a negative entry or an empty stage/chunk between the "
                          "first and the last; valid: counts >= 1 (0 only first or last, where "
                          "the embedding and the output head sit)")
    return tuple(v)


def resolve_plan(par: ParallelismConfig, model: ModelSpec, tr: TrainingConfig,
                 source: str) -> ParallelismConfig:
    """*par* with its sizes, or with the first rule it breaks on *model* and *tr* (prefixed with
    *source*, the scenario's file) as its ``plan_error``."""
    problem = plan_problem(par, model, tr)
    if problem is not None:
        return replace(par, sizes=None, plan_error=f"{source}: {problem}")
    per_step = tr.micro_batch * par.dp
    batch = tr.global_batch if tr.global_batch is not None else _default_batch(par, tr)
    chunks = _chunk_layers(par, model.layers)
    assert not isinstance(chunks, str), chunks          # plan_problem refused it
    uneven = len(set(chunks)) > 1
    return replace(par, sizes=PlanSizes(microbatches=batch // per_step, sequences_per_step=batch,
                                        layers_per_chunk=max(chunks),
                                        local_seq_len=tr.seq_len // par.cp,
                                        chunk_layers=chunks if uneven else ()), plan_error="")


def _split(layers: int, vs: int, short_first: bool) -> list[int]:
    """*layers* over *vs* chunks as evenly as they go; the short chunks first or last."""
    base, extra = divmod(layers, vs)
    short, long = [base] * (vs - extra), [base + 1] * extra
    return short + long if short_first else long + short


def _chunk_layers(par: ParallelismConfig, layers: int) -> tuple[int, ...] | str:
    """Layers of every model chunk in model order (module docstring), or what is wrong."""
    pp, vs = par.pp, par.virtual_stages
    if par.stage_layers:
        given = list(par.stage_layers)
        if sum(given) != layers:
            return (f"parallelism.stage_layers: {given} sums to {sum(given)} but model.layers is "
                    f"{layers}; valid: {len(given)} counts that sum to {layers}")
        if len(given) == pp * vs:
            return tuple(given)
        per_stage = given
    elif par.first_stage_layers is not None or par.last_stage_layers is not None:
        ends = [x for x in (par.first_stage_layers, par.last_stage_layers) if x is not None]
        rest, middle = layers - sum(ends), pp - len(ends)
        keys = " + ".join(k for k, x in (("first_stage_layers", par.first_stage_layers),
                                         ("last_stage_layers", par.last_stage_layers))
                          if x is not None)
        if rest < middle or (middle == 0 and rest != 0) or (middle and rest % middle):
            valid = (f"values summing to {layers}" if middle == 0 else
                     f"values that leave a multiple of {middle} (at least {middle})")
            return (f"parallelism.{keys}: {sum(ends)} leave {rest} of model.layers = {layers} for "
                    f"the other {middle} stage(s), which must split them evenly; valid: {valid}")
        mid = rest // middle if middle else 0
        per_stage = [mid] * pp
        if par.first_stage_layers is not None:
            per_stage[0] = par.first_stage_layers
        if par.last_stage_layers is not None:
            per_stage[-1] = par.last_stage_layers
    else:
        if layers % par.chunks:
            return (f"model.layers: {layers} is not divisible by pp x virtual_stages "
                    f"= {pp} x {vs}; valid: a layer count that is a multiple of {par.chunks}")
        return (layers // par.chunks,) * par.chunks
    if any(n < vs for n in per_stage[1:-1]):
        return (f"parallelism: stages of {per_stage} layers leave a middle stage with fewer "
                f"layers than its virtual_stages = {vs} chunks; valid: at least {vs} per stage")
    by_stage = [_split(n, vs, short_first=(s == 0)) for s, n in enumerate(per_stage)]
    return tuple(by_stage[g % pp][g // pp] for g in range(pp * vs))


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
    if (width := _split_width_problem(par, m)) is not None:
        return width
    chunks = _chunk_layers(par, m.layers)
    if isinstance(chunks, str):
        return chunks
    if tr.seq_len % par.cp:
        return f"training.seq_len: {tr.seq_len} is not divisible by cp = {par.cp}"
    if par.ep > 1 or par.etp != par.tp:
        if (expert := _expert_problem(par, m)) is not None:
            return expert
    per_step = tr.micro_batch * par.dp            # sequences one micro-batch round takes in all
    if tr.global_batch is not None and tr.global_batch % per_step:
        return (f"training.global_batch: {tr.global_batch} is not divisible by micro_batch x dp "
                f"= {tr.micro_batch} x {par.dp}; valid: a multiple of {per_step}")
    batch = tr.global_batch if tr.global_batch is not None else _default_batch(par, tr)
    micro = batch // per_step
    if micro % par.pipeline_flushes:
        return (f"parallelism.pipeline_flushes: {par.pipeline_flushes} does not divide the {micro} "
                f"micro-batches per step; valid: a divisor of {micro}")
    micro //= par.pipeline_flushes                 # one schedule's micro-batches
    if par.virtual_stages > 1 and par.pp > 1 and micro % par.pp:
        return (f"training.global_batch: interleaved pipelines need a number of "
                f"micro-batches per schedule divisible by pp = {par.pp}, got {micro}")
    if par.microbatch_group and micro % par.microbatch_group:
        return (f"parallelism.microbatch_group: {par.microbatch_group} does not divide the "
                f"{micro} micro-batches per schedule; valid: a divisor of them, >= pp")
    return None


def _split_width_problem(par: ParallelismConfig, m: ModelSpec) -> str | None:
    """The widths tensor parallelism splits beyond heads and the dense MLP: each routed expert's
    over etp, the shared experts' and the Mamba-2 heads and groups over tp (Megatron-Core splits
    them so: MoE parallel folding, SharedExpertMLP, MambaMixer)."""
    if m.moe is not None:
        if m.expert_ffn % par.etp:
            return (f"parallelism.etp: {par.etp} does not divide the experts' width "
                    f"{m.expert_ffn} (model.moe.ffn_hidden); valid: a divisor of it")
        shared = m.moe.shared_experts * m.shared_ffn
        if shared % par.tp:
            return (f"parallelism.tp: {par.tp} does not divide the shared experts' width "
                    f"{shared} (model.moe.shared_ffn_hidden x shared_experts)")
    mb = m.mamba
    if mb is not None and "M" in (m.layer_pattern or "") and (mb.heads % par.tp or mb.groups % par.tp):
        return (f"parallelism.tp: {par.tp} does not divide model.mamba.heads = {mb.heads} and "
                f"groups = {mb.groups}; valid: a divisor of both")
    return None


def _expert_problem(par: ParallelismConfig, m: ModelSpec) -> str | None:
    """The first expert-layout rule the plan breaks (module docstring, "Expert layers")."""
    if m.moe is None:
        if par.ep > 1:
            return f"parallelism.ep: {par.ep} needs an MoE model (model.moe)"
        return (f"parallelism.etp: {par.etp} needs an MoE model (model.moe); valid: leave it "
                f"out (it defaults to tp = {par.tp})")
    if m.moe.experts % par.ep:
        return f"parallelism.ep: {par.ep} does not divide model.moe.experts = {m.moe.experts}"
    ranks = par.tp * par.cp * par.dp
    if ranks % (par.ep * par.etp) == 0:
        return None
    if par.etp == par.tp and par.cp == 1:       # the unfolded rule: ep carved out of dp
        return (f"parallelism.ep: {par.ep} does not divide dp = {par.dp}; valid: a divisor of dp, "
                f"or parallelism.etp below tp = {par.tp} so that ep x etp divides tp x dp = {ranks}")
    return (f"parallelism.ep: ep x etp = {par.ep} x {par.etp} = {par.ep * par.etp} does not divide "
            f"the tp x cp x dp = {par.tp} x {par.cp} x {par.dp} = {ranks} ranks of a pipeline "
            f"stage; valid: ep and etp whose product divides {ranks}")
