"""``clustersim sweep``: a scenario over the cartesian product of ``--over KEY=V1,V2,...`` values.

Each point is the base scenario with its keys set (exactly as ``run --set`` would), simulated on
its own; a point that is invalid or infeasible is a row with its reason, never an abort. Rows carry
every swept key and every field of ``run --json`` (nested fields flattened with dots:
``breakdown_s.compute``), plus ``status`` and ``error``; a sweep over ``cluster.chips`` also gets
``scaling_efficiency``: tokens/s per chip relative to the smallest chip count of the same other
keys (strong scaling with the scenario's global batch; ``--weak`` scales the global batch with the
chips so the batch per chip stays fixed).

Points run in local processes (``--workers``) or on a Dask cluster (``--scheduler``); each point is
a pure function of its inputs and seed, so the rows are the same whatever runs them. With
``--out`` the table is rewritten as points finish, and a sweep started again with the same
``--out`` skips the points it already has.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import apply_overrides, parse_value, scenario_from_dict, set_key
from .errors import ConfigError, InfeasibleError, SimError, one_line
from .report import step_json
from .sweep_store import locked, read_table, write_table

__all__ = ["SweepAxis", "parse_over", "expand_points", "run_point", "run_sweep",
           "scaling_efficiency", "read_table", "write_table", "MAX_POINTS"]

MAX_POINTS = 10_000                # a sweep larger than this is refused (hours of work)
_NUM = r"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?"
_RANGE = re.compile(rf"^\s*({_NUM})\s*\.\.\s*({_NUM})\s*(?:([x+])\s*({_NUM}))?\s*$")


@dataclass(frozen=True)
class SweepAxis:
    key: str
    values: tuple[Any, ...]


def parse_over(text: str, base: Mapping[str, Any]) -> SweepAxis:
    """``KEY=V1,V2,...`` or ``KEY=A..BxF`` (geometric, factor F) or ``KEY=A..B+S`` (step S;
    ``A..B`` steps by 1): the key checked against the schema, the values parsed as YAML scalars."""
    key, sep, spec = text.partition("=")
    key = key.strip()
    where = f"--over {key or text}"
    if not sep or not key:
        raise ConfigError(f"--over: expected KEY=V1,V2,... or KEY=A..BxF, got {text!r}")
    if not text.isprintable():
        # a point's values are cells of the table: a control character (a CR) would cut its row
        raise ConfigError(f"{where}: {text!r} holds a control character; values are printable text")
    set_key(dict(base), key, None, where)            # the key exists in the schema
    m = _RANGE.match(spec)
    if m:
        a, b = parse_value(m.group(1), where), parse_value(m.group(2), where)
        op, step = m.group(3) or "+", parse_value(m.group(4) or "1", where)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b, step)):
            raise ConfigError(f"{where}: a range needs numbers, got {spec!r}")
        if (op == "x" and step <= 1) or (op == "+" and step <= 0):
            raise ConfigError(f"{where}: the step of {spec!r} must be > {1 if op == 'x' else 0}")
        values: list[Any] = []
        i = 0
        while len(values) <= MAX_POINTS:
            v = a * step ** i if op == "x" else a + i * step
            if isinstance(v, float) and v.is_integer() and all(isinstance(x, int) for x in (a, step)):
                v = int(v)
            if v > b * (1 + 1e-12) if b >= 0 else v > b * (1 - 1e-12):
                break
            values.append(round(v, 12) if isinstance(v, float) else v)
            i += 1
        if not values:
            raise ConfigError(f"{where}: the range {spec!r} is empty (start above end)")
    else:
        values = [parse_value(x, where) for x in spec.split(",") if x.strip()]
        if not values:
            raise ConfigError(f"{where}: no values; give V1,V2,... or A..BxF")
    if len({_same(v) for v in values}) != len(values):
        raise ConfigError(f"{where}: a value appears twice in {spec!r}")
    for v in values:
        _check_value(base, key, v, where)
    return SweepAxis(key, tuple(values))


def _same(v: Any) -> Any:
    """What makes two swept values the same point: 8 and 8.0 are one number."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v)


def _check_value(base: Mapping[str, Any], key: str, value: Any, where: str) -> None:
    """A value of the wrong type or out of its field's range is an input error before anything
    runs; a value that only fails in combination with others (tp=3 on 8 chips) is a row."""
    data = dict(base)
    set_key(data, key, value, where)
    try:
        scenario_from_dict(data, where)
    except ConfigError as e:
        msg = str(e)
        if any(f"{key}: {w}" in msg for w in ("expected", "got", "must be", "required", "unknown")):
            raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    except SimError:
        pass


