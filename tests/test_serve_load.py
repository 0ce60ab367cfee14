"""``gpualloc serve`` under a bounded load: 400 requests from 16 concurrent clients, fast and exact mixed.

Every answer is a 200 whose plan is valid for its scenario, or a 429 with
``Retry-After`` from the full exact pool (one process, one waiting): nothing else,
no error, no hang. The counts are printed (``pytest -s``) for the record; the
benchmark (benchmarks/serve_benchmark.py) runs the full 2,000.
"""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpu_env.generators import generate
from gpu_env.plan import Plan
from gpu_env.scenario import scenario_from_dict
from gpu_env.validation import validate
from tests.serve_helpers import exact_options, running_server

CLIENTS = 16
REQUESTS = 400
MIX = [("greedy", 0.35), ("fifo", 0.3), ("ppo", 0.15), ("cpsat", 0.15), ("compare", 0.05)]


def requests(seed: int = 0, count: int = REQUESTS) -> list[tuple[str, dict]]:
    """The load: small scenarios of several families, each request a path and a body."""
    rng = random.Random(seed)
    families = ("training-heavy", "mixed-control", "batch-fragmentation", "uniform-priority")
    scenarios = [generate(f, seed=s, gpus=8, num_jobs=6).to_dict() for f in families for s in range(3)]
    names, weights = zip(*MIX, strict=True)
    out = []
    for _ in range(count):
        kind = rng.choices(names, weights)[0]
        sc = rng.choice(scenarios)
        if kind == "compare":
            out.append(("/v1/compare", {"scenario": sc, "schedulers": ["fifo", "greedy"]}))
        elif kind == "cpsat":
            out.append(("/v1/plan", {"scenario": sc, "scheduler": "cpsat", "options": exact_options()}))
        elif kind == "ppo":
            out.append(("/v1/plan", {"scenario": sc, "scheduler": "ppo", "options": {"samples": 2}}))
        else:
            out.append(("/v1/plan", {"scenario": sc, "scheduler": kind}))
    return out


@pytest.mark.parametrize("clients", [CLIENTS])
def test_a_bounded_load_gives_valid_plans_or_documented_429s(tmp_path, clients):
    load = requests()
    args = ("--exact-processes", "1", "--exact-queue", "1", "--fast-queue", "64")
    with running_server(tmp_path, *args, name="load") as server:

        def client(share: list[tuple[str, dict]]) -> list[tuple[str, dict, int, dict, dict]]:
            done = []
            with server.client() as c:
                for path, body in share:
                    answer = c.post(path, json=body)
                    done.append((path, body, answer.status_code, dict(answer.headers), answer.json()))
            return done

        shares = [load[i::clients] for i in range(clients)]
        with ThreadPoolExecutor(clients) as pool:
            answers = [a for share in pool.map(client, shares) for a in share]
        assert server.process.poll() is None
        metrics_ok = server.metric('gpualloc_requests_total{endpoint="/v1/plan",status="200"}')

    assert len(answers) == REQUESTS
    statuses = Counter()
    for path, body, status, headers, got in answers:
        kind = body.get("scheduler", "compare")
        statuses[(kind, status)] += 1
        if status == 429:
            assert kind in ("cpsat",), (kind, got)
            assert int(headers["retry-after"]) >= 1 and "pool is full" in got["detail"]
            continue
        assert status == 200, (path, kind, status, got)
        sc = scenario_from_dict(body["scenario"])
        plans = got["plans"].values() if path == "/v1/compare" else [got]
        for document in plans:
            assert validate(sc, Plan.from_dict(document)) == [], (kind, document)
    print(f"\n{REQUESTS} requests from {clients} clients: {dict(sorted(statuses.items()))}")
    assert metrics_ok == sum(n for (kind, status), n in statuses.items() if status == 200 and kind != "compare")
    for kind in ("greedy", "fifo", "ppo", "cpsat"):
        assert statuses[(kind, 200)] > 0, kind
