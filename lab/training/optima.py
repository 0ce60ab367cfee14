"""A seeded, reproducible cache of CP-SAT proven optima: the teacher of a planner that imitates optimal plans.

What is drawn
-------------
Every family of :data:`gpu_env.generators.FAMILIES`, at the seed's sizes: for
each family the cluster sizes of :func:`family_sizes` (its own size, half and
twice it, rounded to whole nodes of 8 GPUs and kept within 8..64), with the
generator's own number of jobs (``jobs_per_gpu * G``). Instance ``n`` of the
family at position ``f`` of ``FAMILIES`` has the size ``sizes[n % len(sizes)]``
and the seed ``SEED_BASE + SEED_BLOCK * f + n``: seeds 50000..56999, a range of
its own (the benchmarks draw from 10000.. and 20000..; the shipped scenarios
use 2026). The list depends on the arguments only (:func:`draws`).

How each one is solved
----------------------
Full mode on the whole model (:func:`agents.full.solve`, ``mode="whole"``):
greedy's plan is the hint, CP-SAT runs with one worker, seed 0 and a
deterministic-time limit, under a wall-clock limit (:data:`WALL_LIMIT`) so
large that it never binds. So the same arguments give the same plans, and the
same bytes, on any machine at any load. An instance CP-SAT does not prove
within the limit is kept with its status (``"feasible"``) and the bound of
full mode (CP-SAT's or the LP relaxation's), never dropped.

The file
--------
One gzip-compressed JSON document (sorted keys, no timestamps, gzip ``mtime``
0, written atomically), by default :data:`DEFAULT_PATH`::

    {"format": "gpu-env-optima/1",
     "generator": {...}, "cpsat": {...}, "counts": {...},
     "records": [{"family", "seed", "gpus", "num_jobs", "status", "objective", "bound",
                  "bound_source", "deterministic_time",
                  "placements": [[job_index, start, first_gpu], ...],
                  "curves": [[r_0, ..., r_T-1], ...]}, ...]}

``placements`` lists the placed non-inherited jobs by their index in
``scenario.jobs`` (inherited jobs run where the scenario says); ``curves`` are
the plan's real-time curves in the order of ``scenario.apps``, which the plan
needs to be checked and valued exactly. :func:`load_optima` reads it back;
``--check`` verifies a few records against the generator and the validator.

    python -m lab.training.optima --parallel 2
    python -m lab.training.optima --check
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents import full
from agents.cpsat import Status
from agents.fanout import Backend, Task, TaskResult, run_tasks
from agents.options import PlanOptions
from gpu_env.files import atomic_path
from gpu_env.generators import FAMILIES, generate
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

FORMAT = "gpu-env-optima/1"
"""The ``format`` field of the file; :func:`load_optima` refuses any other."""
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "optima.json.gz"
"""The shipped cache."""
SEED_BASE = 50000
"""First seed of the cache's range (the benchmarks use 10000.. and 20000..): family ``f`` draws from
``SEED_BASE + SEED_BLOCK * f`` on."""
SEED_BLOCK = 1000
"""Seeds per family, so at most this many instances per family."""
NODE = 8
"""GPUs per node of every family: the sizes are whole nodes."""
MIN_GPUS, MAX_GPUS = 8, 64
"""The sizes drawn: 8..64 GPUs."""
MAX_JOBS = 32
"""Half or twice a family's size is drawn when it has at most this many jobs (measured, 5 deterministic seconds:
CP-SAT proves nearly every instance up to about 30 jobs, and few of the 40-60-job ones)."""
DEFAULT_PER_FAMILY = 36
"""Instances per family of the shipped cache."""
DEFAULT_DETERMINISTIC_TIME = 10.0
"""CP-SAT's deterministic-time limit per instance of the shipped cache (the binding limit). Measured on the 252
instances of the shipped cache (2 processes on 2 shared cores): 5 proves 234 (92.9 %) in 170 s, 10 proves 240
(95.2 %) in 279 s; the unproven ones are batch-fragmentation at 16 GPUs, priority-inversion at 24 and
uniform-priority at 16-32, within 0.004-2.3 % of their bound."""
WALL_LIMIT = 1e6
"""Wall-clock seconds per instance: so large that the deterministic limit always binds first."""
SOLVER_SEED = 0
"""CP-SAT's ``random_seed`` (and greedy's)."""
HINT_SOURCE = "greedy"
"""The hint of full mode: greedy's plan (the learned policy is left out, so the teacher does not depend on it)."""
_TOL = 1e-6


class OptimaError(ValueError):
    """A cache file that cannot be read: the message names the file and the field."""