def expand_points(axes: Sequence[SweepAxis]) -> list[dict[str, Any]]:
    """The cartesian product of the axes, first axis outermost."""
    import itertools

    n = math.prod(len(a.values) for a in axes)
    if n > MAX_POINTS:
        raise ConfigError(f"--over: {n:,} points, over the limit of {MAX_POINTS:,}; sweep fewer values")
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"--over: a key is swept twice ({', '.join(keys)})")
    return [dict(zip(keys, combo)) for combo in itertools.product(*(a.values for a in axes))]


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, name + "."))
        elif isinstance(v, (list, tuple)):
            out[name] = json.dumps(v)
        else:
            out[name] = v
    return out


@functools.lru_cache(maxsize=1)
def _network(cluster: Any) -> tuple[Any, Any]:
    """``sim.job.network_of`` for this process's last cluster (PERF: the points of a sweep over
    anything but the cluster share its topology and collective model, as a validation suite's
    runs do; a memo of a pure function, one cluster kept, so a sweep over sizes holds one large
    graph at a time)."""
    from .job import network_of

    return network_of(cluster)


def run_point(payload: tuple[Mapping[str, Any], str, dict[str, Any], bool, int | None]) -> dict[str, Any]:
    """One sweep point -> its row (a pure function: what workers and Dask tasks run; its
    cluster's network is reused from the point before where it is the same)."""
    from .run import run

    raw, source, point, weak, max_events = payload
    row: dict[str, Any] = dict(point)
    try:
        scn = _point_scenario(raw, source, point, weak)
        topo = net = None
        if scn.cluster.shared_with is None:      # a shared fabric is built for both jobs
            topo, net = _network(scn.cluster)
        result = run(scn, max_events=max_events, topo=topo, net=net)
        row.update(status="ok", error="", model=scn.model.name)
        row.update(_flatten(step_json(result)))
    except InfeasibleError as e:
        row.update(status="infeasible", error=one_line(str(e)))
    except SimError as e:
        row.update(status="invalid", error=one_line(str(e)))
    except Exception as e:               # noqa: BLE001 - a bug on one point must not end the sweep
        row.update(status="error", error=one_line(f"internal error, please report: "
                                                  f"{type(e).__name__}: {e}"))
    return row


def _point_scenario(raw: Mapping[str, Any], source: str, point: Mapping[str, Any], weak: bool) -> Any:
    """The scenario of one point: the base with the point's values (and --weak's batch)."""
    data = dict(raw)
    for key, value in point.items():
        set_key(data, key, value, f"--over {key}")
    if weak:
        data = _weak_batch(data, raw, source)
    return scenario_from_dict(data, source)


def _check_flags(base: Mapping[str, Any], source: str, points: Sequence[Mapping[str, Any]],
                 weak: bool) -> None:
    """Refuse up front (like ``run``) what is wrong whatever the point: when no point makes a
    valid scenario and every one fails the same way, the error is the sweep's own (its file,
    --set, --weak), not a combination worth a row each."""
    first: str | None = None
    for point in points:
        try:
            _point_scenario(base, source, point, weak)
            return
        except ConfigError as e:
            if first is None:
                first = str(e)
            elif str(e) != first:
                return
        except SimError:
            return
    if first is not None:
        raise ConfigError(first)


