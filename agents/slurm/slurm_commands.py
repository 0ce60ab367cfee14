"""``gpualloc slurm snapshot | cycle | run | history``: the allocator driving a real Slurm (docs/slurm.md).

    gpualloc slurm snapshot --config slurm.yaml -o now.yaml
    gpualloc slurm cycle --config slurm.yaml --dry-run -o plan.png
    gpualloc slurm cycle --config slurm.yaml --scheduler greedy
    gpualloc slurm run --config slurm.yaml --every 60 --poll 5 --log cycles.jsonl
    gpualloc slurm history --config slurm.yaml --since 2026-11-01 -o past/

``history`` writes past days from Slurm's job accounting (``sacct``, :mod:`agents.slurm.accounting`) as the
day files that ``slurm.history_dir`` and ``--history`` read, for a cluster that ran without the allocator.

``cycle`` and ``run`` plan with the live planner of ``gpualloc simulate`` (``anticipate``) unless
``--scheduler`` names another: the day's clock, the demand observed, and the past days recorded in
``slurm.history_dir`` or given with ``--history`` (:mod:`agents.slurm.live`).

Every command talks to the cluster that ``SLURM_CONF`` (or Slurm's default)
names. Decisions are printed as one JSON line each on stdout; notes for the
operator (what was left alone) on stderr. Exit status: 0 ok, 1 a change that
failed (named on stderr), 2 bad input (the configuration, an unknown scheduler),
a cluster that cannot be read, or another writer on the cluster: nothing was
changed. One writer at a time (:mod:`agents.slurm.lock`): a ``cycle`` waits up to
``--wait`` seconds for another writer's commit, a second ``run`` is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = "/etc/gpualloc/slurm.yaml"
DEFAULT_POLL = 5.0  # seconds between reads of the queue in `run`
DEFAULT_DEBOUNCE = 2.0  # seconds from the poll that saw a change to the cycle it starts
DEFAULT_WAIT = 120.0  # seconds `cycle` waits for another writer's commit (a loop's cycle: budget + confirm + calls)


def _seconds(text: str) -> float:
    """Argparse type: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def arguments(p: argparse.ArgumentParser) -> None:
    """Declare ``gpualloc slurm``'s subcommands on its parser."""
    from agents.arguments import add_plan_options, positive_float

    sub = p.add_subparsers(dest="slurm_command", metavar="SUBCOMMAND", parser_class=type(p))
    sub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--config",
            type=Path,
            default=Path(os.environ.get("GPUALLOC_SLURM_CONFIG", DEFAULT_CONFIG)),
            metavar="FILE",
            help=f"the allocator's Slurm configuration (default: $GPUALLOC_SLURM_CONFIG or {DEFAULT_CONFIG})",
        )

    s = sub.add_parser("snapshot", help="write the cluster now as a scenario (slot 0 = now)")
    common(s)
    s.add_argument("-o", "--output", type=Path, metavar="FILE", help="write .yaml/.yml or .json (default: stdout)")

    def live(q: argparse.ArgumentParser) -> None:
        from agents.arguments import int_at_least

        q.add_argument(
            "--scheduler",
            "-s",
            default=None,
            metavar="NAME",
            help="the live planner anticipate (default), anticipate-ppo or anticipate-consensus, "
            "or any registry scheduler rolled on the configured forecast (greedy, full, ...)",
        )
        q.add_argument(
            "--history",
            type=Path,
            nargs="+",
            default=[],
            metavar="FILE",
            help="past days of this cluster (scenario files) for the live planner (default: the newest "
            "slurm.history_days days recorded in slurm.history_dir)",
        )
        q.add_argument(
            "--futures",
            type=int_at_least(1),
            default=None,
            metavar="K",
            help="the live planner's sampled futures per cycle (gpualloc simulate's --samples; default 8)",
        )

    c = sub.add_parser("cycle", help="snapshot, plan, commit what starts now (or --dry-run: change nothing)")
    common(c)
    live(c)
    c.add_argument("--dry-run", action="store_true", help="print the decisions and change nothing (the what-if)")
    c.add_argument("-o", "--output", type=Path, metavar="PLAN.png|PLAN.json", help="draw the plan or write it")
    c.add_argument(
        "--wait",
        type=_seconds,
        default=DEFAULT_WAIT,
        metavar="S",
        help=f"wait up to S seconds while another writer commits (0: refuse at once; default {DEFAULT_WAIT:g})",
    )
    add_plan_options(c)

    r = sub.add_parser("run", help="repeat the cycle every --every minutes and when a job ends or is submitted")
    common(r)
    live(r)
    r.add_argument("--every", type=positive_float, required=True, metavar="MINUTES", help="minutes between cycles")
    r.add_argument(
        "--poll",
        type=_seconds,
        default=DEFAULT_POLL,
        metavar="S",
        help=f"read the queue every S seconds; a job ended or submitted starts a cycle (0: the clock only; "
        f"default {DEFAULT_POLL:g})",
    )
    r.add_argument(
        "--debounce",
        type=_seconds,
        default=DEFAULT_DEBOUNCE,
        metavar="S",
        help=f"start that cycle S seconds after the poll that saw the change: the changes meanwhile make one cycle "
        f"(default {DEFAULT_DEBOUNCE:g})",
    )
    r.add_argument(
        "--budget",
        type=float,
        metavar="S",
        help="seconds of planning per cycle; with a registry --scheduler, `full` runs seeded by it when this is "
        "at least 2 (default: a tenth of --every, <= 60)",
    )
    r.add_argument("--cycles", type=int, metavar="N", help="stop after N cycles (default: run until stopped)")
    r.add_argument("--log", type=Path, metavar="FILE", help="append every cycle's lines here (JSON lines)")
    add_plan_options(r)

    h = sub.add_parser(
        "history",
        help="write past days from Slurm's job accounting (sacct) as day files for --history / slurm.history_dir",
        description="Build past days of a cluster that ran without the allocator from Slurm's job accounting "
        "(sacct --json; needs slurmdbd): one <day>.yaml per day of the configuration's day clock that overlaps "
        "--since..--until and is over, each job on the day its release (eligible, else submit time) falls in. "
        "The job completion log (jobcomp/filetxt) is not used: it records no --comment, and no GPUs without "
        "slurmdbd. The apps' demand is not in accounting: a day's apps get the configured forecast. A job that "
        "cannot be read is reported on stderr with its id and left out.",
    )
    common(h)
    h.add_argument(
        "--since", required=True, type=_moment, metavar="DATE", help="first day: YYYY-MM-DD or an ISO time (UTC)"
    )
    h.add_argument(
        "--until", type=_moment, default=None, metavar="DATE", help="end, exclusive: YYYY-MM-DD or an ISO time (UTC; "
        "default now)"
    )  # fmt: skip
    h.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="folder of the day files")
    h.add_argument(
        "--gpus",
        type=int,
        default=None,
        metavar="G",
        help="the cluster's GPUs (default: read from Slurm now, as the snapshot reads the nodes); nodes of "
        "slurm.node_size GPUs, or one node of G",
    )


