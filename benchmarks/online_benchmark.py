"""The live regime measured: days played slot by slot against their hindsight optima; writes ``online.md``.

Every family of :data:`gpu_env.generators.FAMILIES` at its seed size (and, with ``--sizes``, at larger
sizes) is played for ``--days`` days (``generate(family, seed)``, seeds ``--seed-base``, ``+1``, ...). Each
day is played at every forecast error of ``--sigmas`` and runtime model of ``--runtimes``:

1. **The realized day.** The actual demand is ``NoiseModel(sigma).draw(day, seed)``, the actual runtimes
   ``draw_runtimes(day, model, seed)``; both depend on the family, the day's seed and sigma alone, so
   every planner meets the same day (common random numbers). ``realized_day`` puts them into the
   scenario: the day as it happened; each row records a digest of the day its planner played
   (``realized_digest``).
2. **The hindsight optimum.** CP-SAT plans the realized day whole, every job, runtime and demand known
   from slot 0 (one worker, seed 0, ``--hindsight-dtime`` of deterministic time so that the same day
   gives the same reference on any machine, ``--hindsight-time-limit`` as a wall-clock guard). The
   reference is its objective, or greedy's plan of the realized day where that is worth more (at large
   sizes CP-SAT may find nothing in time); its status and bound are recorded.
3. **Every planner live** (:func:`agents.simulator.simulation.rolling`, re-planning every slot, jobs known
   at their release, early ends re-planned): the plain schedulers (fifo, backfill, greedy, ppo, full) with
   today's ``Corrector()``, and the live planner ``anticipate`` (decisions by expected value over sampled
   futures that carry arrivals and demand, :mod:`agents.live.anticipate`) with its own forecaster, in
   four variants: with the history (``anticipate``), without it (``anticipate-nohist``), with the demand
   forecaster fitted from the history (``anticipate-histfc``), and the consensus vote it replaced
   (``anticipate-consensus``, with the history). The history is ``--history-days`` other days of the same family
   (seeds never played), each with its **realized** demand drawn at the same sigma: what happened on
   those days, never the played day. The live planners see only the time limits, as shipped. With
   ``--oracle``, each selected live variant also plays as its ``-oracle`` twin, told the actual demand of
   the whole day (:class:`ActualDemand` as its forecaster): the information limit of the forecast.

Each executed day is scored as ``objective / reference`` and validated against the realized day (a
failure is a bug: it is printed on stderr and listed in the report). The live planners' cycle times are
the rolling loop's ``solve_ms``.

Run (one task per family, size and day, each doing every sigma, runtime model and planner of its day
and their hindsight optima, over :mod:`agents.fanout`; ``--parallel N`` or ``--ray``)::

    PYTHONPATH=. .venv/bin/python benchmarks/online_benchmark.py --days 6 --sigmas 0,0.3 --parallel 2
    PYTHONPATH=. .venv/bin/python benchmarks/online_benchmark.py --quick      # 2 families x 2 days, a look

Writes ``benchmarks/results/online.md`` (tables and the targets, each met or missed), ``online.json``
(every row) and ``online.png``; ``--quick`` writes them to the temporary directory unless ``--out`` says.
Each finished day's rows are kept in ``online.partial.jsonl`` until the end: ``--resume`` after a killed run
plays only the days it had not finished.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.arguments import add_fanout_options, fanout_backend, int_at_least, parse_floats, parse_names  # noqa: E402
from agents.fanout import Backend, FanoutError, Run, Task, TaskResult, run_tasks, warm_up_learned  # noqa: E402
from agents.live.anticipate import DEFAULT_SAMPLES, LARGE_CLUSTER  # noqa: E402
from agents.live.forecast import NoiseModel  # noqa: E402
from agents.live.runtimes import draw_runtimes  # noqa: E402
from agents.options import PlanOptions  # noqa: E402
from agents.registry import available_schedulers, run_scheduler  # noqa: E402
from agents.report.statistics import mean_ci  # noqa: E402
from agents.simulator.decisions import CAUSES, LATE_SLACK  # noqa: E402
from agents.simulator.simulation import realized_day  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402
from gpu_env.render import pyplot, save_figure, scheduler_colours  # noqa: E402
from gpu_env.scenario import Scenario  # noqa: E402
from lab.benchmarking import commit  # noqa: E402
from lab.drawn_history import history_seeds, past_days  # noqa: E402
from lab.live_arms import (  # noqa: E402
    EPS,
    LIVE,
    LIVE_PLANNER,
    NEWSVENDOR,
    ONE_POINT,
    ORACLE,
    PLAIN,
    RUNTIMES,
    SIGMAS,
    TIMING_KEYS,
    Settings,
    default_planners,
    hindsight,
    is_live,
    play,
    share_of,
    with_oracles,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

OUT = ROOT / "benchmarks" / "results" / "online"
"""Where the results go: ``online.md``, ``online.json``, ``online.png``."""


def warm_up(day: Scenario, planners: Sequence[str]) -> None:
    """Load every planner's one-time costs (compiled kernels, the policy) before anything is timed."""
    plain = [p for p in planners if p in PLAIN and p != "full"] + (["greedy"] if NEWSVENDOR in planners else [])
    live = any(is_live(p) for p in planners)
    if live:
        plain.append("greedy")
    if "ppo" in planners or "full" in planners or (live and day.gpus >= LARGE_CLUSTER):
        warm_up_learned("ppo", PlanOptions())
        plain.append("ppo")
    for name in dict.fromkeys(plain):
        run_scheduler(name, day, PlanOptions(seed=0))


def play_day(
    day: Scenario, settings: Settings, *, family: str, seed: int, num_jobs: int | None = None
) -> list[dict[str, Any]]:
    """Every sigma, runtime model and planner on one day, each against the hindsight optimum of its realized day.

    Args:
        day: The day as planned: its demand is the forecast, its durations the time limits.
        settings: What to play.
        family: The day's family (its history is drawn from it).
        seed: The day's seed: it draws the actual demand, the actual runtimes and the history's seeds.
        num_jobs: Jobs per past day (None: the family's own number), for days drawn with ``num_jobs``.

    Returns:
        One row per (sigma, runtime model, planner), in that order: plain values, JSON-ready.
    """
    warm_up(day, settings.planners)
    seed_size = day.gpus == FAMILIES[family].gpus if family in FAMILIES else True
    rows = []
    for sigma in settings.sigmas:
        demand = NoiseModel(sigma).draw(day, seed)
        past = past_days(family, day.gpus, seed, settings.history_days, sigma, num_jobs)
        for model in settings.runtimes:
            runtimes = draw_runtimes(day, model, seed)
            realized = realized_day(day, demand, runtimes)
            best = hindsight(realized, settings)
            starts = best.pop("hindsight_starts")
            for name in settings.planners:
                result = play(name, day, realized, runtimes, past, model, seed, settings, starts)
                objective = result["objective"]
                rows.append(
                    {
                        "family": family,
                        "gpus": day.gpus,
                        "seed_size": seed_size,
                        "jobs": len(day.jobs),
                        "seed": seed,
                        "sigma": float(sigma),
                        "runtime": model,
                        **result,
                        **best,
                        "ratio": None if objective is None else share_of(objective, best["reference"]),
                        "ratio_to_bound": None if objective is None else share_of(objective, best["hindsight_bound"]),
                    }
                )
    return rows


