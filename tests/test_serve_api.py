"""``gpualloc serve`` against a real server: every endpoint's answer, and bad input refused with the CLI's words.

One server (a process on 127.0.0.1, a port the OS chose) serves the whole module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agents import cli
from agents.live.allocator import decide
from agents.options import PlanOptions
from agents.registry import SCHEDULERS, run_scheduler
from gpu_env import scenario as scenario_module
from gpu_env.generators import BENCHMARK_SEEDS, generate
from gpu_env.plan import Plan
from gpu_env.scenario import ScenarioError, load_scenario, scenario_from_dict
from gpu_env.validation import validate
from tests.serve_helpers import exact_options, plan_body, running_server, strip_timing
from tests.test_scenario import ADVERSARIAL

BODY_LIMIT = 200_000
OPT = b'{"scenario": {}, "scheduler": "fifo", "options": '


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    with running_server(tmp, "--max-body-bytes", str(BODY_LIMIT), "--max-time-limit", "60") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with server.client() as c:
        yield c


def small(seed: int = 3):
    return generate("mixed-control", seed=seed, gpus=8, num_jobs=6)


# ----------------------------------------------------------------------------- the endpoints


@pytest.mark.parametrize("scheduler", ["fifo", "greedy", "ppo"])
def test_plan_is_what_gpualloc_plan_writes(client, capsys, tmp_path, scheduler):
    sc = generate("training-heavy", BENCHMARK_SEEDS["training-heavy"])
    answer = client.post("/v1/plan", json=plan_body(sc, scheduler))
    assert answer.status_code == 200, answer.text
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert cli.main(["plan", str(path), "-s", scheduler]) == 0
    written = json.loads(capsys.readouterr().out)
    assert strip_timing(answer.json()) == strip_timing(written)
    assert answer.json()["solve_ms"] > 0


def test_exact_plan_in_a_worker_equals_the_plan_made_here(client):
    sc = small()
    answer = client.post("/v1/plan", json=plan_body(sc, "cpsat", **exact_options()))
    assert answer.status_code == 200, answer.text
    here = run_scheduler("cpsat", sc, PlanOptions(**exact_options()))
    assert strip_timing(answer.json()) == strip_timing(here.to_dict())


def test_scenario_as_yaml_text_is_read_like_a_file(client):
    sc = small()
    text = scenario_module.dump_scenario(sc)
    by_text = client.post("/v1/plan", json={"scenario": text, "scheduler": "greedy"})
    by_object = client.post("/v1/plan", json=plan_body(sc, "greedy"))
    assert by_text.status_code == by_object.status_code == 200
    assert strip_timing(by_text.json()) == strip_timing(by_object.json())


def test_validate_names_the_rules_a_plan_breaks(client):
    sc = small()
    plan = run_scheduler("greedy", sc).to_dict()
    good = client.post("/v1/validate", json={"scenario": sc.to_dict(), "plan": plan})
    assert good.status_code == 200, good.text
    assert good.json()["valid"] is True and good.json()["violations"] == []
    assert good.json()["metrics"] == plan["metrics"]
    broken = json.loads(json.dumps(plan))
    first = broken["placements"][0]
    broken["placements"].append({**first, "job": broken["placements"][1]["job"]})  # a second job on the same GPUs
    broken["placements"].pop(1)
    bad = client.post("/v1/validate", json={"scenario": sc.to_dict(), "plan": broken})
    assert bad.status_code == 200
    expected = validate(sc, Plan.from_dict(broken))
    assert bad.json()["valid"] is False
    assert bad.json()["violations"] == [{"rule": v.rule.value, "message": v.message} for v in expected]
    assert any(v["rule"] == "1-one-job-per-gpu" for v in bad.json()["violations"])


def test_decide_is_agents_rolling_decide(client):
    state = {
        "name": "now",
        "cluster": {"gpus": 8, "node_size": 8},
        "horizon": {"slots": 4},
        "realtime": [{"name": "chat", "demand": [2, 3, 3, 2], "ramp": 1, "initial": 2, "penalty": 8}],
        "jobs": [
            {"id": "etl", "type": "batch_inference", "gpus": 2, "duration": 2, "running_on": [0, 1]},
            {"id": "sft", "type": "training", "gpus": 2, "duration": 3, "priority": 2},
            {"id": "eval", "type": "batch_inference", "gpus": 4, "duration": 2, "release": 1},
        ],
    }
    answer = client.post("/v1/decide", json={"state": state, "scheduler": "fifo"})
    assert answer.status_code == 200, answer.text
    here = decide(scenario_from_dict(state), "fifo").to_dict()
    got = answer.json()
    assert strip_timing(got["plan"]) == strip_timing(here["plan"])
    assert {k: v for k, v in got.items() if k != "plan"} == {k: v for k, v in here.items() if k != "plan"}
    assert got["start_now"] == [{"job": "sft", "gpus": [2, 3]}] and got["realtime_now"] == {"chat": 3}


CLUSTER_STATE = {
    "gpus": 8,
    "horizon": 4,
    "running": [
        {"job": {"id": "etl", "type": "batch_inference", "gpus": 2, "duration": 5}, "gpus": [0, 1], "remaining": 2}
    ],
    "queue": [
        {"id": "sft", "type": "training", "gpus": 2, "duration": 3, "priority": 2},
        {"id": "eval", "type": "batch_inference", "gpus": 4, "duration": 2, "release": 1},
        {"id": "late", "type": "batch_inference", "gpus": 1, "duration": 3, "release": 2, "deadline": 4},
    ],
    "apps": [{"name": "chat", "demand": [2, 3, 3, 2], "ramp": 1, "initial": 2, "penalty": 8}],
}


def test_decide_takes_the_cluster_state_form_too(client):
    from agents.live import ClusterState, RunningJob
    from gpu_env.scenario import App, Job, JobType

    state = ClusterState(
        gpus=8,
        horizon=4,
        running=(RunningJob(Job("etl", JobType.BATCH_INFERENCE, 2, 5), gpus=(0, 1), remaining=2),),
        queue=(
            Job("sft", JobType.TRAINING, 2, 3, priority=2.0),
            Job("eval", JobType.BATCH_INFERENCE, 4, 2, release=1),
            Job("late", JobType.BATCH_INFERENCE, 1, 3, release=2, deadline=4),
        ),
        apps=(App("chat", demand=(2, 3, 3, 2), ramp=1, initial=2, penalty=8.0),),
    )
    answer = client.post("/v1/decide", json={"state": CLUSTER_STATE, "scheduler": "greedy"})
    assert answer.status_code == 200, answer.text
    here = decide(state, "greedy").to_dict()
    got = answer.json()
    assert strip_timing(got["plan"]) == strip_timing(here["plan"])
    assert {k: v for k, v in got.items() if k != "plan"} == {k: v for k, v in here.items() if k != "plan"}
    assert got["expired"] == ["late"]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda s: s["queue"][1].update(gpus=0), "state: queue[1].gpus: expected a positive integer, got 0"),
        (lambda s: s["running"][0]["job"].update(priority=-1), "state: running[0].job.priority: expected a positive"),
        (lambda s: s["running"][0].update(gpus=[1, 2, 3]), "state: running[0].gpus:"),
        (lambda s: s["running"][0].update(remaining=0), "state: running[0].remaining: expected a positive integer"),
        (lambda s: s["apps"][0].update(ramp=-1), "state: apps[0].ramp: expected a"),
        (lambda s: s.update(horizon=0), "state: horizon: expected a positive integer, got 0"),
        (lambda s: s.update(colour=1), "state: colour: unknown key"),
        (lambda s: s.update(day_forecast=[[2], [3]]), "state: day_forecast: expected one list per app (1), got 2"),
        (
            lambda s: (s["apps"].append({**s["apps"][0], "name": "api"}), s.update(observed=[[2], [3, 3]])),
            "state: observed: expected lists of one length (one slot each), got lengths [1, 2]",
        ),
    ],
)
def test_a_bad_cluster_state_names_its_field(client, change, fragment):
    state = json.loads(json.dumps(CLUSTER_STATE))
    change(state)
    assert_refused(client.post("/v1/decide", json={"state": state}), 422, fragment)


def test_compare_returns_every_plan_side_by_side(client):
    sc = small(4)
    answer = client.post(
        "/v1/compare",
        json={"scenario": sc.to_dict(), "schedulers": ["fifo", "greedy", "cpsat"], "options": exact_options()},
    )
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["schedulers"] == ["fifo", "greedy", "cpsat"] and got["errors"] == {}
    assert [row["scheduler"] for row in got["table"]] == ["fifo", "greedy", "cpsat"]
    assert scenario_from_dict(got["scenario"]) == sc
    for name, document in got["plans"].items():
        assert validate(sc, Plan.from_dict(document)) == [], name
        row = next(r for r in got["table"] if r["scheduler"] == name)
        assert row["objective"] == document["metrics"]["objective"]
    assert got["table"][2]["objective"] >= got["table"][0]["objective"] - 1e-6  # exact never below fifo here


def test_health_ready_and_metrics(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["stateless"] is True
    assert ready["schedulers"] == {n: ("exact" if n in ("cpsat", "full") else "fast") for n in SCHEDULERS}
    client.post("/v1/plan", json=plan_body(small(), "greedy"))
    client.post("/v1/plan", json={"scenario": {}, "scheduler": "greedy"})
    text = client.get("/metrics").text
    for needle in (
        'gpualloc_requests_total{endpoint="/v1/plan",status="200"}',
        'gpualloc_requests_total{endpoint="/v1/plan",status="422"}',
        'gpualloc_errors_total{endpoint="/v1/plan",kind="bad_input"}',
        'gpualloc_request_seconds_bucket{endpoint="/v1/plan",le="+Inf"}',
        'gpualloc_plan_objective_count{scheduler="greedy"}',
        'gpualloc_plan_objective_last{scheduler="greedy"}',
        'gpualloc_plan_solve_seconds_count{scheduler="greedy"}',
        "gpualloc_exact_running 0.0",
    ):
        assert needle in text, needle


def test_openapi_documents_every_endpoint_with_the_projects_types(client):
    doc = client.get("/openapi.json").json()
    for path in ("/v1/plan", "/v1/validate", "/v1/decide", "/v1/compare"):
        op = doc["paths"][path]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].startswith("#/components/schemas/")
        assert {"200", "422", "429"} <= set(op["responses"])
    components = doc["components"]["schemas"]
    assert set(components["JobEntry"]["properties"]["type"].get("enum", [])) or "JobType" in components
    assert client.get("/docs").status_code == 200


def test_the_schemas_hold_every_key_the_readers_accept_and_no_other():
    from agents.live import ClusterState, RunningJob
    from agents.serve import bodies, schemas

    assert set(schemas.ScenarioDocument.model_fields) == scenario_module._TOP_KEYS
    assert set(schemas.Cluster.model_fields) == scenario_module._CLUSTER_KEYS
    assert set(schemas.Horizon.model_fields) == scenario_module._HORIZON_KEYS
    assert set(schemas.RealtimeApp.model_fields) == scenario_module._APP_KEYS
    assert set(schemas.JobEntry.model_fields) == scenario_module._JOB_KEYS
    assert set(schemas.SchedulerName.__members__) == set(SCHEDULERS)
    assert set(schemas.ClusterStateDocument.model_fields) == bodies.STATE_KEYS == set(ClusterState.__dataclass_fields__)
    assert set(schemas.RunningEntry.model_fields) == set(RunningJob.__dataclass_fields__)
    assert (
        set(schemas.Options.model_fields)
        == set(bodies.OPTION_KEYS)
        == set(PlanOptions.__dataclass_fields__) - {"policy"}
    )


# ----------------------------------------------------------------------------- bad input: 4xx naming the field


def assert_refused(answer, status: int, *fragments: str) -> dict:
    assert answer.status_code == status, answer.text
    detail = answer.json()["detail"]
    assert "\n" not in detail and "Traceback" not in detail
    for fragment in fragments:
        assert fragment in detail, detail
    return answer.json()


@pytest.mark.parametrize(("kind", "suffix", "text", "field", "reason"), ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
def test_adversarial_scenarios_are_refused_with_the_clis_words(
    client, tmp_path: Path, kind: str, suffix: str, text: str, field: str, reason: str
):
    path = tmp_path / f"adversarial{suffix}"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    cli_words = str(info.value).replace(str(path), "scenario", 1)
    if suffix == ".json" and not text.lstrip().startswith("{"):
        pytest.skip("only JSON objects are read as JSON text")
    answer = client.post("/v1/plan", json={"scenario": text, "scheduler": "greedy"})
    got = assert_refused(answer, 422, field, reason)
    assert got["detail"] == cli_words
    assert (got["source"], got["field"]) == ("scenario", field)


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        (b"{not json", ("request: <line 1>: invalid JSON",)),
        (b"[1, 2]", ("request: <top>: expected a mapping, got a list",)),
        (b"\xff\xfe", ("request: <body>: not UTF-8",)),
        (b'{"scenario": {}, "scheduler": "greedy", "colour": 1}', ("request: colour: unknown key",)),
        (b'{"scheduler": "greedy"}', ("request: scenario: missing required key",)),
        (b'{"scenario": {}, "scheduler": "oracle"}', ("request: scheduler: unknown scheduler 'oracle'", "fifo")),
        (b'{"scenario": {"name": "x"}, "scheduler": "greedy"}', ("scenario: cluster: missing required key",)),
        (
            b'{"scenario": {"name": "x", "cluster": {"gpus": 8, "colour": 1}, "horizon": {"slots": 4}}, '
            b'"scheduler": "fifo"}',
            ("scenario: cluster.colour: unknown key",),
        ),
        (
            b'{"scenario": {"name": "x", "cluster": {"gpus": 8}, "horizon": {"slots": 4}, '
            b'"jobs": [{"id": "a", "type": "training", "gpus": 1, "duration": 1, "priority": NaN}]}, '
            b'"scheduler": "fifo"}',
            ("scenario: jobs[0].priority: expected a finite number",),
        ),
        (
            b'{"scenario": {"name": "x", "cluster": {"gpus": 8}, "horizon": {"slots": 4, "decay": -Infinity}}, '
            b'"scheduler": "fifo"}',
            ("scenario: horizon.decay: expected a finite number",),
        ),
        (
            OPT + b'{"time_limit": Infinity}}',
            ("options.time_limit", "finite"),
        ),
        (OPT + b'{"time_limit": NaN}}', ("options.time_limit", "finite")),
        (OPT + b'{"time_limit": 600}}', ("options.time_limit", "<= 60")),
        (OPT + b'{"time_limit": -1}}', ("options.time_limit", "positive")),
        (OPT + b'{"workers": 64}}', ("options.workers", "at most 1")),
        (OPT + b'{"samples": 0}}', ("options.samples", "positive")),
        (OPT + b'{"guard": "oracle"}}', ("options.guard", "greedy")),
        (
            OPT + b'{"policy": "/etc/passwd"}}',
            ("options.policy: unknown key",),
        ),
        (b'{"scenario": {}, "schedulers": []}', ("request: schedulers: expected a non-empty list",)),
    ],
    ids=lambda v: v[:40].decode("latin-1") if isinstance(v, bytes) else None,
)
def test_malformed_bodies_are_422_naming_the_problem(client, body: bytes, fragments: tuple[str, ...]):
    path = "/v1/compare" if b'"schedulers"' in body else "/v1/plan"
    answer = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert_refused(answer, 422, *fragments)


def test_compare_refuses_a_repeated_scheduler(client):
    answer = client.post("/v1/compare", json={"scenario": small().to_dict(), "schedulers": ["fifo", "fifo"]})
    assert_refused(answer, 422, "request: schedulers[1]: duplicate scheduler 'fifo'")


def test_validate_refuses_a_malformed_plan_naming_its_field(client):
    answer = client.post("/v1/validate", json={"scenario": small().to_dict(), "plan": {"placements": [{"job": "a"}]}})
    assert_refused(answer, 422, "plan: placements[0].gpus: missing required key")


def test_a_body_over_the_limit_is_413_before_it_is_read(client):
    answer = client.post("/v1/plan", content=b"{" + b" " * (BODY_LIMIT + 10) + b"}")
    assert_refused(answer, 413, f"above this server's limit of {BODY_LIMIT} bytes", "--max-body-bytes")

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(BODY_LIMIT // 10_000 + 2):
            yield b" " * 10_000

    answer = client.post("/v1/plan", content=chunks())
    assert_refused(answer, 413, f"more than {BODY_LIMIT} bytes")
    assert client.get("/healthz").status_code == 200


def test_the_format_limits_apply_to_bodies(client):
    sc = {"name": "x", "cluster": {"gpus": 100_000}, "horizon": {"slots": 4}}
    assert_refused(client.post("/v1/plan", json={"scenario": sc, "scheduler": "fifo"}), 422, "cluster.gpus", "at most")


# ----------------------------------------------------------------------------- binding and the token


def test_a_public_host_without_a_token_is_refused(capsys):
    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--token-file" in err


def test_serve_without_the_web_stack_names_the_extra(capsys, monkeypatch):
    import sys

    for name in [m for m in sys.modules if m == "agents.serve.server" or m.startswith(("agents.serve.app", "fastapi"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi now fails as when it is not installed
    assert cli.main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'pip install -e ".[serve]"' in err and "'fastapi'" in err


def test_the_token_guards_the_api_but_not_the_probes(tmp_path):
    token = tmp_path / "token.txt"
    token.write_text("s3cret-token-of-some-length\n")
    with running_server(tmp_path, "--token-file", str(token), name="token") as s, s.client() as c:
        body = plan_body(small(), "fifo")
        assert c.post("/v1/plan", json=body).status_code == 401
        assert c.post("/v1/plan", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        answer = c.post("/v1/plan", json=body, headers={"Authorization": "Bearer s3cret-token-of-some-length"})
        assert answer.status_code == 200, answer.text
        assert c.get("/metrics").status_code == 401
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
        assert c.get("/").status_code == 200