def _moment(text: str) -> float:
    """Argparse type: ``YYYY-MM-DD`` or an ISO date and time (UTC unless it names an offset), as epoch seconds."""
    import datetime as dt

    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD or an ISO date and time, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def run(args: argparse.Namespace) -> int:
    """Run the chosen subcommand.

    Raises:
        SlurmError: Bad input or a cluster that cannot be read, as one line (``gpualloc`` exits 2); nothing changed.
    """
    from agents.slurm.errors import BadInputError, CommandError, ConfigError, SlurmError

    try:
        return _COMMANDS[args.slurm_command](args)
    except (ConfigError, BadInputError):
        raise
    except CommandError as exc:
        raise SlurmError(f"Slurm: {exc} (nothing changed)") from None
    except SlurmError as exc:
        raise SlurmError(f"{exc} (nothing changed)") from None


def _check_output(path: Path | None, allowed: tuple[str, ...]) -> None:
    from agents.slurm.errors import BadInputError

    if path is None:
        return
    if path.suffix.lower() not in allowed:
        raise BadInputError(f"{path}: -o: expected a file name ending in {' or '.join(allowed)}")
    if path.is_dir():
        raise BadInputError(f"{path}: -o: is a folder, expected a file name")


def _setup(args: argparse.Namespace) -> tuple[Any, Any]:
    from agents.slurm.client import SlurmClient
    from agents.slurm.config import load_config

    config = load_config(args.config)
    client = SlurmClient(bin_dir=config.bin_dir, timeout=config.timeout, retries=config.retries)
    return config, client