def family_sizes(family: str) -> tuple[int, ...]:
    """The cluster sizes drawn for a family: its own size, and half and twice it where they draw few enough jobs.

    Sizes are whole nodes within 8..64 GPUs; half or twice the family's size is kept when the
    generator draws at most :data:`MAX_JOBS` jobs there (its own size always is).

    >>> family_sizes("training-heavy"), family_sizes("priority-inversion"), family_sizes("scale-64x30")
    ((8, 16), (16, 24), (32, 64))
    """
    fam = FAMILIES[family]
    own = fam.gpus

    def jobs(gpus: int) -> int:
        return max(1, round(fam.jobs_per_gpu * gpus))

    sizes = {own}
    for g in (own / 2, own * 2):
        size = min(MAX_GPUS, max(MIN_GPUS, NODE * round(g / NODE)))
        if jobs(size) <= MAX_JOBS:
            sizes.add(size)
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class Draw:
    """One instance to solve: a family, a seed and a cluster size (the generator's number of jobs)."""

    family: str
    seed: int
    gpus: int

    def scenario(self) -> Scenario:
        """The instance, drawn again."""
        return generate(self.family, self.seed, gpus=self.gpus)


def draws(families: Sequence[str], per_family: int) -> list[Draw]:
    """The instances of a cache, in file order: ``per_family`` of each family, sizes in turn.

    Raises:
        ValueError: ``per_family`` is not within 1..:data:`SEED_BLOCK`, or a family is unknown.
    """
    if not 1 <= per_family <= SEED_BLOCK:
        raise ValueError(f"per_family: expected 1..{SEED_BLOCK}, got {per_family}")
    names = list(FAMILIES)
    out = []
    for family in families:
        if family not in FAMILIES:
            raise ValueError(f"families: unknown family {family!r} (expected: {', '.join(names)})")
        sizes = family_sizes(family)
        base = SEED_BASE + SEED_BLOCK * names.index(family)
        out += [Draw(family, base + n, sizes[n % len(sizes)]) for n in range(per_family)]
    return out


@dataclass(frozen=True, eq=False)
class Record:
    """One solved instance of the cache (compare two by :meth:`to_dict`: its arrays have no single truth value).

    Attributes:
        family: The generator family.
        seed: The generator seed.
        gpus: The cluster size drawn.
        num_jobs: The scenario's jobs (inherited ones included), as drawn.
        status: ``"optimal"`` when CP-SAT proved the plan optimal, else ``"feasible"``.
        objective: The plan's objective (``compute_metrics``, rounded to 1e-6).
        bound: The proven upper bound on the optimum (when optimal, ``objective`` up to the model's objective scale).
        bound_source: Where the bound comes from: ``"cpsat"`` or ``"lp-dual"``.
        deterministic_time: CP-SAT's deterministic time spent.
        placements: (placed non-inherited jobs, 3) int ``[job_index, start, first_gpu]``.
        curves: (apps, T) int: the plan's real-time curves, in the order of ``scenario.apps``.
    """

    family: str
    seed: int
    gpus: int
    num_jobs: int
    status: str
    objective: float
    bound: float
    bound_source: str
    deterministic_time: float
    placements: np.ndarray = field(repr=False)
    curves: np.ndarray = field(repr=False)

    @property
    def optimal(self) -> bool:
        """CP-SAT proved this plan optimal."""
        return self.status == Status.OPTIMAL.value

    def scenario(self) -> Scenario:
        """The scenario, drawn again from the generator."""
        return generate(self.family, self.seed, gpus=self.gpus)

    def plan(self, scenario: Scenario | None = None) -> Plan:
        """The stored plan on its scenario (drawn again when not given): inherited jobs where they run."""
        sc = scenario or self.scenario()
        placements = [Placement(job.id, 0, tuple(job.running_on)) for job in sc.jobs if job.running_on is not None]
        for index, start, first in self.placements.tolist():
            job = sc.jobs[index]
            placements.append(Placement(job.id, start, tuple(range(first, first + job.gpus))))
        curves = {app.name: [int(x) for x in row] for app, row in zip(sc.apps, self.curves.tolist(), strict=True)}
        return Plan(sc.name, "optima", placements, curves)

    def to_dict(self) -> dict[str, Any]:
        """The record as it is stored."""
        return {
            "family": self.family,
            "seed": self.seed,
            "gpus": self.gpus,
            "num_jobs": self.num_jobs,
            "status": self.status,
            "objective": self.objective,
            "bound": self.bound,
            "bound_source": self.bound_source,
            "deterministic_time": self.deterministic_time,
            "placements": self.placements.tolist(),
            "curves": self.curves.tolist(),
        }


