"""Loading scenarios: the example of SPEC section 1 and every malformed input it lists."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpu_env.generators import FAMILIES, generate
from gpu_env.scenario import (
    MAX_APPS,
    MAX_GPUS,
    MAX_GRID,
    MAX_JOBS,
    MAX_SLOTS,
    App,
    FieldReader,
    Job,
    JobType,
    Scenario,
    ScenarioError,
    _check_job,
    _plain_job_ok,
    load_scenario,
    save_scenario,
    scenario_from_dict,
)

SPEC_EXAMPLE: dict[str, Any] = {
    "name": "mixed-control",
    "cluster": {"gpus": 16, "node_size": 8},
    "horizon": {"slots": 24, "slot_minutes": 60, "decay": 0.99},
    "realtime": [
        {
            "name": "chat",
            "demand": [2, 2, 1, 1, 1, 2, 3, 5, 6, 6, 6, 5, 6, 6, 5, 4, 3, 3, 3, 2, 2, 2, 2, 2],
            "ramp": 2,
            "initial": 2,
            "penalty": 8,
        }
    ],
    "jobs": [
        {
            "id": "llama-sft",
            "type": "training",
            "gpus": 4,
            "duration": 10,
            "release": 0,
            "priority": 3,
            "deadline": 20,
            "value": 120,
        },
        {"id": "nightly-eval", "type": "batch_inference", "gpus": 2, "duration": 3, "running_on": [8, 9]},
    ],
}


def load(data: dict[str, Any]):
    return scenario_from_dict(data, "s.yaml")


def test_spec_example_loads_with_defaults():
    s = load(SPEC_EXAMPLE)
    assert (s.gpus, s.node_size, s.slots, s.decay) == (16, 8, 24, 0.99)
    chat = s.apps[0]
    assert (chat.ramp, chat.initial, chat.penalty) == (2, 2, 8.0)
    sft, nightly = s.jobs
    assert sft.type is JobType.TRAINING
    assert sft.weight == pytest.approx(120 / (4 * 10))  # value overrides priority
    assert nightly.release == 0 and nightly.priority == 1.0 and nightly.running_on == (8, 9)


def test_defaults_node_size_initial_decay():
    data = copy.deepcopy(SPEC_EXAMPLE)
    del data["cluster"]["node_size"], data["horizon"]["decay"], data["realtime"][0]["initial"]
    s = load(data)
    assert s.node_size == 16 and s.decay == 1.0 and s.apps[0].initial == 2  # initial = D_0


def test_yaml_and_json_files_round_trip(tmp_path: Path):
    for family in FAMILIES:
        s = generate(family, seed=3)
        for suffix in (".yaml", ".json"):
            path = tmp_path / f"{family}{suffix}"
            save_scenario(s, path)
            assert load_scenario(path) == s


def mutate(path: str, value: Any, delete: bool = False) -> dict[str, Any]:
    """The SPEC example with one field (dotted path, [i] for lists) set or deleted."""
    data = copy.deepcopy(SPEC_EXAMPLE)
    parts = path.replace("[", ".").replace("]", "").split(".")
    node: Any = data
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
    if delete:
        del node[last]
    else:
        node[last] = value
    return data


BAD_INPUTS = [
    # (description, data, field named, words in the reason)
    ("unknown top key", mutate("colour", "red"), "colour", "unknown key"),
    ("unknown job key", mutate("jobs[0].gpu", 4), "jobs[0].gpu", "unknown key"),
    ("unknown app key", mutate("realtime[0].peak", 4), "realtime[0].peak", "unknown key"),
    ("missing name", mutate("name", None, delete=True), "name", "missing"),
    ("missing cluster", mutate("cluster", None, delete=True), "cluster", "missing"),
    ("missing gpus", mutate("cluster.gpus", None, delete=True), "cluster.gpus", "missing"),
    ("missing slots", mutate("horizon.slots", None, delete=True), "horizon.slots", "missing"),
    ("missing job id", mutate("jobs[0].id", None, delete=True), "jobs[0].id", "missing"),
    ("missing duration", mutate("jobs[0].duration", None, delete=True), "jobs[0].duration", "missing"),
    ("missing demand", mutate("realtime[0].demand", None, delete=True), "realtime[0].demand", "missing"),
    ("gpus a string", mutate("cluster.gpus", "16"), "cluster.gpus", "integer"),
    ("slots a float", mutate("horizon.slots", 24.5), "horizon.slots", "integer"),
    ("job gpus a bool", mutate("jobs[0].gpus", True), "jobs[0].gpus", "integer"),
    ("priority a string", mutate("jobs[0].priority", "high"), "jobs[0].priority", "number"),
    ("jobs not a list", mutate("jobs", {"a": 1}), "jobs", "list"),
    ("type unknown", mutate("jobs[0].type", "finetune"), "jobs[0].type", "training"),
    ("zero gpus", mutate("cluster.gpus", 0), "cluster.gpus", "positive"),
    ("negative job size", mutate("jobs[0].gpus", -2), "jobs[0].gpus", "positive"),
    ("zero duration", mutate("jobs[0].duration", 0), "jobs[0].duration", "positive"),
    ("zero slots", mutate("horizon.slots", 0), "horizon.slots", "positive"),
    ("negative priority", mutate("jobs[0].priority", -1), "jobs[0].priority", "positive"),
    ("zero value", mutate("jobs[0].value", 0), "jobs[0].value", "positive"),
    ("decay above one", mutate("horizon.decay", 1.5), "horizon.decay", "(0, 1]"),
    ("short demand", mutate("realtime[0].demand", [1, 2, 3]), "realtime[0].demand", "24 values"),
    ("negative demand", mutate("realtime[0].demand[3]", -1), "realtime[0].demand[3]", "at least 0"),
    ("duplicate id", mutate("jobs[1].id", "llama-sft"), "jobs[1].id", "duplicate"),
    ("job larger than cluster", mutate("jobs[0].gpus", 32), "jobs[0].gpus", "cluster has 16"),
    ("running_on wrong length", mutate("jobs[1].running_on", [8, 9, 10]), "jobs[1].running_on", "expected 2 GPUs"),
    ("running_on not contiguous", mutate("jobs[1].running_on", [8, 10]), "jobs[1].running_on", "consecutive"),
    ("running_on across nodes", mutate("jobs[1].running_on", [7, 8]), "jobs[1].running_on", "inside one node"),
    ("running_on outside", mutate("jobs[1].running_on", [16, 17]), "jobs[1].running_on", "0..15"),
    ("node_size above gpus", mutate("cluster.node_size", 32), "cluster.node_size", "at most"),
]


@pytest.mark.parametrize(("what", "data", "field", "reason"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_malformed_input_names_file_and_field(what: str, data: dict[str, Any], field: str, reason: str):
    with pytest.raises(ScenarioError) as info:
        load(data)
    err = info.value
    assert err.source == "s.yaml"
    assert err.field == field, what
    assert reason in err.reason, (what, err.reason)
    assert str(err).startswith(f"s.yaml: {field}: ")


def test_running_on_overlapping_another_running_job():
    data = copy.deepcopy(SPEC_EXAMPLE)
    data["jobs"].append({"id": "other", "type": "quantization", "gpus": 2, "duration": 1, "running_on": [9, 10]})
    with pytest.raises(ScenarioError, match=r"jobs\[2\]\.running_on: GPU 9 is already held by running job"):
        load(data)


def test_large_block_allowed_from_a_node_boundary():
    data = mutate("jobs[0].gpus", 12)  # 12 > node_size 8: the block 0..11 starts on a boundary
    assert load(data).jobs[0].gpus == 12


def test_inherited_work_that_leaves_no_room_for_the_apps_initial():
    data = copy.deepcopy(SPEC_EXAMPLE)
    data["realtime"][0]["initial"] = 16  # the running job holds 2 of the 16 GPUs before slot 0 as well
    data["realtime"][0]["ramp"] = 1
    with pytest.raises(
        ScenarioError, match=r"realtime\[0\]\.initial: the apps' initial GPUs \(16\) plus the inherited"
    ):
        load(data)
    data["realtime"][0]["initial"] = 14  # what the running job leaves: a state that can exist
    assert load(data).apps[0].initial == 14


def test_a_job_that_fits_nowhere_is_legal():
    data = mutate("jobs[0].deadline", 5)  # 10 slots cannot end by slot 5
    assert load(data).jobs[0].deadline == 5


def test_file_errors(tmp_path: Path):
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncluster: {gpus: 4\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: <line \d+>: invalid YAML"):
        load_scenario(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    with pytest.raises(ScenarioError, match="invalid JSON"):
        load_scenario(bad_json)
    top_list = tmp_path / "list.json"
    top_list.write_text(json.dumps([1, 2]))
    with pytest.raises(ScenarioError, match="<top>: expected a mapping"):
        load_scenario(top_list)


def test_yaml_never_constructs_python_objects(tmp_path: Path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("name: !!python/object/apply:os.system ['echo hi']\ncluster: {gpus: 1}\nhorizon: {slots: 1}\n")
    with pytest.raises(ScenarioError, match="invalid YAML"):
        load_scenario(evil)


# ----------------------------------------------------------------------------- one check, at construction


def test_replace_rebuilds_the_job_index():
    sc = generate("mixed-control", seed=3)
    ids = [job.id for job in sc.jobs]
    assert len(ids) > 3
    short = dataclasses.replace(sc, jobs=sc.jobs[:2])
    assert [short.job_index(i) for i in ids] == [0, 1] + [-1] * (len(ids) - 2)
    backwards = dataclasses.replace(sc, jobs=sc.jobs[::-1])
    assert [backwards.job_index(i) for i in ids] == list(range(len(ids)))[::-1]
    assert [sc.job_index(i) for i in ids] == list(range(len(ids)))  # the original keeps its own


def test_replace_is_checked_like_a_file():
    sc = generate("mixed-control", seed=3)
    with pytest.raises(ScenarioError) as info:
        dataclasses.replace(sc, jobs=(*sc.jobs, sc.jobs[0]))
    assert (info.value.source, info.value.field) == ("<scenario mixed-control>", f"jobs[{len(sc.jobs)}].id")
    with pytest.raises(ScenarioError, match=r"^<scenario mixed-control>: cluster.gpus: expected a positive integer"):
        dataclasses.replace(sc, gpus=0)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"decay": 1.5}, "horizon.decay"),
        ({"penalty": (-3.0, -2.0)}, "realtime[0].penalty"),
        ({"name": ""}, "name"),
    ],
)
def test_a_generator_draw_that_breaks_a_rule_is_refused_at_construction(change: dict[str, Any], field: str):
    family = dataclasses.replace(FAMILIES["mixed-control"], **change)
    with pytest.raises(ScenarioError) as info:
        generate(family, seed=0)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("build", "field", "reason"),
    [
        (lambda: Scenario("x", gpus=4, slots=2, decay=math.nan), "horizon.decay", "finite"),
        (lambda: Scenario("x", gpus=4, slots=2, node_size=8), "cluster.node_size", "at most"),
        (
            lambda: Scenario("x", gpus=4, slots=2, apps=(App("a", (1,), 1, 1, 1.0),)),
            "realtime[0].demand",
            "2 values",
        ),
        (
            lambda: Scenario("x", gpus=4, slots=2, jobs=(Job("a", JobType.TRAINING, 5, 1),)),
            "jobs[0].gpus",
            "cluster has 4",
        ),
        (lambda: Scenario("x", gpus=4, slots=2, jobs=(Job("a", "training", 1, 1),)), "jobs[0].type", "training"),
        (lambda: Scenario("x", gpus=True, slots=2), "cluster.gpus", "integer"),
    ],
)
def test_a_scenario_built_in_code_is_checked(build, field: str, reason: str):
    with pytest.raises(ScenarioError) as info:
        build()
    assert info.value.source == "<scenario x>" and info.value.field == field
    assert reason in info.value.reason


def test_the_fast_path_never_accepts_a_job_the_rules_refuse():
    """``_plain_job_ok`` may send a good job down the slow path, never pass a bad one."""
    values = {
        "id": ["a", "", 3, None],
        "type": [JobType.TRAINING, "training", None],
        "gpus": [0, 1, 4, 5, True, 2.0],
        "duration": [0, 1, 30, False, 1.0],
        "release": [-1, 0, 3, True, 0.0],
        "priority": [0.0, -1.0, 1.0, 2, math.nan, math.inf, True],
        "deadline": [None, 0, 1, 5, True, 2.0],
        "value": [None, 0.0, 3.0, 4, math.nan, -math.inf],
    }
    base = {"id": "a", "type": JobType.TRAINING, "gpus": 1, "duration": 1, "release": 0, "priority": 1.0}
    changes = [(key, value) for key, options in values.items() for value in options]
    for one, two in itertools.combinations_with_replacement(changes, 2):  # every value, alone and in pairs
        job = Job(**{**base, **dict([one, two])})
        if _plain_job_ok(job, 4, {}):
            _check_job(FieldReader("x"), job, "jobs[0]", 4, 4, {})  # the rules one by one: must not raise
    assert _plain_job_ok(Job("a", JobType.TRAINING, 4, 1, priority=2.0, deadline=5, value=3.0), 4, {})


# ----------------------------------------------------------------------------- adversarial files (issue 10, section 4)

BASE = "name: x\ncluster: {gpus: 8, node_size: 4}\nhorizon: {slots: 4}\n"


def _flow(fields: dict[str, Any]) -> str:
    return "- {" + ", ".join(f"{key}: {value}" for key, value in fields.items()) + "}\n"


def job_line(**fields: Any) -> str:
    """A job of 2 GPUs for 2 slots as a YAML list item, with ``fields`` changed or added (``job_line(gpus=0)``)."""
    return _flow({"id": "a", "type": "training", "gpus": 2, "duration": 2, **fields})


def app_line(**fields: Any) -> str:
    """An app "chat" as a YAML list item, with ``fields`` changed or added (``app_line(ramp=-1)``)."""
    return _flow({"name": "chat", "demand": [1, 2, 2, 1], "ramp": 1, "penalty": 5, **fields})


def with_jobs(*jobs: str) -> str:
    return BASE + "jobs:\n" + "".join(jobs)


def with_apps(*apps: str) -> str:
    return BASE + "realtime:\n" + "".join(apps)


def one_job(**fields: Any) -> str:
    return with_jobs(job_line(**fields))


def one_app(**fields: Any) -> str:
    return with_apps(app_line(**fields))


def _bomb(levels: int = 9) -> str:
    """A YAML alias bomb: nine levels of nine aliases, 9**9 integers if anything expanded it."""
    lines = ["  - &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"  - &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HUGE = 10**20  # more digits than a file may write
WIDE = BASE.replace("gpus: 8, node_size: 4", "gpus: 16384")  # the most GPUs: the slots alone reach the grid limit

# (kind, file suffix, text, field named, words in the reason)
ADVERSARIAL = [
    ("python tag", ".yaml", "name: !!python/object/apply:os.system ['echo hi']\n" + BASE[8:], "<line 1>", "YAML"),
    ("python name tag", ".yaml", "name: !!python/name:os.system\n" + BASE[8:], "<line 1>", "YAML"),
    ("NaN", ".yaml", one_job(priority=".nan"), "jobs[0].priority", "finite"),
    ("infinite", ".yaml", one_job(value=".inf"), "jobs[0].value", "finite"),
    (
        "minus infinite",
        ".yaml",
        BASE.replace("{slots: 4}", "{slots: 4, slot_minutes: -.inf}"),
        "horizon.slot_minutes",
        "finite",
    ),
    (
        "NaN in JSON",
        ".json",
        '{"name": "x", "cluster": {"gpus": 8}, "horizon": {"slots": 4, "decay": NaN}}',
        "horizon.decay",
        "finite",
    ),
    ("true as a count", ".yaml", BASE.replace("gpus: 8", "gpus: true"), "cluster.gpus", "integer"),
    ("negative ramp", ".yaml", one_app(ramp=-1), "realtime[0].ramp", "at least 0"),
    ("negative demand", ".yaml", one_app(demand=[1, -2, 2, 1]), "realtime[0].demand[1]", "at least 0"),
    ("duplicate app names", ".yaml", with_apps(app_line(), app_line()), "realtime[1].name", "duplicate"),
    (
        "alias bomb",
        ".yaml",
        with_apps("- name: chat\n  ramp: 1\n  penalty: 5\n  demand:\n" + _bomb()),
        "realtime[0].demand[0]",
        "integer",
    ),
    ("empty file", ".yaml", "", "<top>", "got nothing"),
    ("top-level list", ".yaml", "- name: x\n- cluster: {gpus: 8}\n", "<top>", "mapping"),
    # the ten kinds of SPEC section 1
    ("unknown key", ".yaml", BASE + "colour: red\n", "colour", "unknown key"),
    ("missing key", ".yaml", "name: x\ncluster: {gpus: 8}\n", "horizon", "missing"),
    ("wrong type", ".yaml", BASE.replace("gpus: 8", "gpus: eight"), "cluster.gpus", "integer"),
    ("non-positive size", ".yaml", one_job(gpus=0), "jobs[0].gpus", "positive"),
    ("non-positive duration", ".yaml", one_job(duration=-1), "jobs[0].duration", "positive"),
    ("demand not of length T", ".yaml", one_app(demand=[1, 2]), "realtime[0].demand", "4 values"),
    ("duplicate id", ".yaml", with_jobs(job_line(), job_line()), "jobs[1].id", "duplicate"),
    ("job larger than the cluster", ".yaml", one_job(gpus=16), "jobs[0].gpus", "cluster has 8"),
    ("running_on not a valid block", ".yaml", one_job(running_on=[3, 4]), "jobs[0].running_on", "inside one node"),
    (
        "running_on overlapping another",
        ".yaml",
        with_jobs(job_line(running_on=[0, 1]), job_line(id="b", running_on=[1, 2])),
        "jobs[1].running_on",
        "already held",
    ),
    # the two that crashed: absurd sizes
    ("huge cluster", ".yaml", BASE.replace("gpus: 8", "gpus: 1000000000000"), "cluster.gpus", "at most 16384"),
    ("huge horizon", ".yaml", BASE.replace("slots: 4", "slots: 1000000000000"), "horizon.slots", "at most 10080"),
    # more absurd sizes, each under one of the limits
    ("huge duration", ".yaml", one_job(duration=10**12), "jobs[0].duration", "at most 10080"),
    ("huge release", ".yaml", one_job(release=HUGE), "jobs[0].release", "about 21 digits"),
    ("huge demand", ".yaml", one_app(demand=[1, 2, 2, HUGE]), "realtime[0].demand[3]", "at most 16384"),
    ("huge ramp", ".yaml", one_app(ramp=HUGE), "realtime[0].ramp", "at most 16384"),
    ("integer beyond the float range", ".yaml", one_job(priority=10**400), "jobs[0].priority", "finite"),
    ("integer of 5000 digits", ".json", '{"name": "x", "cluster": {"gpus": 1' + "0" * 5000 + "}}", "<file>", "digits"),
    ("priority beyond the weight limit", ".yaml", one_job(priority="1.0e+300"), "jobs[0].priority", "<= 1e+06"),
    ("penalty beyond the weight limit", ".yaml", one_app(penalty="2.0e+6"), "realtime[0].penalty", "<= 1e+06"),
    ("value beyond the weight limit per GPU-slot", ".yaml", one_job(value="4000001.0"), "jobs[0].value", "<= 4e+06"),
    ("grid beyond the limit", ".yaml", WIDE.replace("slots: 4", "slots: 1025"), "horizon.slots", "GPU-slots"),
    (
        "grid beyond the limit past the horizon",
        ".yaml",
        WIDE.replace("slots: 4", "slots: 168") + "jobs:\n" + job_line() + job_line(id="b", duration=900),
        "jobs[1].duration",
        "GPU-slots",
    ),
]


@pytest.mark.parametrize(("kind", "suffix", "text", "field", "reason"), ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
def test_adversarial_files_are_refused_naming_file_and_field(
    tmp_path: Path, kind: str, suffix: str, text: str, field: str, reason: str
):
    path = tmp_path / f"adversarial{suffix}"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert (err.source, err.field) == (str(path), field), kind
    assert reason in err.reason, (kind, err.reason)
    assert "\n" not in str(err) and len(str(err)) < 400


def test_too_many_jobs_or_apps_are_refused_before_anything_is_built():
    top = {"name": "x", "cluster": {"gpus": 1}, "horizon": {"slots": 1}}
    with pytest.raises(ScenarioError, match=rf"^big.json: jobs: expected at most {MAX_JOBS} jobs"):
        scenario_from_dict({**top, "jobs": [{}] * (MAX_JOBS + 1)}, "big.json")
    with pytest.raises(ScenarioError, match=rf"^big.json: realtime: expected at most {MAX_APPS} applications"):
        scenario_from_dict({**top, "realtime": [{}] * (MAX_APPS + 1)}, "big.json")
    job = Job("a", JobType.TRAINING, 1, 1)
    jobs = tuple(dataclasses.replace(job, id=str(i)) for i in range(MAX_JOBS + 1))
    with pytest.raises(ScenarioError, match=r"jobs: expected at most"):
        Scenario("x", gpus=1, slots=1, jobs=jobs)


def test_the_limits_themselves_are_allowed():
    week = Scenario("week", gpus=MAX_GPUS, slots=168, jobs=(Job("a", JobType.TRAINING, MAX_GPUS, 336),))
    assert week.gpus * (week.slots + 336) <= MAX_GRID
    assert Scenario("grid", gpus=MAX_GPUS, slots=MAX_GRID // MAX_GPUS).slots == 1024
    assert (
        Scenario("long", gpus=1, slots=MAX_SLOTS, jobs=(Job("a", JobType.TRAINING, 1, MAX_SLOTS),)).slots == MAX_SLOTS
    )
    app = App("chat", (MAX_GPUS,), MAX_GPUS, MAX_GPUS, 1.0)
    assert Scenario("apps", gpus=MAX_GPUS, slots=1, apps=(app,)).apps == (app,)
