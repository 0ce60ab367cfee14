"""The Slurm driver on the 4-node test cluster: cycle times, and a simulated day against Slurm's own backfill.

    python benchmarks/slurm_benchmark.py                  # both parts -> benchmarks/results/slurm.md
    python benchmarks/slurm_benchmark.py --part cycle     # cycle times only (about a minute)
    python benchmarks/slurm_benchmark.py --part day       # the accelerated day only (about 26 minutes)
    python benchmarks/slurm_benchmark.py --part events -o benchmarks/results/slurm_events.md   # about 3 minutes

Needs root and Debian's Slurm (agents/slurm/localcluster.py starts and stops the clusters).

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
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.options import PlanOptions  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from agents.slurm import jsonread  # noqa: E402
from agents.slurm.client import SlurmClient  # noqa: E402
from agents.slurm.config import config_from_dict  # noqa: E402
from agents.slurm.errors import SlurmError  # noqa: E402
from agents.slurm.localcluster import LocalCluster, missing_tools  # noqa: E402
from agents.slurm.loop import cycle  # noqa: E402
from gpu_env.generators import generate  # noqa: E402
from gpu_env.metrics import compute_metrics  # noqa: E402
from gpu_env.plan import Placement, Plan  # noqa: E402

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


def part_cycle(root: Path) -> list[str]:
    rows = []
    app = {"name": "chat", "demand": [6, 6, 7, 8, 9, 9, 8, 8, 7, 6, 6, 5] * 2, "ramp": 2, "penalty": 8}
    config = _config([{**app, "initial": 6}])  # served at its demand already (no reservation yet)
    for scheduler in ("greedy", "ppo"):  # the first call of the learned planner loads and warms its policy
        run_scheduler(scheduler, generate("mixed-control", 0, gpus=32))
    with LocalCluster(root / "cycle", nodes=4, gpus_per_node=8) as cluster:
        client = SlurmClient(env=cluster.env)
        for n in (50, 500):
            for scheduler in ("greedy", "ppo"):
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
                first = cycle(config, client, scheduler, PlanOptions(time_limit=10.0))
                second = cycle(config, client, scheduler, PlanOptions(time_limit=10.0))
                f, s = first.timings, second.timings
                cells = [n, scheduler, *(f"{f[k]:.0f}" for k in ("snapshot", "plan", "commit", "total"))]
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
        "| pending | scheduler | snapshot ms | plan ms | commit ms | cycle ms | started | changes | 2nd cycle ms "
        "| 2nd changes | sbatch of all (s) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("cycle", "day", "events", "all"), default="all")
    parser.add_argument("--slot-seconds", type=float, default=60.0)
    parser.add_argument("-o", "--output", type=Path, default=OUT)
    args = parser.parse_args()
    missing = missing_tools()
    if missing:
        print(f"slurm_benchmark: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    sections = [
        "# The Slurm driver, measured",
        "",
        f"Command: `python benchmarks/slurm_benchmark.py --part {args.part}` (as root, Debian's Slurm 22.05.8), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}.",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="gpualloc-slurm-bench-") as tmp:
        if args.part in ("cycle", "all"):
            sections += part_cycle(Path(tmp))
        if args.part in ("day", "all"):
            sections += part_day(Path(tmp), args.slot_seconds)
        if args.part in ("events", "all"):
            sections += part_events(Path(tmp))
    args.output.write_text("\n".join(sections))
    print(f"-> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