# ----------------------------------------------------------------------------- solving


def solve_draw(draw: Draw, deterministic_time: float) -> Record:
    """Solve one instance with full mode on the whole model; the plan is validated before it is returned.

    Raises:
        RuntimeError: The plan breaks a rule or its objective is not the solver's (a bug).
    """
    sc = draw.scenario()
    result = full.solve(
        sc,
        time_limit=WALL_LIMIT,
        workers=1,
        seed=SOLVER_SEED,
        hint_source=HINT_SOURCE,
        options=PlanOptions(time_limit=WALL_LIMIT, seed=SOLVER_SEED, workers=1, deterministic_time=deterministic_time),
        deterministic_time=deterministic_time,
        mode=full.Mode.WHOLE,
    )
    plan = result.plan
    if plan is None or result.objective is None or result.bound is None:
        raise RuntimeError(f"{draw}: full mode returned no plan or no bound")
    problems = validate(sc, plan)
    if problems:
        raise RuntimeError(f"{draw}: invalid plan: {problems[0]}")
    index = {job.id: i for i, job in enumerate(sc.jobs)}
    triples = sorted(
        (index[p.job], p.start, p.gpus[0]) for p in plan.placements if sc.jobs[index[p.job]].running_on is None
    )
    record = Record(
        family=draw.family,
        seed=draw.seed,
        gpus=draw.gpus,
        num_jobs=len(sc.jobs),
        status=result.status.value,
        objective=round(result.objective, 6),
        bound=round(result.bound, 6),
        bound_source=str(plan.info.get("bound_source", "cpsat")),
        deterministic_time=round(result.deterministic_time, 6),
        placements=np.array(triples, dtype=np.int64).reshape(-1, 3),
        curves=np.array([plan.curves[app.name] for app in sc.apps], dtype=np.int64).reshape(len(sc.apps), sc.slots),
    )
    check_record(record, sc)  # the stored form itself: it validates and is worth what the solver said
    return record


def check_record(record: Record, scenario: Scenario | None = None) -> None:
    """Check a record against its scenario: the job count, the plan's rules and its objective.

    Raises:
        RuntimeError: The scenario draws differently, the plan breaks a rule, or its objective differs.
    """
    sc = scenario or record.scenario()
    where = f"{record.family} seed {record.seed} at {record.gpus} GPUs"
    if len(sc.jobs) != record.num_jobs:
        raise RuntimeError(f"{where}: the generator draws {len(sc.jobs)} jobs, the record has {record.num_jobs}")
    plan = record.plan(sc)
    problems = validate(sc, plan)
    if problems:
        raise RuntimeError(f"{where}: the stored plan is invalid: {problems[0]}")
    objective = compute_metrics(sc, plan).objective
    if abs(objective - record.objective) > _TOL * max(1.0, abs(objective)):
        raise RuntimeError(f"{where}: the stored plan is worth {objective:.6f}, the record says {record.objective}")
    if record.bound < record.objective - _TOL * max(1.0, abs(objective)):
        raise RuntimeError(f"{where}: bound {record.bound} below the objective {record.objective}")


def _solve_task(task: Task) -> TaskResult:
    """A fan-out task function (:func:`agents.fanout.fan_out`): one draw solved, its record as ``values``."""
    started = time.perf_counter()
    p = task.params
    record = solve_draw(Draw(p["family"], p["seed"], p["gpus"]), float(p["deterministic_time"]))
    return TaskResult(
        task.scenario_name,
        task.planner,
        task.seed,
        objective=record.objective,
        values=record.to_dict(),
        elapsed=time.perf_counter() - started,
    )