def _print_notes(notes: Any) -> None:
    for note in notes:
        print(f"gpualloc slurm: {note}", file=sys.stderr)


def _snapshot(args: argparse.Namespace) -> int:
    from agents.slurm import snapshot
    from gpu_env.scenario import dump_scenario, save_scenario

    _check_output(args.output, (".yaml", ".yml", ".json"))
    config, client = _setup(args)
    snap = snapshot.take(client, config)
    _print_notes([*snap.relaxed, *snap.notes])
    if args.output is None:
        sys.stdout.write(dump_scenario(snap.scenario))
    else:
        save_scenario(snap.scenario, args.output)
    sc = snap.scenario
    running = len(snap.running)
    print(
        f"slurm now: {len(snap.nodes)} nodes x {snap.node_size} GPUs ({', '.join(snap.nodes)}), {running} running, "
        f"{len(snap.owned)} owned pending, {len(snap.notes)} left alone, {len(snap.relaxed)} relaxed; "
        f"{sc.slots} slots of {sc.slot_minutes:g} min" + (f" -> {args.output}" if args.output is not None else ""),
        file=sys.stderr,
    )
    return 0


def _cycle(args: argparse.Namespace) -> int:
    from agents.arguments import plan_options
    from agents.slurm.loop import cycle

    _check_output(args.output, (".png", ".json"))
    scheduler = _scheduler(args)
    config, client = _setup(args)
    lock = _writer_lock(config, "gpualloc slurm cycle", args.wait, _say_waiting)
    with _planner_errors():
        result = cycle(
            config,
            client,
            scheduler,
            plan_options(args),
            dry_run=args.dry_run,
            lock=lock,
            observe=_observe(config, scheduler),
        )
    for line in result.lines:
        print(json.dumps(line))
    _print_notes([*result.snapshot.relaxed, *result.snapshot.notes])
    if args.output is not None:
        if args.output.suffix.lower() == ".json":
            result.decision.plan.save(args.output)
        else:
            draw(result, args.output)
    if result.commit is not None:
        for change, why in result.commit.failed:
            print(f"gpualloc slurm: {change.kind} {change.target} failed: {why}", file=sys.stderr)
        return 1 if result.commit.failed else 0
    return 0