def untimed(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows without their timings: equal for two runs of the same days."""
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows]


def day_task(task: Task) -> TaskResult:
    """:func:`play_day` where the task landed (a task function of :mod:`agents.fanout`).

    The task carries the day as a document; ``params``: ``family``, ``num_jobs`` and the settings.
    Executed days that break a rule are named in ``violations``; the rows come back either way.
    """
    started = time.perf_counter()
    day = task.load()
    p = task.params
    settings = Settings.from_dict(p["settings"])
    rows = play_day(day, settings, family=p["family"], seed=task.seed, num_jobs=p.get("num_jobs"))
    bad = [describe(r) for r in rows if not r["valid"]]
    elapsed = time.perf_counter() - started
    return TaskResult(day.name, task.planner, task.seed, violations=bad, elapsed=elapsed, values={"rows": rows})


def describe(row: Mapping[str, Any]) -> str:
    """``family 16 GPUs seed s, sigma x, runtimes m, planner p: why`` for a failed row."""
    why = row.get("error") or "; ".join(row.get("violations") or []) or "invalid"
    return (
        f"{row['family']} {row['gpus']} GPUs seed {row['seed']}, sigma {row['sigma']:g}, {row['runtime']} runtimes, "
        f"{row['planner']}: {why}"
    )


def day_tasks(
    families: Sequence[str], sizes: Sequence[int | None], seeds: Sequence[int], settings: Settings
) -> list[Task]:
    """One task per (family, size, day seed); larger sizes first (the longest tasks, so that none runs last alone)."""
    tasks = []
    for gpus in sorted(sizes, key=lambda g: -(g or 0)):
        for family in families:
            for seed in seeds:
                day = generate(family, seed, gpus=gpus)
                options = PlanOptions(
                    time_limit=settings.hindsight_time_limit, seed=seed, deterministic_time=settings.hindsight_dtime
                )
                params = {"family": family, "gpus": day.gpus, "num_jobs": None, "settings": asdict(settings)}
                tasks.append(Task.make(day, "online", options, **params))
    return tasks


# ----------------------------------------------------------------------------- statistics


def select(rows: Iterable[Mapping[str, Any]], **where: Any) -> list[Mapping[str, Any]]:
    """The scored rows (a ratio) whose fields equal ``where``."""
    return [r for r in rows if r["ratio"] is not None and all(r[k] == v for k, v in where.items())]


def mean_of(rows: Iterable[Mapping[str, Any]], **where: Any) -> float:
    values = [r["ratio"] for r in select(rows, **where)]
    return float(np.mean(values)) if values else float("nan")


def family_means(rows: Sequence[Mapping[str, Any]], **where: Any) -> dict[str, float]:
    """Mean ratio per family (families in first-seen order)."""
    families = dict.fromkeys(r["family"] for r in select(rows, **where))
    return {f: mean_of(rows, family=f, **where) for f in families}


def worst_family(rows: Sequence[Mapping[str, Any]], **where: Any) -> tuple[str, float]:
    means = family_means(rows, **where)
    if not means:
        return "-", float("nan")
    name = min(means, key=lambda f: means[f])
    return name, means[name]


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def fmt_ci(values: Sequence[float]) -> str:
    mean, ci = mean_ci(values)
    if math.isnan(mean):
        return "-"
    return f"{mean:.3f}" if math.isnan(ci) else f"{mean:.3f} ± {ci:.3f}"


def combos(settings: Settings) -> list[tuple[float, str]]:
    return [(s, m) for s in settings.sigmas for m in settings.runtimes]


def label(sigma: float, model: str) -> str:
    return f"σ {sigma:g}, {model}"


# ----------------------------------------------------------------------------- tables


def pooled_tables(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """(1) Mean ratio per planner x (sigma, runtime model), pooled over families; then worst family and day."""
    seed = [r for r in rows if r["seed_size"]]
    cells = combos(settings)
    lines = [
        "| planner | " + " | ".join(label(s, m) for s, m in cells) + " |",
        "| --- | " + " | ".join("---:" for _ in cells) + " |",
    ]
    for p in settings.planners:
        values = []
        for s, m in cells:
            cell = [r["ratio"] for r in select(seed, planner=p, sigma=s, runtime=m)]
            values.append(fmt_ci(cell))
        name = f"**{p}**" if p == LIVE_PLANNER else p
        lines.append(f"| {name} | " + " | ".join(values) + " |")
    lines += [
        "",
        "| σ | runtimes | planner | days | mean ± 95 % CI | worst family (its mean) | worst day (ratio) |",
        "| ---: | --- | --- | ---: | ---: | --- | --- |",
    ]
    for s, m in cells:
        for p in settings.planners:
            cell = select(seed, planner=p, sigma=s, runtime=m)
            if not cell:
                continue
            family, value = worst_family(seed, planner=p, sigma=s, runtime=m)
            low = min(cell, key=lambda r: r["ratio"])
            lines.append(
                f"| {s:g} | {m} | {p} | {len(cell)} | {fmt_ci([r['ratio'] for r in cell])} | {family} ({fmt(value)}) | "
                f"{low['family']} seed {low['seed']} ({fmt(low['ratio'])}) |"
            )
    return lines


def family_tables(rows: Sequence[Mapping[str, Any]], settings: Settings, sigmas: Sequence[float]) -> list[str]:
    """(2) Per family and planner at the given sigmas, each runtime model; the best planner of a row in bold."""
    seed = [r for r in rows if r["seed_size"]]
    families = list(dict.fromkeys(r["family"] for r in seed))
    lines: list[str] = []
    for s in sigmas:
        if s not in settings.sigmas:
            continue
        for m in settings.runtimes:
            lines += [
                f"**σ {s:g}, {m} runtimes** (mean ratio over the family's days)",
                "",
                "| family | GPUs | days | " + " | ".join(settings.planners) + " |",
                "| --- | ---: | ---: | " + " | ".join("---:" for _ in settings.planners) + " |",
            ]
            for f in [*families, None]:
                where = {"sigma": s, "runtime": m} | ({} if f is None else {"family": f})
                means = [mean_of(seed, planner=p, **where) for p in settings.planners]
                top = np.nanmax(means) if not all(math.isnan(x) for x in means) else float("nan")
                cells = [f"**{fmt(x)}**" if abs(x - top) < 5e-4 else fmt(x) for x in means]
                days = len(select(seed, planner=settings.planners[0], **where))
                name = "all families" if f is None else f
                gpus = "-" if f is None else str(FAMILIES[f].gpus if f in FAMILIES else "")
                lines.append(f"| {name} | {gpus} | {days} | " + " | ".join(cells) + " |")
            lines.append("")
    return lines


def size_class(row: Mapping[str, Any]) -> str:
    return "seed sizes (8-64 GPUs)" if row["seed_size"] else f"{row['gpus']} GPUs"


def cycle_target_ms(row: Mapping[str, Any]) -> float | None:
    """The issue's cycle target: 50 ms at seed sizes, 1 s at 1,024 GPUs (none set in between)."""
    if row["seed_size"]:
        return 50.0
    return 1000.0 if row["gpus"] >= 1024 else None


def cycle_tables(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """(3) Cycle times of the live planner's variants (and rolling greedy for scale), per size and per family."""
    shown = [p for p in settings.planners if is_live(p) or p == "greedy"]
    lines = [
        "| size | planner | days | cycles | median ms | p95 ms | max ms | target | cycles over |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    classes = list(dict.fromkeys(size_class(r) for r in sorted(rows, key=lambda r: (not r["seed_size"], r["gpus"]))))
    for c in classes:
        for p in shown:
            group = [r for r in rows if size_class(r) == c and r["planner"] == p and r["cycle_ms"]]
            if not group:
                continue
            ms = np.concatenate([r["cycle_ms"] for r in group])
            target = cycle_target_ms(group[0]) if is_live(p) else None
            over = "-" if target is None else f"{int((ms > target).sum())} of {ms.size}"
            lines.append(
                f"| {c} | {p} | {len(group)} | {ms.size} | {np.median(ms):.1f} | {np.percentile(ms, 95):.1f} | "
                f"{ms.max():.1f} | {'-' if target is None else f'{target:g} ms'} | {over} |"
            )
    lines += [
        "",
        f"Per family at its seed size ({LIVE_PLANNER}):",
        "",
        "| family | GPUs | cycles | median ms | p95 ms | max ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for f in dict.fromkeys(r["family"] for r in rows if r["seed_size"]):
        group = [r for r in rows if r["seed_size"] and r["family"] == f and r["planner"] == LIVE_PLANNER]
        ms = np.concatenate([r["cycle_ms"] for r in group]) if group else np.zeros(0)
        if ms.size:
            lines.append(
                f"| {f} | {group[0]['gpus']} | {ms.size} | {np.median(ms):.1f} | {np.percentile(ms, 95):.1f} | "
                f"{ms.max():.1f} |"
            )
    return lines


DAY_KEY = ("family", "gpus", "seed", "sigma", "runtime")
"""What names a realized day: two rows with the same key met the same day (``realized_digest``)."""
DAY_MARGIN = 0.02
DAY_FLOOR = 0.85
"""No day of the live planner below this share of its hindsight optimum (the starved days' target)."""
"""A day counts as below (above) rolling greedy when its ratio is more than this much of the hindsight optimum under
(over) greedy's on the same day."""


def paired_rows(
    rows: Sequence[Mapping[str, Any]], planner: str, other: str, **where: Any
) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(planner's row, other's row) on the same realized days (:data:`DAY_KEY`), both scored."""
    theirs = {tuple(r[k] for k in DAY_KEY): r for r in select(rows, planner=other, **where)}
    return [
        (r, theirs[tuple(r[k] for k in DAY_KEY)])
        for r in select(rows, planner=planner, **where)
        if tuple(r[k] for k in DAY_KEY) in theirs
    ]


def paired(rows: Sequence[Mapping[str, Any]], planner: str, other: str, **where: Any) -> list[tuple[float, float]]:
    """(planner's ratio, other's ratio) on the same realized days."""
    return [(a["ratio"], b["ratio"]) for a, b in paired_rows(rows, planner, other, **where)]


def day_name(row: Mapping[str, Any]) -> str:
    """``family seed s, σ x, runtime`` (and the size where it is not the family's own)."""
    size = "" if row.get("seed_size", True) else f" {row['gpus']} GPUs"
    return f"{row['family']}{size} seed {row['seed']}, σ {row['sigma']:g}, {row['runtime']}"


@dataclass(frozen=True)
class AgainstGreedy:
    """A planner against rolling greedy day by day: its ratio less greedy's on each shared realized day.

    Attributes:
        days: Realized days both played (scored).
        mean: Mean difference (NaN without days).
        below: Days more than :data:`DAY_MARGIN` below greedy.
        above: Days more than :data:`DAY_MARGIN` above greedy.
        worst: The smallest difference: the worst day's loss when negative (NaN without days).
        worst_day: That day's row (None without days).
    """

    days: int
    mean: float
    below: int
    above: int
    worst: float
    worst_day: Mapping[str, Any] | None

    def worst_text(self) -> str:
        """``family seed s, σ x, runtime (-0.054)``, or ``-`` without days."""
        return "-" if self.worst_day is None else f"{day_name(self.worst_day)} ({self.worst:+.3f})"


def against_greedy(
    rows: Sequence[Mapping[str, Any]], planner: str, reference: str = "greedy", **where: Any
) -> AgainstGreedy:
    """``planner`` against ``reference`` (rolling greedy) on the same realized days of ``rows`` matching ``where``."""
    pairs = paired_rows(rows, planner, reference, **where)
    if not pairs:
        return AgainstGreedy(0, float("nan"), 0, 0, float("nan"), None)
    diffs = [a["ratio"] - b["ratio"] for a, b in pairs]
    k = int(np.argmin(diffs))
    return AgainstGreedy(
        days=len(pairs),
        mean=float(np.mean(diffs)),
        below=sum(d < -DAY_MARGIN - EPS for d in diffs),
        above=sum(d > DAY_MARGIN + EPS for d in diffs),
        worst=float(diffs[k]),
        worst_day=pairs[k][0],
    )


def late_tables(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """(6) Late starts: jobs that started more than LATE_SLACK slots after hindsight, or never, with their causes."""
    seed = [r for r in rows if r["seed_size"] and "late" in r]
    planners = [p for p in settings.planners if select(seed, planner=p)]
    lines = [
        f"A job is late when it starts more than {LATE_SLACK} slots after its start in the hindsight plan of the same "
        "realized day, or never though hindsight starts it. The cause is read from the decision traces "
        "(`agents.simulator.decisions`): the first cycle that moved its planned start later, and what changed there.",
        "",
        "| planner | days | days with a late job | late jobs | " + " | ".join(CAUSES) + " | departures / cycles |",
        "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in CAUSES) + " | ---: |",
    ]
    for p in planners:
        group = select(seed, planner=p)
        causes = Counter(x["cause"] for r in group for x in r["late"])
        cycles = sum(r["replans"] for r in group)
        departures = sum(r.get("departures", 0) for r in group)
        lines.append(
            f"| {p} | {len(group)} | {sum(bool(r['late']) for r in group)} | {sum(causes.values())} | "
            + " | ".join(str(causes.get(c, 0)) for c in CAUSES)
            + f" | {departures} / {cycles} |"
        )
    days = [r for r in select(seed, planner=LIVE_PLANNER) if r["late"]]
    if days:
        lines += ["", f"Every day on which `{LIVE_PLANNER}` started a job late (its ratio to hindsight):", ""]
        for r in sorted(days, key=lambda r: r["ratio"] if r["ratio"] is not None else -1.0):
            jobs = "; ".join(x["line"] for x in r["late"])
            lines.append(f"- {day_name(r)}, {fmt(r['ratio'])}: {jobs}")
    margins = Counter()
    for r in select(seed, planner=LIVE_PLANNER):
        margins.update(r.get("margins", {}))
    if margins:
        total = sum(margins.values())
        lines += [
            "",
            f"The margins `{LIVE_PLANNER}` planned the apps at, over its {total} cycles (the base forecast chosen "
            "by the backtest, or a hedge candidate taken): "
            + ", ".join(f"{m} {n / total:.1%}" for m, n in margins.most_common()),
        ]
    return lines


def greedy_table(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """(4) Each planner against rolling greedy on the same realized days: pooled, then per (σ, runtime model)."""
    seed = [r for r in rows if r["seed_size"]]
    others = [p for p in settings.planners if p != "greedy"]
    if "greedy" not in settings.planners or not others:
        return ["(greedy and another planner were not both run)"]
    lines = [
        "Each planner's ratio less rolling greedy's on the same realized day (family, seed, σ, runtime model); "
        f"below / above: days more than {DAY_MARGIN:g} of the hindsight optimum under / over greedy; the worst day "
        "is the one with the smallest difference.",
        "",
        f"| σ | runtimes | planner | days | mean difference | days > {DAY_MARGIN:g} below | "
        f"days > {DAY_MARGIN:g} above | worst day (difference) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    cells: list[tuple[str, str, dict[str, Any]]] = [("all", "all", {})]
    cells += [(f"{s:g}", m, {"sigma": s, "runtime": m}) for s, m in combos(settings)]
    for sigma, model, where in cells:
        for p in others:
            g = against_greedy(seed, p, **where)
            if not g.days:
                continue
            name = f"**{p}**" if p == LIVE_PLANNER else p
            lines.append(
                f"| {sigma} | {model} | {name} | {g.days} | {g.mean:+.3f} | {g.below} | {g.above} | {g.worst_text()} |"
            )
    return lines


def wins_table(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """(4) Days each planner beat online greedy, and online backfill, per family (all sigmas and runtimes)."""
    seed = [r for r in rows if r["seed_size"]]
    refs = [p for p in ("greedy", "backfill") if p in settings.planners]
    if not refs:
        return ["(neither greedy nor backfill was run)"]
    families = list(dict.fromkeys(r["family"] for r in seed))
    lines = [
        "A day is one realized day (family, seed, σ, runtime model); each cell: days won / days, ties in brackets.",
        "",
    ]
    for ref in refs:
        others = [p for p in settings.planners if p != ref]
        lines += [
            f"**Against online {ref}**",
            "",
            "| family | " + " | ".join(others) + " |",
            "| --- | " + " | ".join("---:" for _ in others) + " |",
        ]
        for f in [*families, None]:
            where = {} if f is None else {"family": f}
            cells = []
            for p in others:
                pairs = paired(seed, p, ref, **where)
                won = sum(a > b + EPS for a, b in pairs)
                tied = sum(abs(a - b) <= EPS for a, b in pairs)
                cells.append(f"{won}/{len(pairs)}" + (f" ({tied})" if tied else ""))
            lines.append(f"| {'all families' if f is None else f} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def limit_pairs(rows: Sequence[Mapping[str, Any]], planner: str, **where: Any) -> tuple[int, float, float]:
    """(days, the planner's mean, its oracle twin's mean) over the realized days both played; NaN means without."""
    pairs = paired(rows, planner, f"{planner}-oracle", **where)
    if not pairs:
        return 0, float("nan"), float("nan")
    ours, told = zip(*pairs, strict=True)
    return len(pairs), float(np.mean(ours)), float(np.mean(told))


def limit_table(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """(5) Each live variant against its information limit (its ``-oracle`` twin), per (σ, runtime model)."""
    seed = [r for r in rows if r["seed_size"]]
    variants = [p for p in settings.planners if p in LIVE and f"{p}-oracle" in settings.planners]
    if not variants:
        return []
    lines = [
        "Each live variant's mean beside its `-oracle` twin's on the same realized days: the same planner told the "
        "actual demand of the whole day (its forecaster returns the realized demand of the slots ahead; its "
        f"futures take that demand as it is). The line to reach: the information limit less one point "
        f"({ONE_POINT:g} of the hindsight optimum).",
        "",
        "| σ | runtimes | planner | days | mean | told the day | information limit less one point | reached |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for s, m in combos(settings):
        for p in variants:
            days, mean, told = limit_pairs(seed, p, sigma=s, runtime=m)
            if not days:
                continue
            name = f"**{p}**" if p == LIVE_PLANNER else p
            reached = "yes" if mean >= told - ONE_POINT - EPS else "no"
            lines.append(
                f"| {s:g} | {m} | {name} | {days} | {fmt(mean)} | {fmt(told)} | {fmt(told - ONE_POINT)} | {reached} |"
            )
    return lines


def large_tables(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """Larger sizes: mean ratio to the best known (CP-SAT's or hindsight greedy's), and what CP-SAT proved."""
    large = [r for r in rows if not r["seed_size"]]
    if not large:
        return []
    lines = [
        "| GPUs | family | days | " + " | ".join(settings.planners) + " | hindsight proven | CP-SAT found none | "
        "mean best known / bound |",
        "| ---: | --- | ---: | " + " | ".join("---:" for _ in settings.planners) + " | ---: | ---: | ---: |",
    ]
    for g in sorted({r["gpus"] for r in large}):
        for f in dict.fromkeys(r["family"] for r in large if r["gpus"] == g):
            group = [r for r in large if r["gpus"] == g and r["family"] == f]
            refs = {(r["seed"], r["sigma"], r["runtime"]): r for r in group}.values()
            proven = sum(r["proven"] for r in refs)
            none = sum(r["hindsight_status"] == "unknown" for r in refs)
            gaps = [r["reference"] / r["hindsight_bound"] for r in refs if r["hindsight_bound"]]
            means = [fmt(mean_of(group, planner=p)) for p in settings.planners]
            lines.append(
                f"| {g} | {f} | {len(refs)} | " + " | ".join(means) + f" | {proven}/{len(refs)} | {none} | "
                f"{fmt(float(np.mean(gaps)) if gaps else None)} |"
            )
    return lines


# ----------------------------------------------------------------------------- targets


@dataclass
class Target:
    """One target of the issue: what it asks, what was measured, and whether it is met (None: not measured)."""

    goal: str
    measured: str
    met: bool | None

    def line(self) -> str:
        verdict = "not measured" if self.met is None else ("**met**" if self.met else "**missed**")
        return f"| {self.goal} | {self.measured} | {verdict} |"


def quality_targets(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[Target]:
    """Mean and worst family of the live planner at sigma 0 and 0.3, each runtime model."""
    seed = [r for r in rows if r["seed_size"]]
    out = []
    goals = {(0.0, "exact"): 0.97, (0.0, "trace"): 0.97, (0.3, "exact"): 0.93, (0.3, "trace"): 0.95}
    for sigma, family_goal in ((0.0, 0.93), (0.3, 0.88)):
        for m in settings.runtimes:
            mean_goal = goals.get((sigma, m), 0.93)
            where = {"planner": LIVE_PLANNER, "sigma": sigma, "runtime": m}
            if sigma not in settings.sigmas or not select(seed, **where):
                out.append(Target(f"σ {sigma:g}, {m} runtimes: mean ≥ {mean_goal}", "not run", None))
                continue
            mean = mean_of(seed, **where)
            out.append(Target(f"σ {sigma:g}, {m} runtimes: mean ≥ {mean_goal}", fmt(mean), mean >= mean_goal))
            family, low = worst_family(seed, **where)
            below = [f for f, x in family_means(seed, **where).items() if x < family_goal]
            out.append(
                Target(
                    f"σ {sigma:g}, {m} runtimes: every family ≥ {family_goal}",
                    f"worst {family} {fmt(low)}" + (f"; below: {', '.join(below)}" if below else ""),
                    low >= family_goal,
                )
            )
            days = select(seed, **where)
            low_days = [r for r in days if r["ratio"] is not None and r["ratio"] < DAY_FLOOR]
            worst = min(days, key=lambda r: r["ratio"] if r["ratio"] is not None else -1.0)
            out.append(
                Target(
                    f"σ {sigma:g}, {m} runtimes: every day ≥ {DAY_FLOOR}",
                    f"{len(low_days)} of {len(days)} days below; worst {day_name(worst)} {fmt(worst['ratio'])}",
                    not low_days,
                )
            )
    return out


def above_targets(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[Target]:
    """Every family's mean above online greedy's and online backfill's (pooled over sigmas and runtimes)."""
    seed = [r for r in rows if r["seed_size"]]
    out = []
    for ref in ("greedy", "backfill"):
        goal = f"every family above online {ref} (mean over all its days)"
        if ref not in settings.planners or LIVE_PLANNER not in settings.planners:
            out.append(Target(goal, f"{ref} not run", None))
            continue
        gaps = {}
        for f in family_means(seed, planner=LIVE_PLANNER):
            pairs = paired(seed, LIVE_PLANNER, ref, family=f)
            gaps[f] = float(np.mean([a - b for a, b in pairs])) if pairs else float("nan")
        worst = min(gaps, key=lambda f: gaps[f])
        cells = [(s, m) for s, m in combos(settings)]
        above = sum(
            mean_of(seed, planner=LIVE_PLANNER, family=f, sigma=s, runtime=m)
            > mean_of(seed, planner=ref, family=f, sigma=s, runtime=m) + EPS
            for f in gaps
            for s, m in cells
        )
        measured = (
            f"{sum(g > EPS for g in gaps.values())} of {len(gaps)} families above; smallest margin {worst} "
            f"{gaps[worst]:+.3f}; above in {above} of {len(gaps) * len(cells)} (family, σ, runtime) cells"
        )
        out.append(Target(goal, measured, all(g > EPS for g in gaps.values())))
    return out


def cycle_targets(rows: Sequence[Mapping[str, Any]]) -> list[Target]:
    """The live planner's cycle: p95 <= 50 ms and max <= 150 ms at seed sizes, max <= 1 s at 1,024 GPUs."""
    out = []
    seed_ms = [r["cycle_ms"] for r in rows if r["seed_size"] and r["planner"] == LIVE_PLANNER and r["cycle_ms"]]
    if seed_ms:
        p95 = float(np.percentile(np.concatenate(seed_ms), 95))
        out.append(Target("a cycle's p95 ≤ 50 ms at seed sizes", f"p95 {p95:.1f} ms", p95 <= 50.0))
    for goal, pick, limit in (
        ("a cycle ≤ 150 ms at seed sizes", lambda r: r["seed_size"], 150.0),
        ("a cycle ≤ 1 s at 1,024 GPUs", lambda r: not r["seed_size"] and r["gpus"] == 1024, 1000.0),
    ):
        group = [r for r in rows if pick(r) and r["planner"] == LIVE_PLANNER and r["cycle_ms"]]
        if not group:
            out.append(Target(goal, "not run", None))
            continue
        ms = np.concatenate([r["cycle_ms"] for r in group])
        over = int((ms > limit).sum())
        measured = (
            f"max {ms.max():.1f} ms, p95 {np.percentile(ms, 95):.1f}, median {np.median(ms):.1f}; "
            f"{over} of {ms.size} cycles over"
        )
        out.append(Target(goal, measured, over == 0))
    return out


def greedy_day_targets(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[Target]:
    """No day more than :data:`DAY_MARGIN` below rolling greedy: the live planner with history and without."""
    seed = [r for r in rows if r["seed_size"]]
    out = []
    pairs = [(LIVE_PLANNER, "with history", "greedy"), ("anticipate-nohist", "without history", "greedy")]
    pairs.append((LIVE_PLANNER, "with history", NEWSVENDOR))
    for p, what, ref in pairs:
        goal = f"`{p}` ({what}): no day more than {DAY_MARGIN:g} below {'rolling greedy' if ref == 'greedy' else ref}"
        if p not in settings.planners or ref not in settings.planners:
            out.append(Target(goal, f"{p if ref in settings.planners else ref} not run", None))
            continue
        g = against_greedy(seed, p, reference=ref)
        if not g.days:
            out.append(Target(goal, "no scored days", None))
            continue
        measured = (
            f"{g.below} of {g.days} days more than {DAY_MARGIN:g} below ({g.above} above); worst day "
            f"{g.worst_text()}; mean difference {g.mean:+.3f}"
        )
        out.append(Target(goal, measured, g.below == 0))
    return out


def nohist_target(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[Target]:
    """Without history never worse than rolling greedy in any family's mean per (σ, runtime)."""
    seed = [r for r in rows if r["seed_size"]]
    goal = "without history never worse than rolling greedy (each family's mean per σ and runtime)"
    if "anticipate-nohist" not in settings.planners or "greedy" not in settings.planners:
        return [Target(goal, "not run", None)]
    cells = [
        (f, s, m)
        for f in family_means(seed, planner="greedy")
        for s, m in combos(settings)
        if mean_of(seed, planner="anticipate-nohist", family=f, sigma=s, runtime=m)
        < mean_of(seed, planner="greedy", family=f, sigma=s, runtime=m) - EPS
    ]
    return [
        Target(
            goal,
            f"worse in {len(cells)} of {len(family_means(seed, planner='greedy')) * len(combos(settings))} cells"
            + (": " + ", ".join(f"{f} σ {s:g} {m}" for f, s, m in cells[:6]) if cells else ""),
            not cells,
        ),
    ]


def moonshot_targets(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[Target]:
    """The moonshot at σ 0.3, each runtime model: the live planner's mean ≥ 0.94, or its information limit less a point.

    The information limit is the mean of its ``-oracle`` twin on the same days (``--oracle``); without it the
    target is met by a mean ≥ 0.94 and not measured otherwise.
    """
    seed = [r for r in rows if r["seed_size"]]
    sigma, goal_mean = 0.3, 0.94
    out = []
    for m in settings.runtimes:
        goal = f"moonshot: σ {sigma:g}, {m} runtimes: mean ≥ {goal_mean} or the information limit less one point"
        where = {"planner": LIVE_PLANNER, "sigma": sigma, "runtime": m}
        if sigma not in settings.sigmas or not select(seed, **where):
            out.append(Target(goal, "not run", None))
            continue
        mean = mean_of(seed, **where)
        days, ours, told = limit_pairs(seed, LIVE_PLANNER, sigma=sigma, runtime=m)
        if not days:
            measured = f"mean {fmt(mean)}; information limit not run (--oracle)"
            out.append(Target(goal, measured, True if mean >= goal_mean else None))
            continue
        measured = (
            f"mean {fmt(mean)}; told the day {fmt(told)} (less one point {fmt(told - ONE_POINT)}; "
            f"{days} days both played, the live planner {fmt(ours)} on them)"
        )
        out.append(Target(goal, measured, mean >= goal_mean or ours >= told - ONE_POINT - EPS))
    return out


def targets(rows: Sequence[Mapping[str, Any]], settings: Settings) -> list[Target]:
    if LIVE_PLANNER not in settings.planners:
        return [Target("the issue's targets", f"{LIVE_PLANNER} not run", None)]
    return [
        *quality_targets(rows, settings),
        *above_targets(rows, settings),
        *cycle_targets(rows),
        *greedy_day_targets(rows, settings),
        *nohist_target(rows, settings),
        *moonshot_targets(rows, settings),
    ]


# ----------------------------------------------------------------------------- the figure

LIVE_COLOURS = {
    "anticipate": "#d62728",
    "anticipate-nohist": "#f4a3a3",
    "anticipate-point": "#e377c2",
    "anticipate-fixed": "#bcbd22",
    "anticipate-record": "#ff9896",
    "anticipate-backtest": "#c5b0d5",
    "anticipate-fast": "#7f7f7f",
    "anticipate-no-newsvendor": "#1f77b4",
    "anticipate-today-margin": "#aec7e8",
    "anticipate-newsvendor": "#c49c94",
    "anticipate-half-margin": "#ffbb78",
    "anticipate-bar-1": "#98df8a",
    "anticipate-no-hedges": "#dbdb8d",
    "anticipate-no-future-plans": "#9edae5",
    "anticipate-record-fast": "#f7b6d2",
    "anticipate-residual": "#8c564b",
    "anticipate-histfc": "#9467bd",
    "anticipate-consensus": "#ff7f0e",
    "anticipate-base": "#2ca02c",
    "anticipate-oracle": "#7f0000",
    "anticipate-nohist-oracle": "#c76b6b",
    "anticipate-histfc-oracle": "#4b2a6b",
    "anticipate-consensus-oracle": "#a65200",
    NEWSVENDOR: "#17becf",
}
"""The live variants: the live planner in strong red, without history pale, with the history's forecaster purple,
its base decision green; their oracle twins darker (drawn dotted)."""


def _darker(colour: str, share: float = 0.55) -> str:
    """A hex colour ``share`` of the way to black."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{int(c * (1 - share)):02x}" for c in rgb)


for _name in LIVE:
    LIVE_COLOURS.setdefault(f"{_name}-oracle", _darker(LIVE_COLOURS[_name]))
_STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def plot(rows: Sequence[Mapping[str, Any]], settings: Settings) -> Figure:
    """Mean ratio to hindsight against sigma per planner (one panel per runtime model), and per family at σ 0.3."""
    plt = pyplot()
    seed = [r for r in rows if r["seed_size"]]
    planners = [p for p in settings.planners if select(seed, planner=p)]
    colours = scheduler_colours([p for p in planners if not is_live(p)]) | LIVE_COLOURS
    models = list(settings.runtimes)
    bar_sigma = 0.3 if 0.3 in settings.sigmas else max(settings.sigmas)
    families = list(dict.fromkeys(r["family"] for r in seed))
    bars = [
        mean_of(seed, planner=p, family=f, sigma=bar_sigma, runtime=m)
        for p in planners
        for f in families
        for m in models
    ]
    low = min((x for x in bars if not math.isnan(x)), default=0.5)  # the bars' scale: the lowest family mean
    with plt.rc_context(_STYLE):
        fig = plt.figure(figsize=(7.5 * len(models), 9.5), layout="constrained")
        grid = fig.add_gridspec(2, len(models), height_ratios=(1, 1.05))
        first = None
        for j, m in enumerate(models):
            ax = fig.add_subplot(grid[0, j], sharey=first)
            first = first or ax
            spread = 0.012 * (max(settings.sigmas) - min(settings.sigmas) or 1.0)  # dodge the error bars apart
            for i, p in enumerate(planners):
                dodge = (i - (len(planners) - 1) / 2) * spread
                xs, ys, cis = [], [], []
                for s in settings.sigmas:
                    mean, ci = mean_ci(r["ratio"] for r in select(seed, planner=p, sigma=s, runtime=m))
                    if not math.isnan(mean):
                        xs.append(s + dodge)
                        ys.append(mean)
                        cis.append(0.0 if math.isnan(ci) else ci)
                live = is_live(p)
                ax.errorbar(
                    xs, ys, yerr=cis, label=p, color=colours[p], marker="o" if live else "s", markersize=5,
                    lw=2.4 if p == LIVE_PLANNER else 1.5, ls=(":" if p in ORACLE else "-") if live else "--",
                    capsize=3, alpha=0.95,
                )  # fmt: skip
            goals = [(s, g) for s, g in ((0.0, 0.97), (0.3, 0.92)) if s in settings.sigmas]
            if goals:
                ax.scatter(*zip(*goals, strict=True), marker="_", s=700, lw=2.5, color="black", zorder=5,
                           label="target for the mean")  # fmt: skip
            ax.set_xticks(list(settings.sigmas))
            ax.set_xlabel("forecast error σ (relative SD of the real-time demand)")
            ax.set_ylabel("executed objective / hindsight optimum")
            what = "jobs run to their time limit" if m == "exact" else "runtimes drawn from the KTH SP2 trace"
            ax.set_title(f"{m} runtimes ({what})")
            ax.grid(alpha=0.3)
        for j, m in enumerate(models):
            ax = fig.add_subplot(grid[1, j])
            x = np.arange(len(families))
            width = 0.8 / max(1, len(planners))
            for i, p in enumerate(planners):
                means = [mean_of(seed, planner=p, family=f, sigma=bar_sigma, runtime=m) for f in families]
                ax.bar(x - 0.4 + width * (i + 0.5), means, width, color=colours[p], label=p,
                       edgecolor="white", linewidth=0.4)  # fmt: skip
            if bar_sigma == 0.3:
                ax.axhline(0.85, color="black", ls=":", lw=1.2, label="target for every family (σ 0.3)")
            ax.set_xticks(x, families, rotation=15, ha="right")
            ax.set_ylim(max(0.0, min(low, 1.0) - 0.05), 1.01)
            ax.set_ylabel("mean executed / hindsight optimum")
            ax.set_title(f"per family at σ {bar_sigma:g}, {m} runtimes")
            ax.grid(axis="y", alpha=0.3)
        found = dict(zip(*reversed(first.get_legend_handles_labels()), strict=True)) if first else {}
        found |= {lab: h for h, lab in zip(*fig.axes[-1].get_legend_handles_labels(), strict=True) if "every" in lab}
        labels = [*(p for p in planners if p in found), *(lab for lab in found if lab not in planners)]
        handles = [found[lab] for lab in labels]
        fig.legend(handles, labels, loc="outside lower center", ncol=min(5, len(labels)), frameon=False)
        days = len({(r["family"], r["seed"]) for r in seed})
        fig.suptitle(
            f"Live days against their hindsight optima: {len(families)} families, {days} family-days at seed sizes, "
            f"jobs known at release, re-planned every slot (mean ± 95 % CI)",
            fontsize=12,
        )
    return fig


# ----------------------------------------------------------------------------- the report


def machine() -> str:
    load = "n/a" if not hasattr(os, "getloadavg") else ", ".join(f"{x:.2f}" for x in os.getloadavg())
    cpu = platform.processor() or platform.machine()
    return (
        f"{platform.platform()} ({cpu}), Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load}"
    )


def _run_paragraph(
    rows: Sequence[Mapping[str, Any]],
    settings: Settings,
    families: Sequence[str],
    seeds: Sequence[int],
    sizes: Sequence[int | None],
) -> str:
    """The report's paragraph on what was played: the days, the forecast errors, and every planner."""
    seed_days = len({(r["family"], r["seed"]) for r in rows if r["seed_size"]})
    larger = [g for g in sizes if g is not None]
    return (
        f"Families: {', '.join(families)}; each at its seed size"
        + (f" and at {', '.join(map(str, larger))} GPUs" if larger else "")
        + f"; {len(seeds)} day{'s' if len(seeds) != 1 else ''} each (seeds {seeds[0]}..{seeds[-1]}), "
        f"{seed_days} days at seed sizes. "
        f"Forecast errors σ {', '.join(f'{s:g}' for s in settings.sigmas)}; runtime models "
        f"{', '.join(settings.runtimes)}. Every planner plays the same realized day (the actual demand "
        "`NoiseModel(σ).draw(day, seed)` and the actual runtimes `draw_runtimes(day, model, seed)`), re-planning "
        "every slot, each job known from its release, a re-plan whenever a job ends early. Plain schedulers "
        "with today's `Corrector()`; `greedy-newsvendor`: rolling greedy planning each app at the corrected "
        "forecast plus the past days' error quantile at the newsvendor ratio penalty / (penalty + worth); the "
        "live planner `anticipate` (decisions by expected value over sampled futures carrying arrivals and "
        f"demand, {settings.samples} futures first and more where candidates are close, the hedge both ways "
        "among its candidates) fitted from "
        f"{settings.history_days} past days of the same family (other seeds, their demand as it happened at "
        "the same σ); "
        "`anticipate-nohist`: the same without history; `anticipate-residual`: with the forecast's margin "
        "measured from what the level correction leaves; `anticipate-backtest`: with the forecast and margin that "
        "cost least on the past days played as if live; `anticipate-histfc`: with the demand forecaster fitted "
        "from the past days; `anticipate-consensus`: the former vote over "
        "futures of arrivals, with the history. The live planners see only the time limits, "
        "as shipped (sampling runtimes in the futures measured worse: docs/rolling.md)."
        + (
            " `-oracle` twins (the information limit): the same variant told the actual demand of the whole day."
            if any(p in ORACLE for p in settings.planners)
            else ""
        )
    )


def _score_paragraph(rows: Sequence[Mapping[str, Any]], settings: Settings) -> str:
    """The report's paragraph on the score: the hindsight optimum, and how many CP-SAT proved at seed sizes."""
    refs = list({(r["family"], r["gpus"], r["seed"], r["sigma"], r["runtime"]): r for r in rows}.values())
    proven = sum(r["proven"] for r in refs if r["seed_size"])
    seed_refs = sum(r["seed_size"] for r in refs)
    dtime = "none" if settings.hindsight_dtime is None else f"{settings.hindsight_dtime:g}"
    return (
        "Score: the executed objective over the hindsight optimum of the realized day: CP-SAT "
        f"(one worker, seed 0, {dtime} deterministic time, {settings.hindsight_time_limit:g} s wall guard) on the "
        "day with every job, runtime and demand known from slot 0, or greedy's hindsight plan where that is "
        f"worth more. At seed sizes CP-SAT proved {proven} of {seed_refs} hindsight optima."
    )


def _closing_sections(
    rows: Sequence[Mapping[str, Any]],
    settings: Settings,
    bad: Sequence[Mapping[str, Any]],
    failed_tasks: Sequence[str],
) -> list[str]:
    """The report's last sections: late starts, the information limit and larger sizes (where measured), failures."""
    doc = ["## 6. Late starts and their causes", "", *late_tables(rows, settings), ""]
    limits = limit_table(rows, settings)
    if limits:
        doc += ["## 5. The information limit", "", *limits, ""]
    large = large_tables(rows, settings)
    if large:
        doc += [
            "## Larger sizes",
            "",
            "Mean ratio to the best known objective of the realized day (CP-SAT within its limits, or greedy "
            "with hindsight where worth more), over every σ and runtime model; the last columns say how often "
            "CP-SAT proved its plan optimal, how often it found none, and the best known over CP-SAT's bound.",
            "",
            *large,
            "",
        ]
    if bad or failed_tasks:
        doc += ["## Failures", ""]
        doc += [f"- task failed: {line}" for line in failed_tasks]
        doc += [f"- {describe(r)}" for r in bad]
        doc.append("")
    return doc


def report(
    rows: Sequence[Mapping[str, Any]],
    settings: Settings,
    *,
    command: str,
    started_on: str,
    backend: str,
    wall_s: float,
    failed_tasks: Sequence[str],
    families: Sequence[str],
    seeds: Sequence[int],
    sizes: Sequence[int | None],
    figure: str = "online.png",
) -> tuple[str, list[Target]]:
    """The Markdown report (its figure: the file ``figure`` beside it) and the targets."""
    bad = [r for r in rows if not r["valid"]]
    goals = targets(rows, settings)
    doc = [
        "# The live regime against hindsight",
        "",
        f"- Command: `{command}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; commit {commit()}",
        f"- Machine: {started_on} (at the start); {machine()} (at the end)",
        f"- Tasks: {backend}; {wall_s / 60:.1f} min wall.",
        "",
        _run_paragraph(rows, settings, families, seeds, sizes),
        "",
        _score_paragraph(rows, settings),
        "",
        (
            f"**Validation: every one of the {len(rows)} executed days passed the validator against its realized day.**"
            if not bad
            else f"**VALIDATION FAILURES: {len(bad)} of {len(rows)} executed days** (a bug; listed at the end)."
        ),
        "",
        "## Targets",
        "",
        f"The live planner `{LIVE_PLANNER}` (jobs at submission, with history) at seed sizes, unless stated.",
        "",
        "| target | measured | verdict |",
        "| --- | --- | --- |",
        *(g.line() for g in goals),
        "",
        f"![Mean ratio to hindsight against σ, and per family]({figure})",
        "",
        "## 1. Mean ratio to the hindsight optimum, pooled over families (seed sizes)",
        "",
        "Mean ± 95 % CI (t) over the family x day pairs of each cell.",
        "",
        *pooled_tables(rows, settings),
        "",
        "## 2. Per family",
        "",
        *family_tables(rows, settings, (0.0, 0.3)),
        "## 3. Cycle times of the live planner",
        "",
        "The rolling loop's time per cycle (`decide`, every re-plan of every day, all σ and runtime models), in "
        "the task's process, beside another task when run with `--parallel`; each planner warmed up first.",
        "",
        *cycle_tables(rows, settings),
        "",
        "## 4. Day by day against rolling greedy",
        "",
        *greedy_table(rows, settings),
        "",
        "Days won against online greedy and online backfill, per family:",
        "",
        *wins_table(rows, settings),
        "",
    ]
    doc += _closing_sections(rows, settings, bad, failed_tasks)
    return "\n".join(doc), goals


# ----------------------------------------------------------------------------- command line


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated GPU counts, got {text!r}") from None
    if any(g < 1 or g % 8 for g in values):
        raise argparse.ArgumentTypeError(f"expected multiples of 8 GPUs, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", type=parse_names, default=tuple(FAMILIES), help="comma-separated (all seven)")
    parser.add_argument("--days", type=int_at_least(1), default=5, metavar="N", help="days per family (5)")
    parser.add_argument("--seed-base", type=int_at_least(0), default=70000, metavar="S", help="first day's seed")
    parser.add_argument("--history-days", type=int_at_least(0), default=8, metavar="H", help="past days (8)")
    parser.add_argument("--sigmas", type=parse_floats, default=SIGMAS, help="forecast errors (0,0.2,0.3,0.4)")
    parser.add_argument("--runtimes", type=parse_names, default=RUNTIMES, help="runtime models (exact,trace)")
    parser.add_argument("--planners", type=parse_names, default=None, help="default: " + ",".join(default_planners()))
    parser.add_argument("--sizes", type=parse_sizes, default=(), help="larger sizes too, e.g. 128,256,1024")
    parser.add_argument("--large-families", type=parse_names, default=None, help="families at --sizes (all)")
    parser.add_argument("--large-days", type=int_at_least(1), default=None, metavar="N", help="days at --sizes")
    parser.add_argument("--samples", type=int_at_least(1), default=DEFAULT_SAMPLES, help="live planner's futures")
    parser.add_argument("--hindsight-time-limit", type=float, default=10.0, metavar="S", help="wall guard (10)")
    parser.add_argument(
        "--hindsight-dtime", type=float, default=2.0, metavar="D", help="deterministic time, 0: none (2)"
    )
    parser.add_argument("--full-time-limit", type=float, default=0.3, metavar="S", help="full's seconds per re-plan")
    parser.add_argument(
        "--oracle", action="store_true", help="add each selected live variant's -oracle twin (told the day's demand)"
    )
    parser.add_argument("--quick", action="store_true", help="2 families x 2 days, σ 0 and 0.3")
    parser.add_argument(
        "--resume", action="store_true", help="keep the days a killed run finished (STEM.partial.jsonl)"
    )
    parser.add_argument("--out", type=Path, default=None, metavar="STEM", help=f"output stem ({OUT.relative_to(ROOT)})")
    add_fanout_options(parser)
    return parser


def chosen_planners(args: argparse.Namespace) -> tuple[str, ...]:
    """``--planners`` (or :func:`default_planners`); with ``--oracle``, the live variants' oracle twins after them."""
    planners = tuple(args.planners or default_planners())
    return with_oracles(planners) if args.oracle else planners


def check_planners(planners: Sequence[str]) -> None:
    here = set(available_schedulers())
    unknown = [p for p in planners if not is_live(p) and p != NEWSVENDOR and (p not in PLAIN or p not in here)]
    if unknown or not planners:
        known = ", ".join([*(p for p in PLAIN if p in here), NEWSVENDOR, *LIVE, *ORACLE])
        raise FanoutError(f"--planners: unknown or unavailable {unknown or list(planners)} (expected: {known})")


def task_key(task: Task) -> tuple[str, int, int]:
    """(family, GPUs, day seed): what names a day's task in the partial file."""
    return (task.params["family"], int(task.params["gpus"]), int(task.seed))


def read_partial(path: Path, settings: Settings) -> dict[tuple[str, int, int], list[dict[str, Any]]]:
    """The rows of the days a killed run finished (``--resume``), by task key; refused if played otherwise.

    Raises:
        FanoutError: A day of the file was played with other settings.
    """
    done: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    if not path.exists():
        return done
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if Settings.from_dict(record["settings"]) != settings:
            raise FanoutError(f"--resume: {path} holds days played with other settings; remove it or run without")
        done[tuple(record["key"])] = record["rows"]
    return done


def progress(
    total: int, started: float, tasks: Sequence[Task], partial: Path, settings: Settings
) -> Callable[[int, TaskResult], None]:
    """Per finished task: a line on stderr (the day, its time, a few ratios), and its rows kept in ``partial``."""
    done = [0]

    def report_one(index: int, result: TaskResult) -> None:
        done[0] += 1
        if result.error is None:  # kept at once: a run killed later is resumed from here (--resume)
            record = {"key": task_key(tasks[index]), "settings": asdict(settings), "rows": result.values["rows"]}
            with partial.open("a") as file:
                file.write(json.dumps(record, separators=(",", ":")) + "\n")
        rows = result.values.get("rows", [])
        means = []
        for p in ("greedy", "backfill", LIVE_PLANNER):
            values = [r["ratio"] for r in rows if r["planner"] == p and r["ratio"] is not None]
            if values:
                means.append(f"{p} {np.mean(values):.3f}")
        first = rows[0] if rows else {}
        what = f"{first.get('family', result.scenario)} {first.get('gpus', '?')} GPUs seed {result.seed}"
        state = "FAILED: " + (result.error or "") if result.error else f"{len(rows)} runs, " + ", ".join(means)
        bad = [r for r in rows if not r["valid"]]
        loud = f"  !!! {len(bad)} INVALID EXECUTED DAYS" if bad else ""
        print(
            f"[{done[0]}/{total}] {what}: {state} ({result.elapsed:.0f} s; {time.perf_counter() - started:.0f} s in)"
            + loud,
            file=sys.stderr,
            flush=True,
        )

    return report_one


def _parse_args(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace, tuple[str, ...], Backend]:
    """The command line checked, ``--quick``'s defaults applied; exits 2 with one line on a bad choice.

    Returns:
        The parser (for later errors), the arguments, the planners (:func:`chosen_planners`) and the backend.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.days = 2 if "--days" not in argv else args.days
        args.sigmas = (0.0, 0.3) if "--sigmas" not in argv else args.sigmas
        args.families = args.families[:2] if "--families" not in argv else args.families
    planners = chosen_planners(args)
    try:
        check_planners(planners)
        unknown = [f for f in (*args.families, *(args.large_families or ())) if f not in FAMILIES]
        if unknown:
            raise FanoutError(f"--families: unknown {unknown} (expected: {', '.join(FAMILIES)})")
        needs_history = [p for p in planners if is_live(p) and LIVE[ORACLE.get(p, p)][0]]
        if args.history_days == 0 and needs_history:
            raise FanoutError(f"--history-days 0: {', '.join(needs_history)} need past days; leave them out")
        bad_models = [m for m in args.runtimes if m not in RUNTIMES]
        if bad_models:
            raise FanoutError(f"--runtimes: unknown {bad_models} (expected: {', '.join(RUNTIMES)})")
        backend = fanout_backend(args)
    except FanoutError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return parser, args, planners, backend


def _settings(args: argparse.Namespace, planners: tuple[str, ...]) -> Settings:
    """How every day is played, from the command line."""
    return Settings(
        sigmas=tuple(args.sigmas),
        runtimes=tuple(args.runtimes),
        planners=tuple(planners),
        history_days=args.history_days,
        samples=args.samples,
        hindsight_time_limit=args.hindsight_time_limit,
        hindsight_dtime=args.hindsight_dtime if args.hindsight_dtime > 0 else None,
        full_time_limit=args.full_time_limit,
    )


def _tasks(args: argparse.Namespace, seeds: list[int], settings: Settings) -> list[Task]:
    """A task per family, size and day: the larger sizes' first (``--sizes``), then the seed sizes'."""
    tasks = day_tasks(args.families, [None], seeds, settings)
    if args.sizes:
        large_seeds = [args.seed_base + i for i in range(args.large_days or args.days)]
        tasks = day_tasks(args.large_families or args.families, args.sizes, large_seeds, settings) + tasks
    return tasks


def _print_failures(run: Run, rows: Sequence[Mapping[str, Any]]) -> None:
    """On stderr: every failed task with its traceback, and every executed day that failed the validator."""
    for r in run.results:
        if r.error is not None:
            print(f"TASK FAILED: {r.describe()}: {r.error}\n{r.traceback or ''}", file=sys.stderr)
    for row in rows:
        if not row["valid"]:
            print(f"!!! INVALID EXECUTED DAY: {describe(row)}", file=sys.stderr)
            if row.get("traceback"):
                print(row["traceback"], file=sys.stderr)


def _write_results(
    out: Path,
    rows: list[dict[str, Any]],
    settings: Settings,
    *,
    args: argparse.Namespace,
    command: str,
    started_on: str,
    started: float,
    run: Run,
    kept: Mapping[tuple[str, int, int], list[dict[str, Any]]],
    failed_tasks: list[str],
    seeds: list[int],
) -> None:
    """Write ``out``'s ``.md`` (the report), ``.png`` (the figure) and ``.json`` (the settings, targets and rows).

    Args:
        out: The output stem.
        rows: Every executed day's row.
        settings: How the days were played.
        args: The command line.
        command: The command line as the report quotes it.
        started_on: The machine at the start (:func:`machine`).
        started: ``time.perf_counter()`` at the start.
        run: The fan-out's run.
        kept: The rows of the days kept from a killed run (``--resume``), by task key.
        failed_tasks: A line per failed task.
        seeds: The days' seeds at seed sizes.
    """
    sizes: list[int | None] = [None, *args.sizes]
    text, goals = report(
        rows,
        settings,
        command=command,
        started_on=started_on,
        backend=run.backend + (f"; {len(kept)} day tasks kept from a killed run (--resume)" if kept else ""),
        wall_s=time.perf_counter() - started,
        failed_tasks=failed_tasks,
        families=args.families,
        seeds=seeds,
        sizes=sizes,
        figure=out.with_suffix(".png").name,
    )
    save_figure(plot(rows, settings), out.with_suffix(".png"))
    document = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": started_on,
        "commit": commit(),
        "backend": run.backend,
        "wall_s": round(time.perf_counter() - started, 1),
        "settings": asdict(settings),
        "families": list(args.families),
        "seeds": seeds,
        "sizes": list(args.sizes),
        "targets": [asdict(g) for g in goals],
        "failed_tasks": failed_tasks,
        "rows": rows,
    }
    write_text_atomic(out.with_suffix(".json"), json.dumps(document, indent=None, separators=(",", ":")) + "\n")
    write_text_atomic(out.with_suffix(".md"), text)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, args, planners, backend = _parse_args(argv)
    settings = _settings(args, planners)
    seeds = [args.seed_base + i for i in range(args.days)]
    played = set(seeds) | {args.seed_base + i for i in range(args.large_days or 0)}
    if played & {h for s in played for h in history_seeds(s, args.history_days)}:
        parser.exit(2, f"{parser.prog}: error: a history seed is a played seed; pick another --seed-base\n")
    out = args.out or (Path(tempfile.gettempdir()) / "online_quick" if args.quick else OUT)

    started_on = machine()
    started = time.perf_counter()
    tasks = _tasks(args, seeds, settings)
    partial = out.with_suffix(".partial.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept = read_partial(partial, settings) if args.resume else {}
    except FanoutError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    if not args.resume:
        partial.unlink(missing_ok=True)
    todo = [t for t in tasks if task_key(t) not in kept]
    print(
        f"{len(tasks)} tasks (family x size x day), {len(tasks) - len(todo)} done before (--resume); "
        f"{backend.describe()}",
        file=sys.stderr,
        flush=True,
    )
    run = run_tasks(
        todo,
        backend,
        timeout=args.task_timeout,
        function=day_task,
        on_result=progress(len(todo), started, todo, partial, settings),
    )
    fresh = {task_key(t): r.values.get("rows", []) for t, r in zip(todo, run.results, strict=True)}
    rows = [row for t in tasks for row in kept.get(task_key(t), fresh.get(task_key(t), []))]
    failed_tasks = [line for r, line in zip(run.failures, run.failure_lines(), strict=True) if r.error is not None]
    _print_failures(run, rows)

    exe = Path(sys.executable)
    exe_text = os.path.relpath(exe, ROOT) if exe.is_relative_to(ROOT) else str(exe)
    command = shlex.join(["PYTHONPATH=.", exe_text, "benchmarks/online_benchmark.py", *argv])
    _write_results(
        out,
        rows,
        settings,
        args=args,
        command=command,
        started_on=started_on,
        started=started,
        run=run,
        kept=kept,
        failed_tasks=failed_tasks,
        seeds=seeds,
    )
    partial.unlink(missing_ok=True)  # everything is in the JSON now
    bad = sum(not r["valid"] for r in rows)
    print(
        f"wrote {out.with_suffix('.md')}, .json, .png: {len(rows)} executed days, {bad} invalid, "
        f"{len(failed_tasks)} failed tasks, {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return 1 if bad or failed_tasks else 0


if __name__ == "__main__":
    sys.exit(main())