def build(
    families: Sequence[str] = tuple(FAMILIES),
    per_family: int = DEFAULT_PER_FAMILY,
    deterministic_time: float = DEFAULT_DETERMINISTIC_TIME,
    parallel: int = 1,
    on_result: Callable[[int, TaskResult], None] | None = None,
) -> dict[str, Any]:
    """Solve every draw and return the cache document (its records in :func:`draws` order).

    Args:
        families: The families drawn (every family of the generator by default).
        per_family: Instances per family.
        deterministic_time: CP-SAT's deterministic-time limit per instance.
        parallel: Processes (one CP-SAT worker each); the result does not depend on it.
        on_result: Called with ``(index, result)`` as each instance is done (a progress line).

    Raises:
        RuntimeError: An instance failed: its plan is invalid, or the solver raised (a bug).
    """
    if not (
        isinstance(deterministic_time, int | float) and math.isfinite(deterministic_time) and deterministic_time > 0
    ):
        raise ValueError(f"deterministic_time: expected a positive number, got {deterministic_time!r}")
    todo = draws(families, per_family)
    tasks = [
        Task(
            {"name": f"{d.family}-{d.seed}-g{d.gpus}"},
            "full",
            SOLVER_SEED,
            WALL_LIMIT,
            params={"family": d.family, "seed": d.seed, "gpus": d.gpus, "deterministic_time": deterministic_time},
        )
        for d in todo
    ]
    run = run_tasks(tasks, Backend.pool(parallel), function=_solve_task, on_result=on_result)
    if not run.ok:
        raise RuntimeError("optima: instances failed:\n" + "\n".join(run.failure_lines(tracebacks=True)))
    records = [r.values for r in run.results]
    return {
        "format": FORMAT,
        "generator": {
            "families": list(families),
            "per_family": per_family,
            "sizes": {f: list(family_sizes(f)) for f in families},
            "seed_base": SEED_BASE,
            "seed_block": SEED_BLOCK,
            "num_jobs": "generator default (jobs_per_gpu * gpus)",
        },
        "cpsat": {
            "planner": "full",
            "mode": full.Mode.WHOLE.value,
            "hint": HINT_SOURCE,
            "workers": 1,
            "seed": SOLVER_SEED,
            "deterministic_time": deterministic_time,
            "time_limit": WALL_LIMIT,
        },
        "counts": counts(records),
        "records": records,
    }


def counts(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Instances and proven optima, in all and per family."""
    per: dict[str, dict[str, int]] = {}
    for r in records:
        entry = per.setdefault(r["family"], {"instances": 0, "optimal": 0})
        entry["instances"] += 1
        entry["optimal"] += int(r["status"] == Status.OPTIMAL.value)
    return {
        "instances": len(records),
        "optimal": sum(e["optimal"] for e in per.values()),
        "per_family": per,
    }


def encode(document: dict[str, Any]) -> bytes:
    """The document as the file's bytes: compact JSON with sorted keys, gzip with no name and ``mtime`` 0."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as out:
        out.write(text.encode("utf-8"))
    return buffer.getvalue()


def write(document: dict[str, Any], path: str | os.PathLike[str] = DEFAULT_PATH) -> None:
    """Write the cache atomically (a temporary file beside ``path``, then a rename)."""
    data = encode(document)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


# ----------------------------------------------------------------------------- reading


def read_document(path: str | os.PathLike[str] = DEFAULT_PATH) -> dict[str, Any]:
    """The cache's JSON document, its header checked (JSON only: nothing is unpickled).

    Raises:
        OptimaError: The file is missing, not gzip, not JSON, or its header is wrong; the message
            names the file and the field.
    """
    path = Path(path)
    try:
        with gzip.open(path, "rb") as stream:
            raw = stream.read()
    except FileNotFoundError:
        raise OptimaError(f"{path}: no such file (build it with python -m lab.training.optima)") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise OptimaError(f"{path}: not a complete gzip file ({exc})") from None
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OptimaError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise OptimaError(f"{path}: expected a JSON object at the top, got {type(document).__name__}")
    if document.get("format") != FORMAT:
        raise OptimaError(f"{path}: field 'format': expected {FORMAT!r}, got {document.get('format')!r}")
    for name in ("generator", "cpsat", "counts"):
        if not isinstance(document.get(name), dict):
            raise OptimaError(f"{path}: field {name!r}: expected a JSON object, got {document.get(name)!r}")
    if not isinstance(document.get("records"), list):
        raise OptimaError(f"{path}: field 'records': expected a list")
    return document


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "family": str,
    "seed": int,
    "gpus": int,
    "num_jobs": int,
    "status": str,
    "objective": (int, float),
    "bound": (int, float),
    "bound_source": str,
    "deterministic_time": (int, float),
    "placements": list,
    "curves": list,
}