def _run(args: argparse.Namespace) -> int:
    from agents.arguments import plan_options
    from agents.slurm.errors import BadInputError
    from agents.slurm.loop import run_loop

    scheduler = _scheduler(args)
    if args.budget is not None and not args.budget >= 0:
        raise BadInputError(f"--budget: expected seconds >= 0, got {args.budget}")
    if args.cycles is not None and args.cycles < 1:
        raise BadInputError(f"--cycles: expected an integer >= 1, got {args.cycles}")
    from agents.slurm.lock import RUN, Lock
    from agents.slurm.loop import LOCK_WAIT_MOST

    config, client = _setup(args)
    writer = _writer_lock(config, "gpualloc slurm run", min(args.every * 60.0, LOCK_WAIT_MOST), None)
    stop = {"now": False}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["now"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with Lock(Path(config.state_dir) / RUN, "gpualloc slurm run"), _planner_errors():
            failures = run_loop(
                config,
                client,
                scheduler,
                args.every,
                plan_options(args),
                budget=args.budget,
                cycles=args.cycles,
                log=args.log,
                out=sys.stdout,
                poll_seconds=args.poll,
                debounce_seconds=args.debounce,
                should_stop=lambda: stop["now"],
                lock=writer,
                observe=_observe(config, scheduler),
            )
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return 1 if failures else 0


def _scheduler(args: argparse.Namespace) -> Any:
    """``--scheduler``: the live planner (a :class:`~agents.slurm.live.LiveSetup`) or a registry name.

    Raises:
        BadInputError: An unknown name, a missing ``--history`` file, or a live planner's option with a
            registry scheduler.
    """
    from agents.live.anticipate import LIVE_PLANNERS
    from agents.registry import SCHEDULERS
    from agents.slurm.errors import BadInputError
    from agents.slurm.live import LiveSetup

    name = args.scheduler or LIVE_PLANNERS[0]
    for path in args.history:
        if not path.is_file():
            raise BadInputError(f"{path}: --history: no such file")
    if name in LIVE_PLANNERS:
        return LiveSetup(name, tuple(args.history), args.futures, args.seed)
    if name not in SCHEDULERS:
        raise BadInputError(
            f"--scheduler: unknown scheduler {name!r} (expected a live planner, {', '.join(LIVE_PLANNERS)}, or one "
            f"of: {', '.join(SCHEDULERS)})"
        )
    if args.history or args.futures is not None:
        raise BadInputError(f"--history and --futures are the live planner's; {name!r} rolls as it is")
    return name


def _observe(config: Any, scheduler: Any) -> Any:
    """The reader of the apps' observed demand, for a live planner whose configuration names a source."""
    from agents.slurm.live import LiveSetup

    if not isinstance(scheduler, LiveSetup) or not any(getattr(a, "observed", None) for a in config.apps):
        return None
    from agents.slurm.observe import read_all

    def observe(cfg: Any) -> tuple[dict[str, int], list[str]]:
        found = read_all(cfg)
        readings = {app: o.gpus for app, o in found.items() if o.gpus is not None}
        failed = [f"{app}: {o.error}" for app, o in found.items() if o.error is not None]
        return readings, failed

    return observe


def _writer_lock(config: Any, what: str, wait: float, on_wait: Any) -> Any:
    """The single-writer guard of a committing cycle: ``writer.lock`` in the configuration's state folder."""
    from agents.slurm.lock import WRITER, Lock

    return lambda: Lock(Path(config.state_dir) / WRITER, what, wait=wait, on_wait=on_wait, children=True)


def _say_waiting(holder: str) -> None:
    print(f"gpualloc slurm: another writer commits ({holder}); waiting", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _planner_errors() -> Iterator[None]:
    """A planner that cannot run here (its policy file, an optional dependency) as bad input."""
    from agents.ppo import PolicyError
    from agents.registry import SchedulerUnavailableError
    from agents.slurm.errors import BadInputError

    try:
        yield
    except PolicyError as exc:
        raise BadInputError(f"--policy: {exc}") from None
    except SchedulerUnavailableError as exc:
        raise BadInputError(f"--scheduler: {exc}") from None


def draw(result: Any, path: Path) -> None:
    """The plan over the cluster's nodes, each job labelled with its Slurm id (``*``: running now)."""
    from gpu_env import render

    snap = result.snapshot
    plan = result.decision.plan
    m = plan.metrics
    title = (
        f"Slurm plan by {plan.scheduler} from {result.lines[-1]['time']}: objective {m.objective:.1f}, "
        f"utilisation {100 * m.utilization:.1f} %"
    )
    ax = render.plot_allocation(snap.scenario, plan, title=title)
    ns = snap.node_size
    ax.set_yticks([i * ns + ns / 2 for i in range(len(snap.nodes))], list(snap.nodes))
    ax.set_ylabel(f"node ({ns} GPUs each)")
    render.save_figure(ax.figure, path)


def _history(args: argparse.Namespace) -> int:
    """``gpualloc slurm history``: past days from ``sacct --json`` (:mod:`agents.slurm.accounting`)."""
    import time

    from agents.slurm import accounting
    from agents.slurm.clock import DayClock
    from agents.slurm.errors import BadInputError, CommandError, UnreadableError
    from agents.slurm.record import History
    from gpu_env.scenario import save_scenario

    now = time.time()
    until = now if args.until is None else args.until
    if until <= args.since:
        raise BadInputError("--until: must be after --since")
    if args.output.exists() and not args.output.is_dir():
        raise BadInputError(f"{args.output}: -o: not a folder")
    if args.gpus is not None and args.gpus < 1:
        raise BadInputError(f"--gpus: expected an integer >= 1, got {args.gpus}")
    config, client = _setup(args)
    clock = DayClock.of(config)
    days = accounting.day_starts(clock, args.since, until)
    over = [d for d in days if d + clock.day_seconds <= now]
    for d in days[len(over) :]:
        print(f"gpualloc slurm: day {clock.day_name(d)} is not over yet: left out", file=sys.stderr)
    if not over:
        raise BadInputError("--since/--until: no day of the day clock in that window is over yet")
    try:
        if args.gpus is not None:
            gpus, node_size = args.gpus, config.node_size or args.gpus
        else:
            gpus, node_size = _cluster_size(config, client)
        window = [_local(over[0]), _local(over[-1] + clock.day_seconds)]
        text = client.call(["sacct", "--json", "-a", "-X", "-s", accounting.SACCT_STATES, "-S", window[0],
                            "-E", window[1]])  # fmt: skip
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UnreadableError(f"sacct --json: not JSON ({exc.msg} at line {exc.lineno})") from None
        jobs, unread = accounting.read_sacct(data, config.gres)
    except (CommandError, UnreadableError) as exc:
        raise BadInputError(f"Slurm: {exc} (nothing written)") from None
    problems: dict[str, list[str]] = {}
    records = accounting.past_days(config, jobs, over, gpus, node_size, problems)
    _print_notes([*unread, *problems.pop("", [])])
    history = History(args.output)
    written = bad = 0
    for record in records:
        lines = problems.get(record.name, [])
        scenario = record.to_scenario(lines)
        _print_notes(lines)
        path = history.day_file(record.name)
        save_scenario(scenario, path)  # whole or not at all (gpu_env.files)
        written += len(scenario.jobs)
        bad += len(lines)
        print(f"day {record.name}: {path} ({len(scenario.jobs)} jobs, {len(lines)} bad records)")
    bad += len(unread)
    print(
        f"slurm history: {len(records)} days, {written} jobs from sacct, {bad} bad records -> {args.output} "
        f"({gpus} GPUs in nodes of {node_size}; apps: the configured forecast, accounting holds no demand)"
    )
    return 0


def _local(epoch: float) -> str:
    """A moment as sacct reads ``-S``/``-E``: the machine's local time, to the second."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(math.floor(epoch)))


def _cluster_size(config: Any, client: Any) -> tuple[int, int]:
    """The cluster's GPUs and GPUs per node now, as the snapshot reads the nodes."""
    from agents.slurm.errors import BadInputError
    from agents.slurm.snapshot import usable_nodes

    counts, size = usable_nodes(config, client.nodes(), [])
    if not counts:
        raise BadInputError("no usable GPU node in Slurm now: give the cluster's size with --gpus")
    return len(counts) * size, size


_COMMANDS = {"snapshot": _snapshot, "cycle": _cycle, "run": _run, "history": _history}
