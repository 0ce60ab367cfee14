"""The Slurm driver on the 4-node test cluster: cycle times, and a simulated day against Slurm's own backfill.

    python benchmarks/slurm_benchmark.py                  # both parts -> benchmarks/results/slurm.md
    python benchmarks/slurm_benchmark.py --part cycle     # cycle times only (about a minute)
    python benchmarks/slurm_benchmark.py --part day       # the accelerated day only (about 26 minutes)
    python benchmarks/slurm_benchmark.py --part events -o benchmarks/results/slurm_events.md   # about 3 minutes
    python benchmarks/slurm_benchmark.py --part days      # the seven families' days at once (about 28 minutes)
    python benchmarks/slurm_benchmark.py --part days --sigma 0.3 --runtime-model trace   # the same, live
    python benchmarks/slurm_benchmark.py --part cycle --pending 500 --schedulers ppo -o /tmp/cycle.md   # one row
    python benchmarks/slurm_benchmark.py --part cycle --pending 50,500 --schedulers anticipate   # the live planner
    python benchmarks/slurm_benchmark.py --part replicas --scenario day.yaml --sigma 0.3 --seed 11 --raw r.json  # lab/

Needs root and Debian's Slurm (lab/local_slurm.py starts and stops the clusters).

Part 1, cycle time: on a fresh 4-node cluster (8 fake GPUs each) N held jobs of the allocator's partition
(N = 50, 500; sizes 1-8 GPUs or two whole nodes, 1-8 hour limits, every workload type) and one real-time app;
one cycle (snapshot, plan, commit including the wait until the released jobs run) and a second, idle cycle,
for greedy and ppo. Wall time on this machine, under whatever else runs on it.

Part 2, one day in accelerated time: the mixed-control family drawn at 32 GPUs (seed 0; 42 jobs arriving over
the day, one real-time app). One slot is one minute of wall time (Slurm's time limits count whole minutes, so
a shorter slot would hide the jobs' lengths from backfill). Two clusters run side by side on the same jobs:
(a) Slurm alone: each job submitted at its release with its time limit, Slurm's default priority (submit
order) and backfill, the app served from a core reservation at its daily peak (the operator's static
answer, SPEC section 4); (b) gpualloc: the same jobs submitted held at their release, one `greedy` cycle at
the start of every slot (rolling horizon: jobs are known only once submitted). Each job's start is read from
Slurm's own records (`start_time` in `squeue --json`, polled); the day is scored with gpu_env.metrics.

Part 3, start latency after a job ends: `gpualloc slurm run`'s loop polling the queue (clock far away). A job
of another user holds all 32 GPUs and ends, well before its time limit, when the benchmark says (at a random
moment of the poll's period); a held 8-GPU job of the allocator is planned after it. Measured per
(--poll, --debounce): Slurm's start_time of the held job minus the end_time of the first (whole seconds).

Part 4, seven days (``--part days``; only its own section of slurm.md is rewritten, the raw record goes to
benchmarks/results/slurm_days.json): one day of each family of gpu_env.generators, drawn with ``--seed``
(default 7, not the canonical scenarios' seed) at 32 GPUs or the family's own size when larger, as part 2 but
with every job's Slurm priority its worth per GPU-slot (``--priority``), the deadlines and the inherited jobs
on both sides, and every app's peak reserved statically on Slurm's side. All days run at once, one process
each, on two clusters each, on one slot clock. ``--families`` and ``--slots`` make a smoke run.

With ``--sigma`` (and ``--runtime-model``, ``--scheduler``), part 4 plays the days live (:class:`LiveDay`,
its own section of slurm.md, raw record benchmarks/results/slurm_days_live.json): the forecast in the
configuration, the actual demand through ``observed``, jobs ending at their actual runtime, past days of
other seeds as the history, and each day compared with its hindsight optimum and the simulator's prediction.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.live.forecast import NoiseModel  # noqa: E402
from agents.live.runtimes import draw_runtimes  # noqa: E402
from agents.options import PlanOptions  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from agents.simulator.simulation import realized_day  # noqa: E402
from agents.slurm import jsonread  # noqa: E402
from agents.slurm.client import SlurmClient  # noqa: E402
from agents.slurm.config import config_from_dict  # noqa: E402
from agents.slurm.errors import SlurmError  # noqa: E402
from agents.slurm.live import LiveSetup  # noqa: E402
from agents.slurm.loop import cycle  # noqa: E402
from gpu_env import rules  # noqa: E402
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate  # noqa: E402
from gpu_env.metrics import Metrics, compute_metrics  # noqa: E402
from gpu_env.plan import Placement, Plan  # noqa: E402
from gpu_env.scenario import Job, Scenario, save_scenario, scenario_from_dict  # noqa: E402
from lab.drawn_history import past_days  # noqa: E402
from lab.live_arms import Settings, hindsight  # noqa: E402
from lab.live_arms import play as play_live  # noqa: E402
from lab.local_slurm import LocalCluster, missing_tools  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "slurm.md"
TYPES = ("training", "batch_inference", "quantization")
CAVEAT = (
    "What differs besides the planner, stated so that the gap is not over-read: Slurm's side keeps the app's "
    "peak reserved all day (the static answer an operator gives Slurm; SPEC section 4's FIFO does the same), "
    "while gpualloc's reservations follow the forecast, which by itself favours gpualloc's utilisation (how much "
    "of the gap it explains was not measured); "
    "and Slurm's priority is the submit order (priority/basic), blind to the jobs' worth, which the value "
    "column weighs. One day, one seed, one run: no spread is measured."
)


def _config(apps: list[dict], slots: int = 24, slot_minutes: float = 60.0, decay: float = 0.99):
    return config_from_dict(
        {
            "slurm": {"partitions": ["gpu"], "gres": "gpu", "cpus_per_gpu": 4},
            "owned": {"partitions": ["gpu"]},
            "horizon": {"slots": slots, "slot_minutes": slot_minutes, "decay": decay},
            "workloads": {"default_type": "batch_inference"},
            "realtime": apps,
        },
        "<benchmark>",
    )


def _reset(cluster: LocalCluster) -> None:
    cluster.run("scancel", "--full", "-u", "root", check=False)
    for r in jsonread.read_reservations(cluster.scontrol("-d", "-o", "show", "reservation").stdout):
        cluster.scontrol("delete", f"ReservationName={r.name}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = json.loads(cluster.run("squeue", "--all", "--json").stdout)["jobs"]
        if not [j for j in jobs if j["job_state"] in ("PENDING", "RUNNING", "COMPLETING")]:
            break
        time.sleep(0.3)
    cluster.wait_idle()


# ----------------------------------------------------------------------------- part 1


def part_cycle(
    root: Path, pending: Sequence[int] = (50, 500), schedulers: Sequence[str] = ("greedy", "ppo")
) -> list[str]:
    rows = []
    app = {"name": "chat", "demand": [6, 6, 7, 8, 9, 9, 8, 8, 7, 6, 6, 5] * 2, "ramp": 2, "penalty": 8}
    config = _config([{**app, "initial": 6}])  # served at its demand already (no reservation yet)
    history = root / "cycle-history"  # the live planner's: 8 past days of the family, whose arrivals it samples
    history.mkdir(parents=True, exist_ok=True)
    for k, past in enumerate(past_days("mixed-control", 32, 0, HISTORY_DAYS, 0.3)):
        day = {**past.to_dict(), "realtime": [{**app, "initial": 6}]}  # the configuration's app, its forecast
        save_scenario(scenario_from_dict(day), history / f"2000-01-{k + 1:02d}.yaml")
    live_config = replace(config, history_dir=str(history), history_days=HISTORY_DAYS)
    for scheduler in schedulers:  # the first call of the learned planner loads and warms its policy
        run_scheduler(
            "greedy" if scheduler.startswith("anticipate") else scheduler, generate("mixed-control", 0, gpus=32)
        )
    with LocalCluster(root / "cycle", nodes=4, gpus_per_node=8) as cluster:
        client = SlurmClient(env=cluster.env)
        for n in pending:
            for scheduler in schedulers:
                _reset(cluster)
                rng = np.random.default_rng(n)
                t = time.perf_counter()
                for i in range(n):
                    size = int(rng.choice([1, 2, 4, 8, 16], p=[0.25, 0.25, 0.25, 0.15, 0.10]))
                    hours = int(rng.integers(1, 9))
                    kind = TYPES[i % 3]
                    prio = int(rng.integers(1, 6))
                    gres = ["-N2", "--gres=gpu:8"] if size == 16 else [f"--gres=gpu:{size}"]
                    cluster.sbatch(
                        "-p", "gpu", "--hold", *gres, "-t", str(60 * hours),
                        "--comment", f"type={kind} priority={prio}", "--wrap", "sleep 36000",
                    )  # fmt: skip
                submit_s = time.perf_counter() - t
                live = scheduler.startswith("anticipate")
                planner: Any = LiveSetup(scheduler) if live else scheduler
                cfg = live_config if live else config
                if live:  # the live planner's first cycle in this process fits the history and compiles: a dry run
                    cycle(cfg, client, planner, PlanOptions(time_limit=10.0), dry_run=True)
                first = cycle(cfg, client, planner, PlanOptions(time_limit=10.0))
                second = cycle(cfg, client, planner, PlanOptions(time_limit=10.0))
                f, s = first.timings, second.timings
                wait = first.commit.start_wait_ms if first.commit else 0.0
                cells = [n, scheduler, *(f"{f[k]:.0f}" for k in ("snapshot", "plan", "commit", "total"))]
                cells += [f"{wait:.0f}", f"{f['total'] - wait:.0f}"]
                cells += [len(first.decision.start_now), len(first.changes), f"{s['total']:.0f}", len(second.changes)]
                rows.append("| " + " | ".join(map(str, [*cells, f"{submit_s:.1f}"])) + " |")
                print(rows[-1], flush=True)
    return [
        "## Cycle time on the 4-node test cluster",
        "",
        "One cycle = `sinfo`/`squeue`/`scontrol show reservation` read into a scenario, the plan, its validation, and",
        "the commit (hold, NodeList + release for each job that starts now, the app's core reservations), the commit",
        "including the wait until every released job runs. The second cycle follows at once on the unchanged cluster",
        "(idempotence: its change count must be 0). Milliseconds of wall time on this machine (2 shared cores, other",
        "work running), one run each: an indication, not a controlled measurement. Each planner is called once",
        "before (outside the table): the learned planner's first call loads its policy (about 24 s here).",
        "",
        "The commit's wait for Slurm to start the released jobs (Slurm's start latency, `start wait ms`) is "
        "part of the commit; `cycle without the wait` is the cycle's total less it. `anticipate` is the live "
        "planner with 8 past days of the family as its history (its first cycle in the process, a dry run "
        "outside the table, fits the history and compiles the engine).",
        "",
        "| pending | scheduler | snapshot ms | plan ms | commit ms | cycle ms | start wait ms | cycle without the "
        "wait ms | started | changes | 2nd cycle ms | 2nd changes | sbatch of all (s) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]


# ----------------------------------------------------------------------------- part 2


def part_day(root: Path, slot_seconds: float = 60.0) -> list[str]:
    scenario = generate("mixed-control", 0, gpus=32)
    T = scenario.slots
    app = scenario.apps[0]
    peak = max(app.demand)
    baseline = LocalCluster(root / "slurm-alone", nodes=4, gpus_per_node=8)
    ours = LocalCluster(root / "gpualloc", nodes=4, gpus_per_node=8)
    starts: dict[str, dict[str, int]] = {"slurm": {}, "gpualloc": {}}
    ids: dict[str, dict[str, str]] = {"slurm": {}, "gpualloc": {}}
    served: list[int] = []
    cycle_ms: list[float] = []
    failures: list[str] = []
    try:
        baseline.start()
        ours.start()
        client = SlurmClient(env=ours.env)
        # the static answer: cores for the daily peak, whole nodes first
        left, node = peak, 1
        t0 = math.ceil(time.time() / slot_seconds) * slot_seconds + slot_seconds
        while time.time() < t0 - 2:
            time.sleep(0.5)
        while left > 0:
            g = min(8, left)
            baseline.scontrol(
                "create", "reservation", f"ReservationName=static-chat.gpu{node:02d}", "StartTime=now",
                f"Duration={T + 10}", f"Nodes=gpu{node:02d}", f"CoreCnt={4 * g}", "Users=root",
            )  # fmt: skip
            left -= g
            node += 1
        while time.time() < t0:
            time.sleep(0.1)
        for s in range(T):
            slot_start = t0 + s * slot_seconds
            while time.time() < slot_start:
                time.sleep(0.05)
            for job in scenario.jobs:
                if job.release != s:
                    continue
                args = ["-p", "gpu", f"--gres=gpu:{job.gpus}", "-t", str(job.duration), "--wrap",
                        f"sleep {job.duration * slot_seconds - 4:.0f}"]  # fmt: skip
                ids["slurm"][baseline.sbatch(*args)] = job.id
                comment = f"type={job.type.value} priority={job.weight:.6g}"
                ids["gpualloc"][ours.sbatch("--hold", "--comment", comment, *args)] = job.id
            demand = list(app.demand[s:]) + [app.demand[-1]] * s
            config = _config(
                [
                    {"name": app.name, "demand": demand, "ramp": app.ramp, "penalty": app.penalty}
                    | ({"initial": app.initial} if s == 0 else {})  # the day's start; later, its reservations
                ],
                slots=T,
                slot_minutes=slot_seconds / 60.0,
                decay=scenario.decay,
            )
            try:
                result = cycle(config, client, "greedy", confirm_seconds=15.0)
                served.append(result.decision.app_gpus_now.get(app.name, 0))
                cycle_ms.append(result.timings["total"])
                failures.extend(f"slot {s}: {c.kind} {c.target}: {why}" for c, why in result.commit.failed)
            except SlurmError as exc:  # recorded, and the day goes on (as the loop would)
                failures.append(f"slot {s}: cycle failed: {exc}")
                served.append(served[-1] if served else app.initial)
            # record starts from Slurm's own records, a few times per slot
            while time.time() < slot_start + slot_seconds - 3:
                for key, cl in (("slurm", baseline), ("gpualloc", ours)):
                    for j in jsonread.read_jobs(json.loads(cl.run("squeue", "--all", "--json").stdout)):
                        if j.id in ids[key] and j.start_time and j.state != "PENDING":
                            starts[key].setdefault(ids[key][j.id], j.start_time)
                time.sleep(5)
            print(f"slot {s}: slurm started {len(starts['slurm'])}, gpualloc {len(starts['gpualloc'])}", flush=True)
    finally:
        for cl in (baseline, ours):
            cl.stop()
    raw = {"t0": t0, "slot_seconds": slot_seconds, "starts": starts, "served": served, "failures": failures}
    (OUT.parent / "slurm_day.json").write_text(json.dumps(raw, indent=1) + "\n")

    def score(key: str, curve: list[int]):
        placements = []
        for jid, start in starts[key].items():
            slot = math.floor((start - t0) / slot_seconds + 0.25)
            job = scenario.jobs[scenario.job_index(jid)]
            if 0 <= slot < T:
                placements.append(Placement(jid, slot, tuple(range(job.gpus))))
        plan = Plan(scenario.name, key, placements, {app.name: curve})
        return compute_metrics(scenario, plan), len(placements)

    static = [min(peak, 32)] * T
    m_slurm, n_slurm = score("slurm", static)
    m_ours, n_ours = score("gpualloc", served)
    lines = [
        "## One day in accelerated time against Slurm's own backfill",
        "",
        f"Scenario: mixed-control drawn at 32 GPUs (seed 0): {len(scenario.jobs)} jobs released over the day, app "
        f"`{app.name}` with peak {peak} GPUs, decay {scenario.decay}. One slot = {slot_seconds:g} s of wall time; "
        f"{T} slots. Same jobs, same 4-node cluster twice, side by side. Starts read from Slurm's `start_time`; a job "
        "counts in the slot nearest its start. Real-time: Slurm alone holds a static core reservation at the peak; "
        "gpualloc's per-slot reservations are what its cycles committed.",
        "",
        "| | jobs started in the day | utilisation | priority-weighted value (objective) | job value | shortfall |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| Slurm backfill (priority = submit order) | {n_slurm} | {100 * m_slurm.utilization:.1f} % | "
        f"{m_slurm.objective:.1f} | {m_slurm.job_value:.1f} | {m_slurm.shortfall} |",
        f"| gpualloc greedy, a cycle per slot | {n_ours} | {100 * m_ours.utilization:.1f} % | {m_ours.objective:.1f} | "
        f"{m_ours.job_value:.1f} | {m_ours.shortfall} |",
        "",
        f"gpualloc cycles: median {np.median(cycle_ms):.0f} ms, slowest {max(cycle_ms):.0f} ms; "
        f"{len(failures)} failed changes or cycles" + (": " + "; ".join(failures[:5]) if failures else "") + ".",
        "",
        CAVEAT,
        "",
    ]
    return lines


# ----------------------------------------------------------------------------- part 3


def _one_end(
    cluster: LocalCluster, config, client: SlurmClient, poll: float, debounce: float, delay: float, go: Path
) -> tuple[int, float, str]:
    """One job ends under the polling loop: (latency s, the starting cycle's ms, its trigger)."""
    import threading

    from agents.slurm.loop import run_loop

    def jobs() -> dict[str, jsonread.SlurmJob]:
        return {j.id: j for j in jsonread.read_jobs(json.loads(cluster.run("squeue", "--all", "--json").stdout))}

    def wait(condition) -> None:
        deadline = time.monotonic() + 600
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError("timed out")
            time.sleep(0.05)

    first = cluster.sbatch(
        "-p", "batch", "-N4", "--gres=gpu:8", "-t", "30", "--wrap", f"while [ ! -e {go} ]; do sleep 0.1; done"
    )  # fmt: skip
    wait(lambda: jobs()[first].state == "RUNNING")
    second = cluster.sbatch("-p", "gpu", "--hold", "--gres=gpu:8", "-t", "60", "--wrap", "sleep 3600")
    lines: list[dict] = []

    class Out:
        def write(self, text: str) -> None:
            lines.extend(json.loads(t) for t in text.splitlines())

        def flush(self) -> None:
            pass

    stop = threading.Event()
    kwargs = {"budget": 0, "out": Out(), "poll_seconds": poll, "debounce_seconds": debounce, "should_stop": stop.is_set}
    loop = threading.Thread(target=run_loop, args=(config, client, "greedy", 600), kwargs=kwargs)
    loop.start()
    try:
        wait(lambda: any("cycle" in line for line in lines))
        time.sleep(delay)
        go.touch()
        wait(lambda: jobs()[second].state == "RUNNING")
    finally:
        stop.set()
        loop.join()
    done = jobs()
    started = next(line for line in lines if second in line.get("start_now", []))
    return done[second].start_time - done[first].end_time, started["ms"]["total"], started["trigger"]


def part_events(root: Path, repeats: int = 8) -> list[str]:
    config = _config([])
    rng = np.random.default_rng(0)
    rows = []
    with LocalCluster(root / "events", nodes=4, gpus_per_node=8, timeout=900) as cluster:
        client = SlurmClient(env=cluster.env, timeout=900, retries=4, retry_delay=0.5)
        for poll, debounce in ((5.0, 2.0), (0.5, 0.5)):
            runs = []
            for k in range(repeats):
                _reset(cluster)
                delay = float(rng.uniform(0, poll))  # the end falls anywhere in the poll's period
                runs.append(_one_end(cluster, config, client, poll, debounce, delay, root / f"go-{poll}-{k}"))
                print(f"poll {poll} debounce {debounce}: {runs[-1]}", flush=True)
            latency = [r[0] for r in runs]
            rows.append(
                f"| {poll:g} | {debounce:g} | {repeats} | {min(latency)} | {np.median(latency):g} | {max(latency)} "
                f"| {np.median([r[1] for r in runs]):.0f} | {[r[2] for r in runs].count('ended')} of {repeats} |"
            )
    return [
        "## Start latency after a job ends (the loop on events)",
        "",
        "`gpualloc slurm run`'s loop with `--every` far away: a job of another user holds all 32 GPUs and ends",
        "before its time limit at a random moment of the poll's period; a held 8-GPU job is planned after it.",
        "Latency = Slurm's start_time of the held job minus the end_time of the first (whole seconds, so +-1 s).",
        "It adds the wait for the next poll (up to --poll), --debounce, and the cycle up to the release; Slurm",
        "then starts the job. Cycle ms includes the commit's wait until the released job runs.",
        "",
        "| --poll s | --debounce s | runs | latency min s | median s | max s | cycle ms (median) | trigger `ended` |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]


# ----------------------------------------------------------------------------- part 4

PRIORITY_SCALE = 1000  # Slurm's priorities are integers: the worth per GPU-slot times this keeps three decimals
DAYS_JSON = OUT.parent / "slurm_days.json"
DAYS_HEADING = "## Seven days in accelerated time against Slurm's backfill, priority by worth"
LIVE_HEADING = "## Seven live days: demand off the forecast, jobs ending early, the live planner"
LIVE_JSON = OUT.parent / "slurm_days_live.json"
HISTORY_DAYS = 8  # past days of other seeds in each live day's history (online_benchmark's default)


@dataclass(frozen=True)
class LiveDay:
    """How a live day is played: the actual demand's error, the runtimes, and the loop's planner.

    Attributes:
        sigma: The actual demand is ``NoiseModel(sigma).draw(day, seed)``, reaching the loop only through
            ``observed``; the configuration holds the forecast.
        runtime_model: ``exact`` or ``trace``: each job sleeps its actual runtime (``draw_runtimes``), its
            limit is what it asked for.
        scheduler: The loop's planner (``anticipate``, or a registry name rolled on the corrected forecast).
    """

    sigma: float
    runtime_model: str
    scheduler: str


RAN = frozenset({"RUNNING", "COMPLETING", "COMPLETED", "TIMEOUT"})  # states of a job that has started


def slurm_priority(weight: float) -> int:
    """Slurm's integer priority for a job's worth per GPU-slot (at least 1: Slurm's 0 means held)."""
    return max(1, round(weight * PRIORITY_SCALE))


def gres_args(job: Job, node_size: int) -> list[str]:
    """sbatch's GPU request: ``--gres=gpu:k`` within a node, whole nodes for a larger job (as the snapshot reads)."""
    if job.gpus <= node_size:
        return [f"--gres=gpu:{job.gpus}"]
    return [f"-N{job.gpus // node_size}", f"--gres=gpu:{node_size}"]


def inherited_nodes(job: Job, node_size: int) -> dict[int, int]:
    """Node index -> GPUs an inherited job holds there (from its ``running_on``)."""
    return dict(sorted(Counter(g // node_size for g in job.running_on or ()).items()))


def static_layout(scenario: Scenario) -> list[tuple[str, int, int]]:
    """The static answer: each app's daily peak as (app, node index, GPUs) pieces around the inherited jobs.

    The pieces go onto the fullest nodes first (fewest free GPUs, then the node order), so that whole
    nodes stay free for large jobs.

    Raises:
        ValueError: The peaks do not fit beside the inherited jobs.
    """
    size = scenario.node_size
    free = [size] * (scenario.gpus // size)
    for job in scenario.jobs:
        for node, gpus in inherited_nodes(job, size).items():
            free[node] -= gpus
    pieces = []
    for app in scenario.apps:
        left = max(app.demand, default=0)
        for node in sorted(range(len(free)), key=lambda n: (free[n], n)):
            if left == 0:
                break
            take = min(free[node], left)
            if take:
                pieces.append((app.name, node, take))
                free[node] -= take
                left -= take
        if left:
            raise ValueError(f"app {app.name}'s peak does not fit beside the inherited jobs ({left} GPUs over)")
    return pieces


def slot_of(start: float, t0: float, slot_seconds: float) -> int:
    """The slot a start counts in: the nearest slot's start, up to a quarter slot early."""
    return math.floor((start - t0) / slot_seconds + 0.25)


@dataclass(frozen=True)
class SideScore:
    """One side of one day, scored.

    Attributes:
        metrics: gpu_env.metrics of the starts and the real-time curves.
        started: Jobs counted as started in the day (inside their start window).
        outside: Starts outside the rules' start window (``job@slot``), left out of the score.
        ramp_violations: Slots where an app's curve moves by more than its ramp (gpu_env.rules).
    """

    metrics: Metrics
    started: int
    outside: tuple[str, ...]
    ramp_violations: int


def score_side(
    scenario: Scenario,
    starts: Mapping[str, float],
    t0: float,
    slot_seconds: float,
    curves: Mapping[str, Sequence[int]],
    initials: Mapping[str, int],
) -> SideScore:
    """Score the starts read from Slurm (epoch seconds by job id) and each app's curve as a plan.

    A start counts in :func:`slot_of`'s slot; starts after the horizon are not in the day, and a start
    outside :func:`gpu_env.rules.start_window` (before the release, past a deadline) is listed and not
    scored. Ramp violations are :func:`gpu_env.rules.ramp_problems` of each curve from ``initials``.
    """
    T = scenario.slots
    placements, outside = [], []
    for jid, start in sorted(starts.items(), key=lambda item: (item[1], item[0])):
        job = scenario.jobs[scenario.job_index(jid)]
        slot = slot_of(start, t0, slot_seconds)
        if slot >= T:
            continue
        if slot not in rules.start_window(job, T):
            outside.append(f"{jid}@{slot}")
            continue
        placements.append(Placement(jid, slot, tuple(range(job.gpus))))
    plan = Plan(scenario.name, "slurm", placements, {name: list(curve) for name, curve in curves.items()})
    ramps = sum(len(rules.ramp_problems(curves[a.name], initials[a.name], a.ramp)) for a in scenario.apps)
    return SideScore(compute_metrics(scenario, plan), len(placements), tuple(outside), ramps)


def replace_section(text: str, heading: str, lines: Sequence[str]) -> str:
    """``text`` with the section under ``heading`` (up to the next ``## `` heading) replaced, or appended."""
    old = text.splitlines()
    body = [*lines]
    while body and not body[-1]:
        body.pop()
    if heading in old:
        i = old.index(heading)
        j = next((k for k in range(i + 1, len(old)) if old[k].startswith("## ")), len(old))
        rest = old[j:]
        new = old[:i] + body + (["", *rest] if rest else [])
    else:
        while old and not old[-1]:
            old.pop()
        new = old + ([""] if old else []) + body
    return "\n".join(new) + "\n"


def _day_scenario(family: str, seed: int) -> Scenario:
    """The day's scenario: the family at 32 GPUs, or at its own size when larger."""
    return generate(family, seed, gpus=max(32, FAMILIES[family].gpus))


def _ran(cluster: LocalCluster, ids: Mapping[str, str], starts: dict[str, float]) -> None:
    """Record (once) the start of every job in ``ids`` that Slurm says has started."""
    for j in jsonread.read_jobs(json.loads(cluster.run("squeue", "--all", "--json").stdout)):
        if j.id in ids and j.start_time and j.state in RAN:
            starts.setdefault(ids[j.id], float(j.start_time))


@dataclass
class _Day:
    """One family's day in progress on its two clusters (:func:`run_day`): the day, and what is read back.

    Attributes:
        family: The generator family.
        seed: The day's seed.
        root: Where the clusters (and a live day's history and state) live.
        scenario: The day (:func:`_day_scenario`).
        slot_seconds: Wall seconds per slot.
        slots: Slots played (the day's, or fewer for a smoke run).
        layout: The static reservations on Slurm's side (:func:`static_layout`).
        backfill: The cluster of Slurm alone.
        ours: gpualloc's cluster.
        live: How a live day is played; None: the forecast is the actual demand, jobs run to their limit.
        actual: A live day's actual demand (apps x slots).
        runtimes: A live day's actual runtimes in slots, by job id.
        t0: The slot clock's start (epoch seconds), once the days agree on it.
        ids: Per side, the job id of each Slurm job id.
        starts: Per side, each job's start read from Slurm (epoch seconds).
        served: Per app, the GPUs gpualloc's cycle served in each slot.
        read_back: Per app, the GPUs the cycle's snapshot read back (-1: the cycle failed).
        cycles: A record per slot's cycle.
        failures: Failed changes and cycles, by slot.
        relaxed: What the snapshots relaxed, by slot.
        replicas: A live day's ``replicas`` section of the configuration (``--part replicas``; None: none).
    """

    family: str
    seed: int
    root: Path
    scenario: Scenario
    slot_seconds: float
    slots: int
    layout: list[tuple[str, int, int]]
    backfill: LocalCluster
    ours: LocalCluster
    live: LiveDay | None = None
    actual: np.ndarray | None = None
    runtimes: Mapping[str, int] | None = None
    t0: float = 0.0
    ids: dict[str, dict[str, str]] = field(default_factory=lambda: {"backfill": {}, "gpualloc": {}})
    starts: dict[str, dict[str, float]] = field(default_factory=lambda: {"backfill": {}, "gpualloc": {}})
    served: dict[str, list[int]] = field(default_factory=dict)
    read_back: dict[str, list[int]] = field(default_factory=dict)
    cycles: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)
    replicas: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        """GPUs per node."""
        return self.scenario.node_size

    @property
    def minutes(self) -> float:
        """Minutes per slot."""
        return self.slot_seconds / 60.0

    @property
    def history_dir(self) -> Path:
        """A live day's history: past days of other seeds."""
        return self.root / f"{self.family}-history"

    def log(self, text: str) -> None:
        """A progress line, named by the family."""
        print(f"{self.family}: {text}", flush=True)

    def ran_for(self, job: Job) -> int:
        """Slots the job actually runs."""
        return job.duration if self.runtimes is None else int(self.runtimes.get(job.id, job.duration))

    def deadline_args(self, job: Job) -> list[str]:
        """sbatch's ``--deadline`` for a job with a deadline (none without)."""
        if job.deadline is None:
            return []  # half a slot of slack: a start within its slot still ends by the deadline's slot
        when = time.localtime(self.t0 + job.deadline * self.slot_seconds + self.slot_seconds / 2)
        return ["--deadline", time.strftime("%Y-%m-%dT%H:%M:%S", when)]

    def read_starts(self) -> None:
        """Record the starts Slurm reports on both sides (:func:`_ran`)."""
        _ran(self.backfill, self.ids["backfill"], self.starts["backfill"])
        _ran(self.ours, self.ids["gpualloc"], self.starts["gpualloc"])


def _live_inputs(
    scenario: Scenario, family: str, seed: int, live: LiveDay, history_dir: Path
) -> tuple[np.ndarray, dict[str, int]]:
    """A live day's actual demand and runtimes; its history of past days written to ``history_dir``."""
    actual = NoiseModel(live.sigma).draw(scenario, seed)
    runtimes = draw_runtimes(scenario, live.runtime_model, seed)
    history_dir.mkdir(parents=True, exist_ok=True)
    past = past_days(family, scenario.gpus, seed, HISTORY_DAYS, live.sigma)
    for k, day in enumerate(past):
        save_scenario(day, history_dir / f"2000-01-{k + 1:02d}.yaml")
    return actual, runtimes


def _start_clusters(day: _Day, barrier: Any, t0_value: Any, start_lock: Any) -> SlurmClient:
    """Start both clusters, agree on the slot clock with the other days, and wait until 15 s before it.

    The clusters start under ``start_lock`` (their ports are probed free one cluster at a time); a failed
    start aborts ``barrier`` so that the other days stop waiting. Returns the client of gpualloc's cluster.
    """
    try:
        with start_lock:
            day.backfill.start()
            day.ours.start()
    except BaseException:
        barrier.abort()
        raise
    client = SlurmClient(env=day.ours.env)
    barrier.wait(timeout=1800)
    day.t0 = t0_value.value
    while time.time() < day.t0 - 15:
        time.sleep(0.2)
    return client


def _submit_inherited(day: _Day) -> None:
    """The inherited jobs run on their nodes on both sides from just before slot 0 (waits up to 60 s for them)."""
    size, slot_seconds = day.size, day.slot_seconds
    for job in day.scenario.jobs:
        if job.running_on is None:
            continue
        where = ",".join(day.backfill.node_names[n] for n in inherited_nodes(job, size))
        sleep = day.t0 + job.duration * slot_seconds - 10 - time.time()
        comment = f"type={job.type.value} priority={job.weight:.6g}"
        sleep -= (job.duration - day.ran_for(job)) * slot_seconds
        args = ["-p", "gpu", "-w", where, *gres_args(job, size), "-t", str(math.ceil(job.duration * day.minutes)),
                "--comment", comment, "--wrap", f"sleep {sleep:.0f}"]  # fmt: skip
        day.ids["backfill"][day.backfill.sbatch(*args)] = job.id
        day.ids["gpualloc"][day.ours.sbatch(*args)] = job.id
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        day.read_starts()
        if all(len(day.starts[k]) == len(day.ids[k]) for k in day.starts):
            break
        time.sleep(0.5)


def _reserve_static(day: _Day) -> None:
    """Slurm alone: the static answer, core reservations for each app's peak, around the inherited jobs."""
    backfill, minutes = day.backfill, day.minutes
    for name, node, gpus in day.layout:
        backfill.scontrol(
            "create", "reservation", f"ReservationName=static-{name}.{backfill.node_names[node]}",
            "StartTime=now", f"Duration={math.ceil(day.slots * minutes) + 10}", f"Nodes={backfill.node_names[node]}",
            f"CoreCnt={4 * gpus}", "Users=root",
        )  # fmt: skip


def _submit_released(day: _Day, s: int) -> None:
    """The jobs released in slot ``s``: to Slurm alone with their priority, to gpualloc's cluster held."""
    size = day.size
    for job in day.scenario.jobs:
        if job.running_on is not None or job.release != s:
            continue
        args = ["-p", "gpu", *gres_args(job, size), "-t", str(math.ceil(job.duration * day.minutes)),
                *day.deadline_args(job), "--wrap", f"sleep {day.ran_for(job) * day.slot_seconds - 4:.0f}"]  # fmt: skip
        day.ids["backfill"][day.backfill.sbatch(f"--priority={slurm_priority(job.weight)}", *args)] = job.id
        comment = f"type={job.type.value} priority={job.weight:.6g}"
        day.ids["gpualloc"][day.ours.sbatch("--hold", "--comment", comment, *args)] = job.id


def _slot_cycle_inputs(day: _Day, s: int) -> tuple[Any, Any, Any]:
    """Slot ``s``'s cycle: its configuration, its planner, and (live) the actual demand's reading.

    Returns:
        The configuration, the planner (a registry name or a :class:`LiveSetup`), and ``observe`` (None
        unless live: then the apps' actual demand in slot ``s``).
    """
    scenario, live = day.scenario, day.live
    apps = []
    for app in scenario.apps:
        if live is None:  # the demand from this slot on: a perfect forecast
            entry = {"name": app.name, "demand": list(app.demand[s:]) + [app.demand[-1]] * s}
        else:  # the day's forecast, read by the day's clock
            entry = {"name": app.name, "demand": list(app.demand), "anchor": "day"}
        entry |= {"ramp": app.ramp, "penalty": app.penalty}
        apps.append(entry | ({"initial": app.initial} if s == 0 else {}))  # the day's start; then Slurm's
    if live is None:
        config = _config(apps, slots=scenario.slots, slot_minutes=day.minutes, decay=scenario.decay)
        planner: Any = "greedy"
        observe = None
    else:
        state = day.root / f"{day.family}-state"
        config = _live_config(apps, scenario, day.minutes, day.t0, state, day.history_dir, day.replicas)
        live_planner = live.scheduler.startswith("anticipate")
        planner = LiveSetup(live.scheduler, seed=day.seed) if live_planner else live.scheduler
        readings = {app.name: int(day.actual[i, s]) for i, app in enumerate(scenario.apps)}  # type: ignore[index]
        observe = lambda _config, r=readings: (dict(r), [])  # noqa: E731
    return config, planner, observe


def _run_cycle(day: _Day, client: SlurmClient, s: int, slot_start: float) -> dict[str, Any]:
    """Slot ``s``'s cycle on gpualloc's cluster, what it served and read back recorded; returns its record.

    A failed cycle is recorded, and the day goes on (as the loop would).
    """
    config, planner, observe = _slot_cycle_inputs(day, s)
    served, read_back = day.served, day.read_back
    begin = time.time()
    record: dict[str, Any] = {"slot": s, "begin_s": round(begin - slot_start, 3)}
    try:
        result = cycle(config, client, planner, confirm_seconds=15.0, observe=observe)
        if "why" in result.lines[-1]:
            record["why"] = result.lines[-1]["why"]
        for app in day.scenario.apps:
            served[app.name].append(result.decision.app_gpus_now.get(app.name, 0))
            read_back[app.name].append(sum(result.snapshot.app_now.get(app.name, {}).values()))
        day.relaxed.extend(f"slot {s}: {r}" for r in result.snapshot.relaxed)
        failed = [f"{c.kind} {c.target}: {why}" for c, why in result.commit.failed]
        record |= {"ms": round(result.timings["total"], 1), "plan_ms": round(result.timings["plan"], 1),
                   "started": len(result.decision.start_now)}  # fmt: skip
        shared = [c.summary() for c in result.changes if c.kind == "reserve" and len(c.want) > 1]
        if shared:  # apps sharing a node, changed together (docs/slurm.md, real-time capacity)
            record["shared"] = shared
        if result.commit.above_plan:
            record["above_plan"] = dict(result.commit.above_plan)
        record |= {k: result.lines[-1][k] for k in ("drain_s", "drained", "signal") if k in result.lines[-1]}
    except SlurmError as exc:  # recorded, and the day goes on (as the loop would)
        failed = [f"cycle failed: {exc}"]
        for app in day.scenario.apps:
            served[app.name].append(served[app.name][-1] if served[app.name] else app.initial)
            read_back[app.name].append(-1)
    record |= {"end_s": round(time.time() - slot_start, 3), "failed": failed}
    day.cycles.append(record)
    day.failures.extend(f"slot {s}: {f}" for f in failed)
    return record


def _play_slot(day: _Day, client: SlurmClient, s: int) -> None:
    """Slot ``s``: its releases submitted at its start, gpualloc's cycle, the starts read until its last seconds."""
    slot_start = day.t0 + s * day.slot_seconds
    while time.time() < slot_start:
        time.sleep(0.05)
    _submit_released(day, s)
    record = _run_cycle(day, client, s, slot_start)
    while time.time() < slot_start + day.slot_seconds - 3:
        day.read_starts()
        time.sleep(5)
    starts = day.starts
    day.log(f"slot {s}: cycle {record.get('ms', -1):.0f} ms, started: backfill {len(starts['backfill'])}, "
            f"gpualloc {len(starts['gpualloc'])} of {len(day.ids['gpualloc'])}")  # fmt: skip


def _day_record(day: _Day) -> dict[str, Any]:
    """The raw record of a played day (``slurm_days.json``'s entry)."""
    live = day.live
    return {
        "family": day.family,
        "seed": day.seed,
        "gpus": day.scenario.gpus,
        "slots": day.slots,
        "t0": day.t0,
        "slot_seconds": day.slot_seconds,
        "static_layout": day.layout,
        "priorities": {j.id: slurm_priority(j.weight) for j in day.scenario.jobs},
        "starts": day.starts,
        "submitted": {k: len(v) for k, v in day.ids.items()},
        "served": day.served,
        "read_back": day.read_back,
        "relaxed": day.relaxed,
        "cycles": day.cycles,
        "failures": day.failures,
        **(
            {"live": {"sigma": live.sigma, "runtime_model": live.runtime_model, "scheduler": live.scheduler}}
            if live is not None
            else {}
        ),
    }


def run_day(
    family: str,
    seed: int,
    root: Path,
    slot_seconds: float,
    slots: int | None,
    barrier: Any,
    t0_value: Any,
    start_lock: Any,
    live: LiveDay | None = None,
) -> dict[str, Any]:
    """One family's day on two clusters, gpualloc's and Slurm alone; the raw record (run in its own process).

    Both clusters start under ``start_lock`` (their ports are probed free one cluster at a time);
    every day then waits at ``barrier``, whose action sets the shared slot clock ``t0_value``. With
    ``live``, the day is played as a site runs it (:class:`LiveDay`): the forecast in the configuration,
    the actual demand read each cycle through ``observed``, jobs ending at their actual runtime, and the
    history of ``HISTORY_DAYS`` past days of other seeds in ``slurm.history_dir``.
    """
    scenario = _day_scenario(family, seed)
    actual = runtimes = None
    if live is not None:
        actual, runtimes = _live_inputs(scenario, family, seed, live, root / f"{family}-history")
    size = scenario.node_size
    layout = static_layout(scenario)
    day = _Day(
        family,
        seed,
        root,
        scenario,
        slot_seconds,
        slots=min(scenario.slots, slots or scenario.slots),
        layout=layout,
        backfill=LocalCluster(root / f"{family}-backfill", nodes=scenario.gpus // size, gpus_per_node=size),
        ours=LocalCluster(root / f"{family}-gpualloc", nodes=scenario.gpus // size, gpus_per_node=size),
        live=live,
        actual=actual,
        runtimes=runtimes,
        served={a.name: [] for a in scenario.apps},
        read_back={a.name: [] for a in scenario.apps},
    )
    try:
        client = _start_clusters(day, barrier, t0_value, start_lock)
        _submit_inherited(day)
        _reserve_static(day)
        t0_in = day.t0 - time.time()
        day.log(f"{len(scenario.jobs)} jobs, {day.slots} slots, static pieces {layout}, t0 in {t0_in:.0f} s")
        for s in range(day.slots):
            _play_slot(day, client, s)
    finally:
        for cl in (day.backfill, day.ours):
            cl.stop()
    return _day_record(day)


def _live_config(apps: list[dict], scenario: Scenario, minutes: float, t0: float, state: Path, history: Path,
                 replicas: dict[str, Any] | None = None):  # fmt: skip
    """A live day's configuration: the forecast read by the day's clock (day 0 starts at ``t0``), the history."""
    return config_from_dict(
        {
            "slurm": {
                "partitions": ["gpu"],
                "gres": "gpu",
                "cpus_per_gpu": 4,
                "state_dir": str(state),
                "history_dir": str(history),
                "history_days": HISTORY_DAYS,
            },
            "owned": {"partitions": ["gpu"]},
            "horizon": {
                "slots": scenario.slots,
                "slot_minutes": minutes,
                "decay": scenario.decay,
                "day_start": time.strftime("%H:%M:%S", time.gmtime(t0)),
                "day_slots": scenario.slots,
            },
            "workloads": {"default_type": "batch_inference"},
            "realtime": apps,
            **({"replicas": replicas} if replicas else {}),
        },
        "<benchmark>",
    )


def _day_worker(args: tuple, out: Path) -> None:
    """Run :func:`run_day` and write its record (or its error) to ``out``, as JSON."""
    try:
        out.write_text(json.dumps(run_day(*args)))
    except BaseException as exc:  # the other days go on; the error is reported
        out.write_text(json.dumps({"family": args[0], "error": f"{type(exc).__name__}: {exc}"}))
        raise


def _score_day(raw: dict[str, Any], day: Scenario | None = None) -> dict[str, Any]:
    """Both sides of one recorded day, scored (the scenario drawn again from its family and seed).

    A live day (``raw["live"]``) is scored on its realized day (the actual demand and runtimes, drawn again
    from the same seed), and beside it: the hindsight optimum of that day, and the simulator's prediction
    of the same planner (and of rolling greedy) on the same realized day, history and seed.
    """
    scenario = day or _day_scenario(raw["family"], raw["seed"])  # ``day``: a given day's forecast (--scenario)
    forecast = scenario
    live = raw.get("live")
    extra: dict[str, Any] = {}
    if live is not None:
        demand = NoiseModel(live["sigma"]).draw(forecast, raw["seed"])
        runtimes = draw_runtimes(forecast, live["runtime_model"], raw["seed"])
        scenario = realized_day(forecast, demand, runtimes)
        if raw["slots"] == forecast.slots:
            past = past_days(raw["family"], forecast.gpus, raw["seed"], HISTORY_DAYS, live["sigma"])
            settings = Settings(planners=(live["scheduler"], "greedy"))
            extra["hindsight"] = hindsight(scenario, settings)
            for name in dict.fromkeys((live["scheduler"], "greedy")):
                row = play_live(name, forecast, scenario, runtimes, past, live["runtime_model"],
                                            raw["seed"], settings)  # fmt: skip
                extra[f"simulated_{name}"] = row["objective"]
    T = scenario.slots
    pad = {name: curve + [curve[-1]] * (T - len(curve)) for name, curve in raw["served"].items() if curve}
    static = {a.name: [max(a.demand)] * T for a in forecast.apps}  # the forecast's peak, reserved all day
    # the static reservations exist before slot 0: their ramp counts from the peak
    backfill = score_side(scenario, raw["starts"]["backfill"], raw["t0"], raw["slot_seconds"], static,
                          {a.name: max(a.demand) for a in forecast.apps})  # fmt: skip
    ours = score_side(scenario, raw["starts"]["gpualloc"], raw["t0"], raw["slot_seconds"], pad,
                      {a.name: a.initial for a in scenario.apps})  # fmt: skip
    failed_cycles = sum(1 for c in raw["cycles"] if c["failed"])
    ms = [c["ms"] for c in raw["cycles"] if "ms" in c]
    mismatch = sum(
        1
        for name, back in raw["read_back"].items()
        for s in range(1, len(back))
        if back[s] != raw["served"][name][s - 1]
    )
    return {
        "scenario": scenario,
        "backfill": backfill,
        "gpualloc": ours,
        "failed_cycles": failed_cycles,
        "slowest_ms": max(ms, default=float("nan")),
        "median_ms": float(np.median(ms)) if ms else float("nan"),
        "latest_end_s": max((c["end_s"] for c in raw["cycles"]), default=float("nan")),
        "read_back_mismatch": mismatch,
        "median_plan_ms": float(np.median([c["plan_ms"] for c in raw["cycles"] if "plan_ms" in c]))
        if any("plan_ms" in c for c in raw["cycles"])
        else float("nan"),
        **extra,
    }


def part_days(root: Path, seed: int, families: Sequence[str], slot_seconds: float, slots: int | None,
              raw_out: Path, live: LiveDay | None = None) -> list[str]:  # fmt: skip
    """Every family's day at once, each on its own two clusters, all on one slot clock."""
    ctx = multiprocessing.get_context("fork")
    t0_value = ctx.Value("d", 0.0)

    def set_clock() -> None:  # the next whole slot after a full slot of setup (inherited jobs, reservations)
        t0_value.value = math.ceil(time.time() / slot_seconds) * slot_seconds + slot_seconds

    barrier = ctx.Barrier(len(families), action=set_clock)
    start_lock = ctx.Lock()
    procs = []
    for family in families:
        out = root / f"{family}.json"
        args = (family, seed, root, slot_seconds, slots, barrier, t0_value, start_lock, live)
        procs.append((family, out, ctx.Process(target=_day_worker, args=(args, out), name=family)))
    for _, _, p in procs:
        p.start()
    for _, _, p in procs:
        p.join()
    raws = [json.loads(out.read_text()) if out.exists() else {"family": f, "error": "no record"} for f, out, _ in procs]
    raw_out.write_text(json.dumps({"command": sys.argv[1:], "days": raws}, indent=1) + "\n")
    errors = [f"{r['family']}: {r['error']}" for r in raws if "error" in r]
    if errors:
        raise RuntimeError("; ".join(errors))
    return days_section(raws, raw_out)


def days_section(raws: Sequence[dict[str, Any]], raw_out: Path) -> list[str]:
    """``--part days``'s markdown section from the days' raw records (also ``--from-raw``: no rerun)."""
    scored = [(raw, _score_day(raw)) for raw in raws]
    if "live" in raws[0]:
        return _live_section(scored, raws[0]["seed"], raws[0]["slot_seconds"], raw_out)
    return _days_section(scored, raws[0]["seed"], raws[0]["slot_seconds"], raw_out)


def _of(value: float, best: float) -> str:
    return f"{value / best:.3f}" if best > 0 else "n/a"


def _live_section(scored: list[tuple[dict[str, Any], dict[str, Any]]], seed: int, slot_seconds: float,
                  raw_out: Path) -> list[str]:  # fmt: skip
    """The markdown section of ``--part days`` with ``--sigma`` / ``--runtime-model``: a live day per family."""
    live = scored[0][0]["live"]
    name = live["scheduler"]
    rows = []
    ratios: dict[str, list[float]] = {"backfill": [], "gpualloc": [], "sim": [], "greedy": []}
    close = wins = failed = ramps = 0
    slowest = 0.0
    plan_ms: list[float] = []
    for raw, sc in scored:
        b, g = sc["backfill"].metrics.objective, sc["gpualloc"].metrics.objective
        best = sc.get("hindsight", {}).get("reference", float("nan"))
        sim = sc.get(f"simulated_{name}", float("nan"))
        greedy = sc.get("simulated_greedy", float("nan"))
        for key, v in (("backfill", b), ("gpualloc", g), ("sim", sim), ("greedy", greedy)):
            if best > 0:
                ratios[key].append(v / best)
        gap = (g - sim) / abs(sim) if sim else float("nan")
        close += abs(gap) <= 0.02
        wins += g >= b
        failed += sc["failed_cycles"]
        ramps += sc["gpualloc"].ramp_violations
        slowest = max(slowest, sc["slowest_ms"])
        plan_ms.append(sc["median_plan_ms"])
        rows.append(
            f"| {raw['family']} | {raw['gpus']} | {len(sc['scenario'].jobs)} | {best:.1f} | {_of(b, best)} "
            f"| {_of(g, best)} | {_of(sim, best)} | {gap:+.3f} | {_of(greedy, best)} | {sc['failed_cycles']} "
            f"| {sc['gpualloc'].ramp_violations} | {sc['median_plan_ms']:.0f} | {sc['slowest_ms']:.0f} |"
        )
    mean = {k: float(np.mean(v)) if v else float("nan") for k, v in ratios.items()}
    n = len(scored)
    failures = [f"{raw['family']} {f}" for raw, _ in scored for f in raw["failures"]]
    whys = sum(1 for raw, _ in scored for c in raw["cycles"] if c.get("why"))
    run_day_utc = time.strftime("%Y-%m-%d", time.gmtime(scored[0][0]["t0"]))
    return [
        LIVE_HEADING,
        "",
        f"Command: `python benchmarks/slurm_benchmark.py --part days --seed {seed} --sigma {live['sigma']:g} "
        f"--runtime-model {live['runtime_model']} --scheduler {name}` (as root, Debian's Slurm 22.05.8), "
        f"{run_day_utc}; raw record in `{raw_out.relative_to(ROOT) if raw_out.is_relative_to(ROOT) else raw_out}`.",
        "",
        f"The seven families' days as in the section above (seed {seed}, 32 GPUs or the family's size, one slot = "
        f"{slot_seconds:g} s, every day on its own two clusters, all at once), played as a site runs them: the "
        f"configuration holds the forecast (`anchor: day`, the day's clock `horizon.day_start` at the first "
        f"slot); the actual demand (`NoiseModel({live['sigma']:g})`, the simulator's) reaches the loop only "
        "through each cycle's observed reading; every job sleeps its actual runtime "
        f"(`--runtime-model {live['runtime_model']}`) under the time limit it asked for, on both sides; the "
        f"loop's history is {HISTORY_DAYS} past days of other seeds of the family (online_benchmark's "
        "`past_days`) in `slurm.history_dir`. Slurm alone runs the same jobs with the same runtimes and is "
        "scored against the same actual demand, with each app's forecast peak reserved all day.",
        "",
        "Each column is a share of the hindsight optimum of the day's realized day (CP-SAT with every job, its "
        "actual runtime and the actual demand known; `lab.live_arms.hindsight`). `simulated` is the "
        "simulator's prediction, `gpualloc simulate`'s loop with the same planner, history, seed and realized "
        "day; `real - sim` is the real day's objective minus the simulated one, as a share of the simulated.",
        "",
        f"| family | GPUs | jobs | hindsight optimum | Slurm backfill | gpualloc {name} on Slurm | simulated "
        f"{name} | real - sim | simulated rolling greedy | failed cycles | ramp violations | median plan ms "
        "| slowest cycle ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        f"| mean | | | | {mean['backfill']:.3f} | {mean['gpualloc']:.3f} | {mean['sim']:.3f} | | "
        f"{mean['greedy']:.3f} | {failed} | {ramps} | {float(np.nanmedian(plan_ms)):.0f} | {slowest:.0f} |",
        "",
        f"Targets: within 2 % of the simulator on {close} of {n} days; at least backfill's value on {wins} of "
        f"{n} days; mean {mean['gpualloc']:.3f} of the hindsight optimum (target 0.85); {failed} failed cycles and "
        f"{ramps} ramp violations (target 0 and 0). Cycles whose decision departed from the base plan, with a "
        f"why: {whys}. Failed changes or cycles: {len(failures)}"
        + (": " + "; ".join(failures[:10]) if failures else "")
        + ".",
        "",
        "What differs between the real day and the simulated one, besides Slurm itself: (1) the loop plans "
        "a rolling horizon of the day's length from each slot, past the day's end, while the simulator plans "
        "to the day's end; (2) the loop's starts are Slurm's, read back and rounded to the nearest slot, and a "
        "job released within a slot starts when Slurm starts it; (3) a job ends when its sleep ends, a few "
        "seconds before its slot's end, and Slurm frees its GPUs when it says so; (4) both see only the demand "
        "observed before the slot, and the same seed draws the same futures. Between gpualloc and Slurm alone: "
        "(1) Slurm alone reserves each app's forecast peak all day, gpualloc's reservations follow the "
        "corrected forecast, and both are charged the actual demand's shortfall; (2) Slurm alone orders jobs "
        "by worth through `--priority` and starts one whenever room frees (backfill's pass), gpualloc at slot "
        "starts and at the cycles a job's end triggers here only through the clock (one cycle a slot); (3) "
        "neither sees a job before its release. One run, one seed per family: no spread is measured.",
        "",
    ]


def _days_section(scored: list[tuple[dict[str, Any], dict[str, Any]]], seed: int, slot_seconds: float,
                  raw_out: Path) -> list[str]:  # fmt: skip
    """The markdown section of ``--part days``."""
    rows, details = [], []
    total = {"backfill": 0.0, "gpualloc": 0.0, "failed": 0, "ramps": 0, "slowest": 0.0}
    for raw, sc in scored:
        b, g = sc["backfill"], sc["gpualloc"]
        ratio = g.metrics.objective / b.metrics.objective if b.metrics.objective > 0 else float("nan")
        rows.append(
            f"| {raw['family']} | {raw['gpus']} | {len(sc['scenario'].jobs)} | {b.metrics.objective:.1f} "
            f"| {g.metrics.objective:.1f} | {ratio:.3f} | {sc['failed_cycles']} | {b.ramp_violations} "
            f"| {g.ramp_violations} | {sc['median_ms']:.0f} | {sc['slowest_ms']:.0f} | {sc['latest_end_s']:.1f} |"
        )
        for key, side in (("Slurm backfill", b), ("gpualloc greedy", g)):
            m = side.metrics
            details.append(
                f"| {raw['family']} | {key} | {side.started} | {100 * m.utilization:.1f} % | {m.objective:.1f} "
                f"| {m.job_value:.1f} | {m.shortfall} | {m.completed} | {len(side.outside)} |"
            )
        total["backfill"] += b.metrics.objective
        total["gpualloc"] += g.metrics.objective
        total["failed"] += sc["failed_cycles"]
        total["ramps"] += g.ramp_violations
        total["slowest"] = max(total["slowest"], sc["slowest_ms"])
    wins = sum(1 for _, sc in scored if sc["gpualloc"].metrics.objective >= sc["backfill"].metrics.objective)
    failures = [f"{raw['family']} {f}" for raw, _ in scored for f in raw["failures"]]
    outside = [f"{raw['family']} {k}: {', '.join(sc[k].outside)}" for raw, sc in scored
               for k in ("backfill", "gpualloc") if sc[k].outside]  # fmt: skip
    mismatch = sum(sc["read_back_mismatch"] for _, sc in scored)
    relaxed = [f"{raw['family']} {r}" for raw, _ in scored for r in raw["relaxed"]]
    families = ", ".join(raw["family"] for raw, _ in scored)
    short = []  # gpualloc's unserved real-time GPU-slots, where they are
    for raw, sc in scored:
        for app in sc["scenario"].apps:
            curve = raw["served"][app.name]
            short += [f"{raw['family']} {app.name} slot {s} ({app.demand[s]} asked, {r} served)"
                      for s, r in enumerate(curve) if r < app.demand[s]]  # fmt: skip
    latest = max(sc["latest_end_s"] for _, sc in scored)
    run_day_utc = time.strftime("%Y-%m-%d", time.gmtime(scored[0][0]["t0"]))
    return [
        DAYS_HEADING,
        "",
        f"Command: `python benchmarks/slurm_benchmark.py --part days --seed {seed}` (as root, Debian's Slurm "
        f"22.05.8), {run_day_utc}; raw starts, curves and cycles in "
        f"`{raw_out.relative_to(ROOT) if raw_out.is_relative_to(ROOT) else raw_out}`.",
        "",
        f"One day of each family ({families}), drawn with seed {seed} (not the canonical scenarios' seed "
        f"{BENCHMARK_SEEDS[scored[0][0]['family']]}) at 32 GPUs (4 nodes of 8), or at the family's own size when "
        f"larger. One slot = {slot_seconds:g} s of wall time (Slurm's time limits count whole minutes). Every "
        f"day runs on its own two local clusters, all {2 * len(scored)} side by side on one slot clock, in one "
        "process per day. Jobs are submitted at their release with their time limit and deadline (half a slot "
        "of slack, so that a start inside its slot still ends in time); the inherited jobs run on their nodes "
        "on both sides from just before slot 0.",
        "",
        "- Slurm alone: each job submitted with `--priority` = its worth per GPU-slot x "
        f"{PRIORITY_SCALE} (priority/basic, so the number is the order; read back in `squeue --json`), "
        "Slurm's backfill (sched/backfill, default parameters), and each app's daily peak held all day by "
        "static core reservations around the inherited jobs.",
        "- gpualloc: the same jobs submitted held with `--comment type=... priority=<worth>`, one `greedy` "
        "cycle (`gpualloc slurm run`'s default) at the start of every slot with each app's demand from that "
        "slot on; each app's `initial` given at slot 0 only (the day's start), later read from its reservations.",
        "",
        "Starts are read from Slurm's `start_time` (polled every 5 s) and count in the slot nearest their start; "
        "a start outside the rules' window (before release, past a deadline) would be listed and not scored. "
        "Scored with gpu_env.metrics; ramp violations are gpu_env.rules.ramp_problems of each app's curve "
        "(Slurm alone: the static peak, reserved before slot 0; gpualloc: what each cycle committed). A failed "
        "cycle is one that raised SlurmError or whose commit lists a failed change.",
        "",
        "| family | GPUs | jobs | backfill value | gpualloc value | ratio | failed cycles | ramp violations "
        "backfill | ramp violations gpualloc | cycle median ms | slowest cycle ms | latest cycle end (s into slot) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        f"| total | | | {total['backfill']:.1f} | {total['gpualloc']:.1f} "
        f"| {total['gpualloc'] / total['backfill']:.3f} | {total['failed']} | | {total['ramps']} | "
        f"| {total['slowest']:.0f} | |",
        "",
        f"gpualloc's value is at least backfill's on {wins} of {len(scored)} days. Value = the objective "
        "(job value minus shortfall penalty).",
        "",
        "| family | side | jobs started | utilisation | value (objective) | job value | shortfall | completed "
        "by the day's end | starts outside window |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *details,
        "",
        f"Failed changes or cycles: {len(failures)}" + (": " + "; ".join(failures[:10]) if failures else "") + ". "
        f"Starts outside their window: {'; '.join(outside) if outside else 'none'}. "
        f"Slots where an app's reservations read back at the next cycle differ from what the cycle committed: "
        f"{mismatch}. gpualloc's unserved real-time GPU-slots: {'; '.join(short) if short else 'none'}. "
        f"Relaxed slot-0 states: {len(relaxed)}" + (": " + "; ".join(relaxed[:5]) if relaxed else "") + ".",
        "",
        "Load: all days run at once on this machine's 2 shared cores (other work running as well), "
        f"{sum(raw['gpus'] // 8 for raw, _ in scored) * 2} slurmds and {2 * len(scored)} controllers. Every cycle "
        f"ended within {latest:.1f} s of its slot's start (a slot is {scored[0][0]['slot_seconds']:g} s); each "
        "cycle's wall time and its start and end within the slot are in the raw file. One run, one seed per "
        "family: no spread is measured.",
        "",
        "What differs between the two sides besides the planner, so that the gap is not over-read: (1) Slurm "
        "alone keeps each app's peak reserved all day (the operator's static answer), gpualloc's reservations "
        "follow the forecast slot by slot, which frees GPUs for jobs off-peak and by itself favours gpualloc's "
        "utilisation; (2) gpualloc is given each app's demand from the slot on (a perfect forecast), which "
        "Slurm alone needs only as the peak; (3) both order jobs by the same worth per GPU-slot, Slurm through "
        "`--priority` and backfill, gpualloc through the comment, and neither sees a job before its release; "
        "(4) gpualloc places jobs only at slot starts, once a slot, while Slurm starts a job whenever it "
        "frees room (a job ending early within a slot, backfill's 30 s pass), and both sides' starts are "
        "rounded to the nearest slot in the score; (5) gpualloc's GPU choice is block-aligned by the rules, "
        "Slurm's is its own (the score does not check GPU positions).",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("cycle", "day", "days", "events", "replicas", "all"), default="all")
    parser.add_argument("--scenario", type=Path, help="--part replicas: the day to play (a scenario file)")
    parser.add_argument("--slot-seconds", type=float, default=60.0)
    parser.add_argument("-o", "--output", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=7, help="--part days: the seed of every family's day")
    parser.add_argument("--families", default=",".join(FAMILIES), help="--part days: comma-separated families")
    parser.add_argument("--slots", type=int, default=None, help="--part days: run only the first N slots (a smoke run)")
    parser.add_argument("--pending", default="50,500", help="--part cycle: comma-separated queue lengths")
    parser.add_argument("--schedulers", default="greedy,ppo", help="--part cycle: comma-separated planners")
    parser.add_argument("--from-raw", action="store_true", help="--part days: rewrite the section from --raw, no run")
    parser.add_argument("--raw", type=Path, default=None, help="--part days: the raw record (JSON)")
    parser.add_argument("--sigma", type=float, default=None,
                        help="--part days: play the days live, the actual demand at this forecast error")  # fmt: skip
    parser.add_argument("--runtime-model", choices=("exact", "trace"), default="exact",
                        help="--part days, live: jobs run to their limit, or their trace runtime")  # fmt: skip
    parser.add_argument("--scheduler", default="anticipate", help="--part days, live: the loop's planner")
    args = parser.parse_args()
    missing = missing_tools()
    if missing:
        print(f"slurm_benchmark: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.part == "replicas":  # one given day, the apps' replicas in their reservations (lab/replica_day.py)
        from lab.replica_day import main_replicas

        return main_replicas(args, parser)
    if args.part == "days":  # its own section only: the other parts' results stay as they are
        if args.slot_seconds % 60:
            parser.error("--part days: --slot-seconds must be whole minutes (Slurm's time limits are)")
        families = [f for f in args.families.split(",") if f]
        unknown = [f for f in families if f not in FAMILIES]
        if unknown:
            parser.error(f"--families: unknown {', '.join(unknown)} (expected: {', '.join(FAMILIES)})")
        live = None if args.sigma is None else LiveDay(args.sigma, args.runtime_model, args.scheduler)
        raw = args.raw or (DAYS_JSON if live is None else LIVE_JSON)
        if args.from_raw:
            lines = days_section(json.loads(raw.read_text())["days"], raw)
        else:
            with tempfile.TemporaryDirectory(prefix="gpualloc-slurm-days-") as tmp:
                lines = part_days(Path(tmp), args.seed, families, args.slot_seconds, args.slots, raw, live)
        text = args.output.read_text() if args.output.exists() else ""
        args.output.write_text(replace_section(text, lines[0], lines))
        print(f"-> {args.output}, {raw}", file=sys.stderr)
        return 0
    sections = [
        "# The Slurm driver, measured",
        "",
        f"Command: `python benchmarks/slurm_benchmark.py --part {args.part}` (as root, Debian's Slurm 22.05.8), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}.",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="gpualloc-slurm-bench-") as tmp:
        if args.part in ("cycle", "all"):
            pending = [int(n) for n in args.pending.split(",") if n]
            sections += part_cycle(Path(tmp), pending, [name for name in args.schedulers.split(",") if name])
        if args.part in ("day", "all"):
            sections += part_day(Path(tmp), args.slot_seconds)
        if args.part in ("events", "all"):
            sections += part_events(Path(tmp))
    args.output.write_text("\n".join(sections))
    print(f"-> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