def _record(entry: Any, where: str) -> Record:
    if not isinstance(entry, dict):
        raise OptimaError(f"{where}: expected a JSON object")
    for name, kind in _FIELDS.items():
        value = entry.get(name)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise OptimaError(f"{where}.{name}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    if entry["family"] not in FAMILIES:
        raise OptimaError(f"{where}.family: unknown family {entry['family']!r}")
    arrays = {}
    for name, width in (("placements", 3), ("curves", None)):
        try:
            array = np.array(entry[name], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise OptimaError(f"{where}.{name}: expected a list of lists of integers") from None
        if array.size == 0:
            array = array.reshape(0, width or 0)
        if array.ndim != 2 or (width is not None and array.shape[1] != width):
            raise OptimaError(f"{where}.{name}: expected rows of {width or 'equal length'} integers")
        arrays[name] = array
    return Record(
        family=entry["family"],
        seed=entry["seed"],
        gpus=entry["gpus"],
        num_jobs=entry["num_jobs"],
        status=entry["status"],
        objective=float(entry["objective"]),
        bound=float(entry["bound"]),
        bound_source=entry["bound_source"],
        deterministic_time=float(entry["deterministic_time"]),
        placements=arrays["placements"],
        curves=arrays["curves"],
    )


def load_optima(path: str | os.PathLike[str] = DEFAULT_PATH) -> list[Record]:
    """The records of a cache file, in file order.

    Raises:
        OptimaError: A missing, truncated or malformed file; the message names the file and the field.
    """
    document = read_document(path)
    return [_record(entry, f"{path}: records[{i}]") for i, entry in enumerate(document["records"])]


def check(path: str | os.PathLike[str] = DEFAULT_PATH, sample: int = 8) -> list[Record]:
    """Check ``sample`` records spread over the file (every one when ``sample`` is 0): see :func:`check_record`.

    Returns:
        The records checked.

    Raises:
        OptimaError: The file cannot be read.
        RuntimeError: A record does not match its scenario, breaks a rule or is worth another objective.
    """
    records = load_optima(path)
    if sample and len(records) > sample:
        records = (
            [records[round(i * (len(records) - 1) / (sample - 1))] for i in range(sample)]
            if sample > 1
            else [records[0]]
        )
    for record in records:
        check_record(record)
    return records


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lab.training.optima``: build (or ``--check``) the cache of CP-SAT proven optima.

        python -m lab.training.optima --parallel 2
        python -m lab.training.optima --per-family 2 --deterministic-time 1 --out /tmp/optima.json.gz
        python -m lab.training.optima --check

    Exit status: 0 done, 1 an instance or a check failed, 2 bad arguments or an unreadable file.
    """
    from agents.arguments import int_at_least, positive_float

    parser = argparse.ArgumentParser(
        prog="python -m lab.training.optima", description=(main.__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_PATH, metavar="PATH", help="the cache file (default: %(default)s)"
    )
    parser.add_argument("--per-family", type=int_at_least(1), default=DEFAULT_PER_FAMILY, metavar="N")
    parser.add_argument(
        "--families", default=",".join(FAMILIES), metavar="NAMES", help="comma-separated (default: all seven)"
    )
    parser.add_argument(
        "--deterministic-time",
        type=positive_float,
        default=DEFAULT_DETERMINISTIC_TIME,
        metavar="D",
        help="CP-SAT deterministic-time limit per instance (default: %(default)g)",
    )
    parser.add_argument("--parallel", type=int_at_least(1), default=1, metavar="N", help="processes (default: 1)")
    parser.add_argument("--check", action="store_true", help="check records of --out instead of building")
    parser.add_argument(
        "--sample", type=int_at_least(0), default=8, metavar="N", help="records --check checks (0: all)"
    )
    args = parser.parse_args(argv)
    if args.check:
        try:
            checked = check(args.out, args.sample)
        except OptimaError as exc:
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:
            print(f"{parser.prog}: check failed: {exc}", file=sys.stderr)
            return 1
        print(f"{args.out}: {len(checked)} records checked: scenarios, rules and objectives match")
        return 0
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    try:
        total = len(draws(families, args.per_family))
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    done = {"n": 0, "optimal": 0}
    step = max(1, total // 20)

    def progress(index: int, result: TaskResult) -> None:
        done["n"] += 1
        done["optimal"] += int(result.values.get("status") == Status.OPTIMAL.value)
        if done["n"] % step == 0 or done["n"] == total:
            print(
                f"optima: {done['n']}/{total} instances, {done['optimal']} proven optimal, "
                f"{time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    try:
        document = build(families, args.per_family, args.deterministic_time, args.parallel, progress)
    except RuntimeError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    write(document, args.out)
    c = document["counts"]
    for family, entry in c["per_family"].items():
        print(f"{family:22} {entry['optimal']:3}/{entry['instances']:<3} proven optimal")
    size = Path(args.out).stat().st_size
    print(
        f"{args.out}: {c['instances']} instances, {c['optimal']} proven optimal "
        f"({c['optimal'] / max(1, c['instances']):.1%}), {size:,} bytes, {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that the pickled task function names lab.training.optima, not __main__.
    from lab.training import optima as _optima

    raise SystemExit(_optima.main())
