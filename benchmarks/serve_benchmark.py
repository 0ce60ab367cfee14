"""The service's latency, throughput, overhead, load and memory, measured; writes ``benchmarks/results/serve.md``.

Against a real ``gpualloc serve`` process on 127.0.0.1 (started as the tests
start it, ``tests/serve_helpers.py``), with httpx clients in threads:

1. **Latency and throughput** of ``POST /v1/plan`` for greedy and ppo (the shipped
   configuration: its candidates and guard) on ``mixed-control`` at 1, 4 and 16
   concurrent clients: p50 and p99 of the client's time per request, requests per
   second; and the same plan made in-process (``run_scheduler``, serially, warm),
   so that the service's overhead is a ratio (service p50 at one client / in-process p50).
2. **Load**: ``--load-requests`` (2,000) from 16 concurrent clients, fast and exact
   mixed as in ``tests/test_serve_load.py``: the answers by scheduler and status;
   every plan returned is validated.
3. **Memory**: the server's resident set (``VmRSS``) after every 1,000 of
   ``--memory-requests`` (10,000) greedy and validate requests.

Run: ``.venv/bin/python benchmarks/serve_benchmark.py`` (about 10 minutes on 2 cores).
Numbers from a shared machine: other work on it shows in the tails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.fanout import warm_up_learned  # noqa: E402
from agents.options import PlanOptions  # noqa: E402
from agents.registry import run_scheduler  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402
from gpu_env.generators import BENCHMARK_SEEDS, generate  # noqa: E402
from gpu_env.plan import Plan  # noqa: E402
from gpu_env.scenario import scenario_from_dict  # noqa: E402
from gpu_env.validation import validate  # noqa: E402
from tests.serve_helpers import running_server  # noqa: E402
from tests.test_serve_load import requests as load_requests  # noqa: E402

SCENARIO = "mixed-control"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def fire(server, work: list[tuple[str, dict]], clients: int) -> tuple[list[tuple[int, float, dict, dict]], float]:
    """Send ``work`` from ``clients`` threads (each its own connection); answers and the wall time."""

    def client(share):
        out = []
        with server.client() as c:
            for path, body in share:
                t = time.perf_counter()
                answer = c.post(path, json=body)
                out.append((answer.status_code, time.perf_counter() - t, body, answer.json()))
        return out

    shares = [work[i::clients] for i in range(clients)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = [a for share in pool.map(client, shares) for a in share]
    return answers, time.perf_counter() - started


def paired(server, scheduler: str, sc, body: dict, count: int) -> tuple[list[float], list[float]]:
    """One client: each request beside the same plan made in-process, one after the other, ``count`` times.

    Paired, so that a shared machine's drifting load hits both alike; returns (in-process, service) seconds.
    """
    options = PlanOptions()
    here, there = [], []
    with server.client() as c:
        for _ in range(count):
            t = time.perf_counter()
            run_scheduler(scheduler, sc, options)
            here.append(time.perf_counter() - t)
            t = time.perf_counter()
            answer = c.post("/v1/plan", json=body)
            there.append(time.perf_counter() - t)
            assert answer.status_code == 200, answer.text
    return here, there


def latency(server, args) -> list[dict]:
    sc = generate(SCENARIO, BENCHMARK_SEEDS[SCENARIO])
    rows = []
    for scheduler, count in (("greedy", args.greedy_requests), ("ppo", args.ppo_requests)):
        warm_up_learned(scheduler, PlanOptions())
        body = {"scenario": sc.to_dict(), "scheduler": scheduler}
        fire(server, [("/v1/plan", body)] * 4, 1)  # warm connections and caches
        here, alone = paired(server, scheduler, sc, body, count)
        inproc = statistics.median(here)
        extra = statistics.median(b - a for a, b in zip(here, alone, strict=True))
        for clients in (1, 4, 16):
            if clients == 1:
                times, wall = alone, sum(alone)
            else:
                answers, wall = fire(server, [("/v1/plan", body)] * count, clients)
                assert all(status == 200 for status, *_ in answers), Counter(s for s, *_ in answers)
                times = [t for _, t, _, _ in answers]
            rows.append(
                {
                    "scheduler": scheduler,
                    "clients": clients,
                    "requests": count,
                    "p50_ms": 1000 * percentile(times, 0.5),
                    "p99_ms": 1000 * percentile(times, 0.99),
                    "throughput": count / wall,
                    "inproc_p50_ms": 1000 * inproc,
                    "inproc_throughput": 1 / inproc,
                    "extra_ms": 1000 * extra,
                    "load_average": os.getloadavg()[0],
                }
            )
            print(rows[-1], flush=True)
    return rows


def load(server, args) -> dict:
    work = load_requests(seed=1, count=args.load_requests)
    answers, wall = fire(server, work, 16)
    statuses: Counter = Counter()
    invalid = 0
    for status, _, body, got in answers:
        kind = body.get("scheduler", "compare")
        statuses[f"{kind} {status}"] += 1
        if status == 200:
            sc = scenario_from_dict(body["scenario"])
            for document in got["plans"].values() if "plans" in got else [got]:
                invalid += bool(validate(sc, Plan.from_dict(document)))
    return {"requests": len(answers), "wall_s": wall, "statuses": dict(sorted(statuses.items())), "invalid": invalid}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def memory(server, args) -> list[tuple[int, int]]:
    rng = random.Random(0)
    scenarios = [generate("training-heavy", seed=s, gpus=8, num_jobs=6) for s in range(10)]
    plans = [run_scheduler("greedy", sc).to_dict() for sc in scenarios]
    trace = [(0, rss_kib(server.pid))]
    done = 0
    while done < args.memory_requests:
        work = []
        for _ in range(1000):
            i = rng.randrange(len(scenarios))
            if rng.random() < 0.7:
                work.append(("/v1/plan", {"scenario": scenarios[i].to_dict(), "scheduler": "greedy"}))
            else:
                work.append(("/v1/validate", {"scenario": scenarios[i].to_dict(), "plan": plans[i]}))
        answers, _ = fire(server, work, 4)
        assert all(status == 200 for status, *_ in answers)
        done += len(work)
        trace.append((done, rss_kib(server.pid)))
        print(trace[-1], flush=True)
    return trace


def report(args, rows, loaded, trace, seconds) -> str:
    lines = [
        "# `gpualloc serve`: latency, throughput, overhead, load and memory",
        "",
        f"Written by `.venv/bin/python benchmarks/serve_benchmark.py` in {seconds / 60:.0f} min on "
        f"{platform.machine()} (CPython {platform.python_version()}), 2 cores shared with other work; "
        "one server process (`gpualloc serve`, fast mode: 2 threads; exact mode: 1 worker process, 1 waiting), "
        "httpx clients in threads of the same machine, one connection each. What the service is: docs/serve.md.",
        "",
        f"## 1. `POST /v1/plan` on {SCENARIO} (16 GPUs, 21 jobs, 1 app)",
        "",
        "Client time per request, from the request's first byte to the answer's last. In-process: the same plan "
        "made by `run_scheduler` in a warm process, each one just before one request of the 1-client row (paired, "
        "so that the shared machine's drifting load hits both alike). Overhead: service p50 / in-process p50, and "
        "the median of the paired differences in ms: at 1 client that is the service's own cost (HTTP, JSON both "
        "ways, the scenario's check, the plan's validation); with more clients the ratio adds the queueing of the "
        "clients on 2 fast-mode threads and 2 cores, which the clients' own threads share. Load average: the "
        "machine's 1-minute load (other work included) after the row.",
        "",
        "| scheduler | clients | requests | p50 ms | p99 ms | requests/s | in-process p50 ms | in-process plans/s "
        "| overhead (p50 ratio) | overhead ms (paired, 1 client) | load average |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['scheduler']} | {r['clients']} | {r['requests']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['throughput']:.1f} | {r['inproc_p50_ms']:.1f} | {r['inproc_throughput']:.1f} | "
            f"{r['p50_ms'] / r['inproc_p50_ms']:.2f} | {format(r['extra_ms'], '+.1f') if r['clients'] == 1 else ''} | "
            f"{r['load_average']:.1f} |"
        )
    lines += [
        "",
        "With more clients than the 2 fast-mode threads and 2 cores, requests queue in the server: p50 grows with "
        "the clients. Greedy's throughput falls from 1 to 16 clients because the benchmark's 16 client threads (one "
        "Python process, one GIL) share the 2 cores with the server; ppo's rises, its onnxruntime calls releasing "
        "the GIL. With the load average of the last column on 2 cores, these are figures of a busy shared machine.",
        "",
        f"## 2. Load: {loaded['requests']} requests from 16 concurrent clients, fast and exact mixed",
        "",
        "The mix of `tests/test_serve_load.py` (greedy 35 %, fifo 30 %, ppo with 2 candidates 15 %, cpsat with "
        "deterministic time 0.5 15 %, compare fifo+greedy 5 %) on 12 small scenarios (8 GPUs, 6 jobs). "
        f"Wall time {loaded['wall_s']:.0f} s. Plans returned that break a rule: {loaded['invalid']}.",
        "",
        "| scheduler | status | answers |",
        "| --- | --- | ---: |",
    ]
    for key, n in loaded["statuses"].items():
        kind, status = key.split()
        lines.append(f"| {kind} | {status} | {n} |")
    lines += [
        "",
        "Every answer is a 200 or, for cpsat when the one exact worker and its one waiting place are taken, "
        "a 429 with `Retry-After`; nothing else.",
        "",
        f"## 3. Memory after {trace[-1][0]} requests",
        "",
        "Greedy plans (70 %) and validations (30 %) of 10 small scenarios from 4 clients; the server's resident "
        "set after each thousand.",
        "",
        "| requests | VmRSS MiB |",
        "| ---: | ---: |",
    ]
    lines += [f"| {n} | {kib / 1024:.1f} |" for n, kib in trace]
    first_k = trace[1][1] if len(trace) > 1 else trace[0][1]
    lines += [
        "",
        f"Growth from 1,000 to {trace[-1][0]} requests: {(trace[-1][1] - first_k) / 1024:+.1f} MiB.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--greedy-requests", type=int, default=200)
    p.add_argument("--ppo-requests", type=int, default=100)
    p.add_argument("--load-requests", type=int, default=2000)
    p.add_argument("--memory-requests", type=int, default=10_000)
    p.add_argument("-o", "--output", type=Path, default=ROOT / "benchmarks" / "results" / "serve.md")
    args = p.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        with running_server(Path(tmp), "--exact-queue", "1", name="bench") as server:
            rows = latency(server, args)
            loaded = load(server, args)
            trace = memory(server, args)
    text = report(args, rows, loaded, trace, time.perf_counter() - started)
    write_text_atomic(args.output, text)
    write_text_atomic(
        args.output.with_suffix(".json"),
        json.dumps({"latency": rows, "load": loaded, "memory": trace}, indent=1) + "\n",
    )
    print(text)


if __name__ == "__main__":
    main()