def _weak_batch(data: dict[str, Any], base: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Weak scaling: the base scenario's global batch per chip, at this point's chip count."""
    b = scenario_from_dict(base, source)
    p = scenario_from_dict(data, source)
    if b.training.global_batch is None:
        return data             # the default batch already grows with data parallelism
    per_chip = b.training.global_batch / b.cluster.chips
    gb = per_chip * p.cluster.chips
    if abs(gb - round(gb)) > 1e-9:
        raise ConfigError(f"--weak: {b.training.global_batch} sequences on {b.cluster.chips} chips "
                          f"is {per_chip:g} per chip, not a whole batch on {p.cluster.chips} chips")
    set_key(data, "training.global_batch", int(round(gb)), "--weak")
    return data


def scaling_efficiency(rows: list[dict[str, Any]], keys: Sequence[str]) -> None:
    """Add ``scaling_efficiency`` to the rows of a ``cluster.chips`` sweep (in place): tokens/s per
    chip over that of the smallest-chip ``ok`` row with the same other swept keys; empty otherwise."""
    others = [k for k in keys if k != "cluster.chips"]
    base: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rows:
        if r.get("status") != "ok":
            continue
        g = _key(r, others)
        if g not in base or float(r["chips"]) < float(base[g]["chips"]):
            base[g] = r
    for r in rows:
        b = base.get(_key(r, others))
        if r.get("status") == "ok" and b is not None:
            r["scaling_efficiency"] = float(r["tokens_per_s_per_chip"]) / float(b["tokens_per_s_per_chip"])
        else:
            r["scaling_efficiency"] = ""


def _key(point: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(point.get(k)) for k in keys)


def run_sweep(raw: Mapping[str, Any], source: str, axes: Sequence[SweepAxis], *,
              sets: Sequence[str] = (), weak: bool = False, workers: int = 1,
              scheduler: str | None = None, out: Path | None = None,
              max_events: int | None = None,
              progress: Callable[[Iterable[Any], int, str], Iterable[Any]] | None = None
              ) -> list[dict[str, Any]]:
    """Run every point (skipping those already in *out*); rows in point order. *out* is locked
    while the sweep writes it: a second sweep on the same file is refused (ConfigError)."""
    with locked(out):
        return _run_sweep(raw, source, axes, sets, weak, workers, scheduler, out, max_events,
                          progress)


def _run_sweep(raw: Mapping[str, Any], source: str, axes: Sequence[SweepAxis],
               sets: Sequence[str], weak: bool, workers: int, scheduler: str | None,
               out: Path | None, max_events: int | None,
               progress: Callable[[Iterable[Any], int, str], Iterable[Any]] | None
               ) -> list[dict[str, Any]]:
    base = apply_overrides(raw, sets)
    points = expand_points(axes)
    keys = [a.key for a in axes]
    if weak and "cluster.chips" not in keys:
        raise ConfigError("--weak: needs a sweep over cluster.chips")
    _check_flags(base, source, points, weak)
    sweep_id = _sweep_id(base, keys, weak, max_events)
    done: dict[tuple[str, ...], dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    if out is not None and out.exists():
        old = read_table(out)
        if old and any(str(r.get("sweep_id")) != sweep_id for r in old):
            raise ConfigError(f"--out: {str(out)!r} holds rows of another sweep (other base scenario, "
                              "--set, --weak or swept keys); give a new file to start this one")
        for r in old:
            if r.get("status") in ("ok", "infeasible", "invalid"):
                done[_key(r, keys)] = r
        wanted = {_key(p, keys) for p in points}
        kept = [r for k, r in done.items() if k not in wanted]   # earlier points of this sweep
    todo = [(i, p) for i, p in enumerate(points) if _key(p, keys) not in done]
    rows: dict[int, dict[str, Any]] = {i: done[_key(p, keys)] for i, p in enumerate(points)
                                       if _key(p, keys) in done}
    payloads = [(base, source, p, weak, max_events) for _, p in todo]

    def tagged(row: dict[str, Any]) -> dict[str, Any]:
        return {"sweep_id": sweep_id, **row}
    track = progress or (lambda it, n, d: it)

    def finished(i: int, row: dict[str, Any]) -> None:
        rows[i] = tagged(row)
        if out is not None:
            write_table(out, [rows[j] for j in sorted(rows)] + kept)

    if scheduler is not None:
        for i, row in track(_dask(scheduler, payloads, [i for i, _ in todo]), len(todo), "sweep points"):
            finished(i, row)
    elif workers > 1 and len(todo) > 1:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            futs = {pool.submit(run_point, pl): i for (i, _), pl in zip(todo, payloads)}
            for f in track(as_completed(futs), len(todo), "sweep points"):
                finished(futs[f], f.result())
    else:
        for (i, _), pl in track(list(zip(todo, payloads)), len(todo), "sweep points"):
            finished(i, run_point(pl))
    ordered = [rows[i] for i in range(len(points))]
    if "cluster.chips" in keys:
        scaling_efficiency(ordered, keys)
    if out is not None:
        write_table(out, ordered + kept)
    return ordered


def _sweep_id(base: Mapping[str, Any], keys: Sequence[str], weak: bool, max_events: int | None) -> str:
    """What makes two runs the same sweep: the base scenario after --set, the swept keys, --weak
    and the work limit (a short hash, written in every row)."""
    import hashlib

    text = json.dumps([base, sorted(keys), weak, max_events], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _dask(address: str, payloads: list[Any], index: list[int]) -> Iterable[tuple[int, dict[str, Any]]]:
    """Run the payloads on the Dask cluster at *address*; (point index, row) as each finishes."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--scheduler: needs dask.distributed (pip install 'clustersim[dask]')") from None
    try:
        client = Client(address, timeout="5s")
    except (OSError, TimeoutError, ValueError) as e:
        raise ConfigError(f"--scheduler: cannot reach a Dask scheduler at {address!r} within 5 s "
                          f"({type(e).__name__}); give tcp://HOST:PORT of a running scheduler") from None
    try:
        futs = client.map(run_point, payloads, pure=False)
        where = {f.key: i for f, i in zip(futs, index)}
        for f in as_completed(futs):
            yield where[f.key], f.result()
    finally:
        client.close()
