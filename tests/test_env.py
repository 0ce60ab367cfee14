"""GpuCluster-v0: checkers, masks against brute force, rewards against the objective, FIFO replay, rendering."""

from __future__ import annotations

import itertools
import math
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_env  # noqa: F401  (registers GpuCluster-v0)
from agents.fifo import peak_reservation
from agents.fifo import plan as fifo_plan
from gpu_env import rules
from gpu_env.env import GpuClusterEnv
from gpu_env.episode import FIT_RULES, ActionLayout, ActionMode, Episode, InvalidActionError, realtime_curves
from gpu_env.generators import BENCHMARK_SEEDS, FAMILIES, generate
from gpu_env.metrics import compute_metrics
from gpu_env.observation import JOB_FEATURES, Encoder, Limits, encode, shapes
from gpu_env.occupancy import Occupancy
from gpu_env.plan import Placement, Plan
from gpu_env.rules import Rule
from gpu_env.sampler import ScenarioSampler, resolve_source
from gpu_env.scenario import Scenario, ScenarioError, save_scenario, scenario_from_dict
from gpu_env.validation import validate
from tests.conftest import kill_after


def quiet(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_env(scenario: Any, **kwargs: Any) -> GpuClusterEnv:
    return GpuClusterEnv(scenario, **kwargs)


def rollout(env: GpuClusterEnv, seed: int, policy_seed: int) -> tuple[float, dict, int]:
    """A random masked rollout; returns (return, final info, steps)."""
    rng = np.random.default_rng(policy_seed)
    _, info = env.reset(seed=seed)
    total, steps, done = 0.0, 0, False
    while not done:
        mask = env.action_masks()
        assert mask.any(), "all actions masked before the episode ended"
        assert np.array_equal(mask, info["action_mask"])
        action = int(rng.choice(np.flatnonzero(mask)))
        _, reward, terminated, truncated, info = env.step(action)
        assert "invalid_action" not in info
        total += reward
        steps += 1
        done = terminated or truncated
        assert not truncated
    return total, info, steps


def spec_objective(sc: Scenario, plan: Plan) -> float:
    """SPEC section 3 in plain loops: each placed job's ``w * k * decay**t`` over its slots inside the
    horizon, less each app's ``P * max(0, D_t - r_t)``; an independent check of ``compute_metrics``."""
    jobs = {job.id: job for job in sc.jobs}
    total = 0.0
    for p in plan.placements:
        job = jobs[p.job]
        w = job.value / (job.gpus * job.duration) if job.value is not None else job.priority
        for t in range(p.start, min(p.start + job.duration, sc.slots)):
            total += w * job.gpus * sc.decay**t
    for app in sc.apps:
        curve = plan.curves.get(app.name, [0] * sc.slots)
        for demand, served in zip(app.demand, curve, strict=True):
            total -= app.penalty * max(0, demand - served)
    return total


# ----------------------------------------------------------------------------- tiny scenarios


@st.composite
def tiny_scenarios(draw: st.DrawFn, max_gpus: int = 4, max_jobs: int = 3, max_apps: int = 2) -> Scenario:
    """Valid by construction: no draw is rejected."""
    G = draw(st.integers(1, max_gpus))
    node = draw(st.integers(1, G))
    T = draw(st.integers(2, 5))
    apps = []
    for a in range(draw(st.sampled_from([n for n in (0, 1, 1, 2) if n <= max_apps]))):
        apps.append(
            {
                "name": f"app{a}",
                "demand": draw(st.lists(st.integers(0, max(1, G // 2)), min_size=T, max_size=T)),
                "ramp": draw(st.integers(0, 2)),
                "initial": draw(st.integers(0, G // 2)),
                "penalty": draw(st.sampled_from([0.5, 2.0, 6.0])),
            }
        )
    jobs = []
    for j in range(draw(st.integers(1, max_jobs))):
        d = draw(st.integers(1, 3))
        release = draw(st.integers(0, T - 1))
        job: dict[str, Any] = {
            "id": f"j{j}",
            "type": "training",
            "gpus": draw(st.integers(1, G)),
            "duration": d,
            "release": release,
            "priority": draw(st.sampled_from([1.0, 2.0, 5.0])),
        }
        deadline = draw(st.one_of(st.none(), st.integers(release + d - 1, T + 1)))
        if deadline is not None and deadline >= 1:
            job["deadline"] = deadline
        jobs.append(job)
    # A running job holds its GPUs before slot 0 as well, beside the apps' initial (SPEC section 1).
    room = G - sum(app["initial"] for app in apps)
    if room >= 1 and draw(st.integers(0, 3)) == 0:
        k = draw(st.integers(1, room))
        starts = rules.allowed_block_starts(k, G, node)
        if starts.size:
            a = int(starts[draw(st.integers(0, starts.size - 1))])
            jobs.append(
                {"id": "run", "type": "quantization", "gpus": k, "duration": 2, "running_on": list(range(a, a + k))}
            )
    data = {
        "name": "tiny",
        "cluster": {"gpus": G, "node_size": node},
        "horizon": {"slots": T, "decay": draw(st.sampled_from([1.0, 0.8]))},
        "realtime": apps,
        "jobs": jobs,
    }
    return scenario_from_dict(data, "tiny.yaml")


def tiny(
    gpus: int, slots: int, jobs: list[dict], realtime: list[dict] | None = None, node: int | None = None
) -> Scenario:
    return scenario_from_dict(
        {
            "name": "hand",
            "cluster": {"gpus": gpus, "node_size": node or gpus},
            "horizon": {"slots": slots},
            "realtime": realtime or [],
            "jobs": [{"type": "training", **job} for job in jobs],
        },
        "hand.yaml",
    )


# ----------------------------------------------------------------------------- registration and checkers


def test_registered_and_made_from_every_kind_of_source(tmp_path):
    sc = generate("training-heavy", 3)
    path = tmp_path / "s.yaml"
    save_scenario(sc, path)
    for source in (str(path), path, sc, "training-heavy", ["training-heavy", ("mixed-control", 2.0)],
                   {"families": {"training-heavy": 1}, "gpus": [8, 16], "jobs": [4, 12]}):  # fmt: skip
        env = gym.make("GpuCluster-v0", scenario=source)
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        assert info["action_mask"].dtype == np.int8 and info["action_mask"].any()
        env.close()


def test_made_without_arguments_it_draws_days_of_the_seven_families_seeded_by_reset():
    env = gym.make("GpuCluster-v0")
    drawn = {env.reset(seed=seed)[1]["scenario"] for seed in range(40)}
    assert drawn == set(FAMILIES)
    again = gym.make("GpuCluster-v0")
    for seed in (0, 7):
        obs_a, info_a = env.reset(seed=seed)
        obs_b, info_b = again.reset(seed=seed)
        assert info_a["scenario"] == info_b["scenario"]
        assert all(np.array_equal(obs_a[key], obs_b[key]) for key in obs_a)
    assert GpuClusterEnv().source.limits() == resolve_source(list(FAMILIES)).limits()


def test_the_info_mask_is_int8_and_action_masks_stays_bool_for_sb3_contrib():
    env = gym.make("GpuCluster-v0", scenario="training-heavy")
    _, info = env.reset(seed=0)
    flat = env.unwrapped.action_masks()
    assert info["action_mask"].dtype == np.int8 and flat.dtype == bool
    assert np.array_equal(info["action_mask"].astype(bool), flat)


@quiet(12)
@given(
    seed=st.integers(0, 10_000),
    actions=st.sampled_from(["fit", "block"]),
    family=st.sampled_from(sorted(FAMILIES)),
)
def test_every_action_sampled_under_the_info_mask_is_legal(seed, actions, family):
    """``action_space.sample(mask=info["action_mask"])`` only draws actions the episode accepts; the plan is valid."""
    env = gym.make("GpuCluster-v0", scenario=family, actions=actions, invalid_action="raise")
    _, info = env.reset(seed=seed)
    env.action_space.seed(seed)
    done = False
    while not done:
        action = env.action_space.sample(mask=info["action_mask"])
        assert env.unwrapped.action_masks()[action]
        _, _, terminated, truncated, info = env.step(action)  # a forbidden action would raise
        done = terminated or truncated
    assert terminated and not truncated
    assert validate(env.unwrapped.episode.scenario, Plan.from_dict(info["plan"])) == []


@pytest.mark.parametrize("actions", ["fit", "block"])
@pytest.mark.parametrize("source", ["training-heavy", {"families": ["mixed-control", "scale-64x30"], "gpus": [8, 32]}])
def test_gymnasium_check_env(actions, source):
    from gymnasium.utils.env_checker import check_env

    env = gym.make("GpuCluster-v0", scenario=source, actions=actions, render_mode="ansi")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Box observation space m.*")
        check_env(env.unwrapped, skip_render_check=False)


SB3_ROWS_ARE_NOT_IMAGES = (
    r"Your observation \w+ has an unconventional shape",
    r"It seems that your observation \w+ is an image but its `dtype`",
    r"It seems that your observation space \w+ is an image but the upper and lower bounds",
    r"The minimal resolution for an image is 36x36",
)


@pytest.mark.parametrize("actions", ["fit", "block"])
def test_stable_baselines3_check_env(actions):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    env = GpuClusterEnv("mixed-control", actions=actions)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any other warning fails the test
        # The observation keeps one row per job, GPU, slot and app on purpose (a 2-D table, not a flat
        # vector and not an image): SB3 reads every 2-D Box as an image and says so in these four ways.
        for message in SB3_ROWS_ARE_NOT_IMAGES:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        sb3_checker.check_env(env, warn=True)


def test_maskable_ppo_reads_masks_through_subproc_vec_env():
    pytest.importorskip("sb3_contrib")
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    sc = generate("mixed-control", 1)
    # forkserver, never fork: this process already runs torch, onnxruntime and numba threads, and a forked
    # child inherits their locks in whatever state they were. The watchdog stops the workers if a step
    # hangs (the test then fails on a closed pipe instead of waiting for ever).
    for cls, kwargs, actions in ((DummyVecEnv, {}, "block"), (SubprocVecEnv, {"start_method": "forkserver"}, "fit")):
        venv = cls([lambda a=actions: GpuClusterEnv(sc, actions=a)] * 2, **kwargs)
        with kill_after(300, getattr(venv, "processes", [])):
            _masked_random_steps(venv, sc)
        venv.close()


def _masked_random_steps(venv: Any, sc: Scenario) -> None:
    from sb3_contrib.common.maskable.utils import get_action_masks

    venv.reset()
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(80):
        masks = get_action_masks(venv)
        assert masks.shape[0] == 2 and masks.any(axis=1).all()
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        _, _, dones, infos = venv.step(actions)
        for done, info in zip(dones, infos, strict=True):
            assert "invalid_action" not in info
            if done:
                ends += 1
                assert validate(sc, Plan.from_dict(info["plan"])) == []
    assert ends >= 2


# ----------------------------------------------------------------------------- rewards, validity, determinism


@pytest.mark.parametrize("family", sorted(FAMILIES))
@quiet(6)
@given(
    seed=st.integers(0, 10_000),
    policy_seed=st.integers(0, 10_000),
    actions=st.sampled_from(["fit", "block"]),
    trade=st.booleans(),
)
def test_random_masked_rollouts_end_valid_with_return_equal_to_objective(family, seed, policy_seed, actions, trade):
    env = make_env(family, actions=actions, trade_realtime=trade)
    total, info, steps = rollout(env, seed, policy_seed)
    sc = env.episode.scenario
    plan = Plan.from_dict(info["plan"])
    assert validate(sc, plan) == []
    objective = spec_objective(sc, plan)  # worked from SPEC section 3, not through compute_metrics
    assert math.isclose(total * info["reward_scale"], objective, rel_tol=1e-9, abs_tol=1e-6)
    assert math.isclose(info["metrics"]["objective"], objective, abs_tol=1e-5)
    assert math.isclose(compute_metrics(sc, plan).objective, objective, rel_tol=1e-9, abs_tol=1e-6)
    assert steps <= env.episode.rows.size + sc.slots + 1


def test_same_seed_same_episode():
    source = {"families": {"mixed-control": 1, "batch-fragmentation": 1}, "gpus": [8, 24]}
    runs = []
    for _ in range(2):
        env = make_env(source, actions="fit")
        rng = np.random.default_rng(5)
        obs, info = env.reset(seed=11)
        trace = [obs]
        done = False
        while not done:
            action = int(rng.choice(np.flatnonzero(env.action_masks())))
            obs, reward, terminated, truncated, info = env.step(action)
            trace.append((obs, reward))
            done = terminated or truncated
        runs.append((trace, info["plan"]))
    (a, plan_a), (b, plan_b) = runs
    assert plan_a == plan_b
    assert len(a) == len(b)
    for x, y in zip(a[1:], b[1:], strict=True):
        assert x[1] == y[1]
        for key in x[0]:
            assert np.array_equal(x[0][key], y[0][key])
    env = make_env(source)
    first = env.reset(seed=3)[1]["scenario"], env.episode.scenario
    again = env.reset(seed=3)[1]["scenario"], env.episode.scenario
    assert first == again


def test_episode_core_runs_without_the_gym_wrapper():
    sc = generate("uniform-priority", 1)
    layout = ActionLayout.make("fit", 20, 16)
    ep = Episode(sc, layout)
    enc = Encoder(ep, Limits(16, 20, 24, 1), reward_scale=100.0)
    total = 0.0
    while not ep.done:
        obs = enc.observe(copy=False)
        mask = obs["action_mask"].astype(bool)
        assert np.array_equal(mask, ep.action_mask())
        scores = obs["jobs"][:, JOB_FEATURES.index("value_now")]  # a greedy "policy" on the features
        best_row = int(np.argmax(np.where(mask[:-1].reshape(20, 3)[:, 0], scores, -np.inf)))
        action = layout.encode(best_row, 0) if mask[:-1].any() else layout.advance
        total += ep.step(action)
    assert validate(sc, ep.plan()) == []
    assert math.isclose(total, ep.plan().metrics.objective, rel_tol=1e-9)
    fresh = encode(ep, Limits(16, 20, 24, 1), 100.0)
    for key, shape in shapes(Limits(16, 20, 24, 1), layout.n).items():
        assert fresh[key].shape == shape


# ----------------------------------------------------------------------------- FIFO replay


def fifo_choices(scenario: Scenario) -> list[tuple[str, int, int]]:
    """FIFO's placements of the jobs it places, as (job id, start, first GPU) in start order."""
    plan = fifo_plan(scenario)
    return sorted(
        (
            (p.job, p.start, p.gpus[0])
            for p in plan.placements
            if scenario.jobs[scenario.job_index(p.job)].running_on is None
        ),
        key=lambda x: (x[1], scenario.job_index(x[0])),
    )


SHIPPED = sorted((Path(__file__).resolve().parent.parent / "configs" / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("source", sorted(FAMILIES) + [str(p) for p in SHIPPED])
def test_env_on_a_scenario_file_replays_fifo_exactly(source, tmp_path):
    if source in FAMILIES:
        path = tmp_path / f"{source}.yaml"
        save_scenario(generate(source, BENCHMARK_SEEDS[source]), path)
    else:
        path = Path(source)
    env = gym.make("GpuCluster-v0", scenario=str(path), actions="block", base_curves=peak_reservation)
    _, info = env.reset(seed=0)
    ep = env.unwrapped.episode
    row_of = {ep.scenario.jobs[i].id: r for r, i in enumerate(ep.rows)}
    layout = env.unwrapped.layout
    done, total = False, 0.0
    for job, start, first in fifo_choices(ep.scenario):
        while ep.clock < start:
            _, reward, done, _, info = env.step(layout.advance)
            total += reward
        assert ep.clock == start
        _, reward, done, _, info = env.step(layout.encode(row_of[job], first))
        assert "invalid_action" not in info
        total += reward
    while not done:
        _, reward, done, _, info = env.step(layout.advance)
        total += reward
    expected = fifo_plan(ep.scenario)
    expected.metrics = compute_metrics(ep.scenario, expected)
    got = info["plan"]
    assert got["placements"] == expected.to_dict()["placements"]
    assert got["realtime"] == expected.to_dict()["realtime"]
    assert math.isclose(total * info["reward_scale"], expected.metrics.objective, rel_tol=1e-9)


# ----------------------------------------------------------------------------- masks against brute force


def witness_violations(ep: Episode, row: int, first: int) -> list:
    """What the validator says about the current plan plus the row's job at the clock on ``first``.

    Real-time curves: the ramp floors when the episode may trade real-time
    (the least any valid plan can reserve), else the episode's fixed curves.
    """
    sc = ep.scenario
    plan = ep.plan()
    job = sc.jobs[ep.rows[row]]
    plan.placements.append(Placement(job.id, ep.clock, tuple(range(first, first + job.gpus))))
    if ep.trade_realtime:
        plan.curves = {app.name: [int(x) for x in ep.floors[a]] for a, app in enumerate(sc.apps)}
    return validate(sc, plan)


def completes_validly(ep: Episode) -> bool:
    ep = ep.copy()
    while not ep.done:
        if not ep.action_mask().any():
            return False
        ep.step(ep.layout.advance)
    return validate(ep.scenario, ep.plan()) == []


PLACEMENT_RULES = {
    Rule.ONE_JOB_PER_GPU,
    Rule.NO_PREEMPTION,
    Rule.RELEASE_HORIZON_DEADLINE,
    Rule.CONTIGUOUS_BLOCK,
    Rule.CAPACITY,
}


def check_masks_exhaustively(sc: Scenario, mode: ActionMode, trade: bool, limit: int = 400) -> int:
    """Walk the reachable states; check every action of each against the validator. Returns states visited."""
    rows = sum(job.running_on is None for job in sc.jobs)
    layout = ActionLayout.make(mode, max(rows, 1) + 1, sc.gpus + 1)  # one padding row and GPU column too
    stack = [Episode(sc, layout, trade_realtime=trade)]
    seen: set[tuple] = set()
    while stack and len(seen) < limit:
        ep = stack.pop()
        key = (ep.clock, ep.start.tobytes(), ep.first_gpu.tobytes(), ep.done)
        if key in seen:
            continue
        seen.add(key)
        mask = ep.action_mask()
        if ep.done:
            assert not mask.any()
            continue
        assert mask[layout.advance], "ADVANCE must be allowed until the episode ends"
        for action in range(layout.n):
            decoded = layout.decode(action)
            if mask[action]:
                child = ep.copy()
                child.step(action)
                assert validate(sc, child.plan()) == [], (action, validate(sc, child.plan()))
                assert completes_validly(child)
                stack.append(child)
                continue
            assert decoded is not None
            row, option = decoded
            assert ep.action_problem(action) is not None
            if row >= ep.rows.size:
                continue  # a padding row names no job
            if mode == ActionMode.BLOCK:
                firsts = [option] if option < sc.gpus else []
            else:
                firsts = [int(a) for a in rules.allowed_block_starts(ep.k[row], sc.gpus, sc.node_size)]
            for first in firsts:
                found = witness_violations(ep, row, first)
                assert found, f"masked action {action} ({mode}, first GPU {first}) breaks no rule"
                assert {v.rule for v in found} & PLACEMENT_RULES
    return len(seen)


@quiet(80)
@given(sc=tiny_scenarios(), mode=st.sampled_from(list(ActionMode)), trade=st.booleans())
def test_masks_are_exact_on_tiny_scenarios(sc, mode, trade):
    assert check_masks_exhaustively(sc, mode, trade) >= 1


def test_mask_names_the_rule_on_a_hand_worked_example():
    # 2 GPUs, 3 slots; job a (2 GPUs, 2 slots) and job b (1 GPU, 1 slot, deadline 1).
    sc = tiny(2, 3, [{"id": "a", "gpus": 2, "duration": 2}, {"id": "b", "gpus": 1, "duration": 1, "deadline": 1}])
    layout = ActionLayout.make("block", 2, 2)
    ep = Episode(sc, layout)
    mask = ep.action_mask()
    assert mask.tolist() == [True, False, True, True, True]  # a on GPU 0; b on 0 or 1; ADVANCE
    ep.step(layout.encode(0, 0))  # a takes both GPUs for slots 0-1: b can no longer meet its deadline
    assert ep.done and ep.action_mask().tolist() == [False] * 5
    found = witness_violations(Episode(sc, layout).copy(), 1, 1)
    assert found == []
    after = Episode(sc, layout)
    after.step(layout.encode(0, 0))
    assert {v.rule for v in witness_violations(after, 1, 0)} >= {Rule.ONE_JOB_PER_GPU}


def test_capacity_mask_with_and_without_trading():
    # One app holds 1 of 2 GPUs with ramp 0: a 2-GPU job never fits; trading cannot go below the floor.
    app = {"name": "chat", "demand": [1, 1, 1], "ramp": 0, "initial": 1, "penalty": 1.0}
    sc = tiny(2, 3, [{"id": "big", "gpus": 2, "duration": 1}, {"id": "one", "gpus": 1, "duration": 3}], [app])
    for trade in (True, False):
        ep = Episode(sc, ActionLayout.make("block", 2, 2), trade_realtime=trade)
        assert ep.earliest[0] == -1  # never: the floor keeps 1 GPU
        assert ep.action_mask()[2:4].tolist() == [True, True]
    # Demand [2, 1, 1] from 2 GPUs with ramp 1: the floor is [1, 0, 0], so with trading the 2-GPU job
    # can run at slot 1; the curve must then fall to 0 there and can only come back to 1 on either side.
    app = {"name": "chat", "demand": [2, 1, 1], "ramp": 1, "initial": 2, "penalty": 1.0}
    sc = tiny(2, 3, [{"id": "big", "gpus": 2, "duration": 1, "priority": 5.0}], [app])
    ep = Episode(sc, ActionLayout.make("block", 1, 2), trade_realtime=True)
    assert ep.clock == 1 and ep.action_mask().tolist() == [True, False, True]
    reward = ep.step(0)
    plan = ep.plan()
    assert plan.curves["chat"] == [1, 0, 1]
    assert math.isclose(reward, 10.0 - 2.0)  # 2 GPUs x priority 5, less 2 unserved GPU-slots at penalty 1
    assert validate(sc, plan) == []
    ep = Episode(sc, ActionLayout.make("block", 1, 2), trade_realtime=False)
    assert ep.earliest[0] == -1


# ----------------------------------------------------------------------------- expressiveness (small, exact)


@quiet(25)
@given(sc=tiny_scenarios(max_gpus=3, max_jobs=3, max_apps=1))
def test_block_actions_reach_the_optimum_with_at_most_one_app(sc):
    assert len(sc.apps) <= 1
    from tests import expressiveness as ex

    opt = ex.optimum(sc)
    best = ex.env_best(sc, ActionMode.BLOCK, (), True)
    assert math.isclose(best, opt, rel_tol=1e-9, abs_tol=1e-9)


# ----------------------------------------------------------------------------- shared rules


@quiet(40)
@given(sc=tiny_scenarios(max_gpus=4, max_jobs=3), seed=st.integers(0, 1000))
def test_feasible_at_and_narrow_feasible_agree_with_feasible(sc, seed):
    assert sc.jobs
    occ = Occupancy(sc)
    occ.place_inherited()
    rng = np.random.default_rng(seed)
    for _ in range(4):
        runs = occ.free_runs()
        for slot in range(occ.width):
            assert np.array_equal(occ.free_run_at(slot), runs[slot])
        for j, job in enumerate(sc.jobs):
            full = occ.feasible(job)
            blocks = rules.allowed_block_starts(job.gpus, sc.gpus, sc.node_size)
            starts = np.arange(-1, sc.slots + 2)
            got = occ.feasible_at(np.full(starts.size, j), starts)
            for i, t in enumerate(starts):
                expected = np.zeros(sc.gpus, dtype=bool)
                if 0 <= t < sc.slots:
                    expected[blocks[full[t]]] = True
                assert np.array_equal(got[i], expected)
        j = int(rng.integers(len(sc.jobs)))
        spots = np.argwhere(occ.feasible(sc.jobs[j]))
        if j not in occ.placed and len(spots):
            jobs = np.repeat(np.arange(len(sc.jobs)), sc.slots)
            starts = np.tile(np.arange(sc.slots), len(sc.jobs))
            before = occ.feasible_at(jobs, starts)
            t, b = spots[int(rng.integers(len(spots)))]
            occ.place(j, int(t), int(rules.allowed_block_starts(sc.jobs[j].gpus, sc.gpus, sc.node_size)[b]))
            narrowed = occ.narrow_feasible(before, jobs, starts, j)
            assert np.array_equal(narrowed, occ.feasible_at(jobs, starts))


@quiet(60)
@given(
    demand=st.lists(st.integers(0, 4), min_size=1, max_size=5),
    ramp=st.integers(0, 2),
    initial=st.integers(0, 4),
    data=st.data(),
)
def test_realtime_curves_have_the_least_shortfall_for_one_app(demand, ramp, initial, data):
    T = len(demand)
    floor = rules.ramp_floor(initial, ramp, T)
    # Job load in each slot leaving room for the ramp floor: some allocation is always feasible.
    load = np.array([data.draw(st.integers(0, 4 - int(f)), label=f"load[{t}]") for t, f in enumerate(floor)])
    sc = tiny(4, T, [], [{"name": "a", "demand": demand, "ramp": ramp, "initial": initial, "penalty": 1.0}])
    curves = realtime_curves(sc.demand, sc.apps, np.array([0]), floor[None, :], 4, load)
    assert rules.ramp_problems(curves[0], initial, ramp) == []
    assert (curves[0] + load <= 4).all() and (curves[0] >= 0).all()
    best = min(
        sum(max(0, d - x) for d, x in zip(demand, r, strict=True))
        for r in itertools.product(range(5), repeat=T)
        if not rules.ramp_problems(list(r), initial, ramp) and all(x + y <= 4 for x, y in zip(r, load, strict=True))
    )
    assert int(np.maximum(0, np.array(demand) - curves[0]).sum()) == best


# ----------------------------------------------------------------------------- observation, errors, rendering


def test_observation_rows_and_padding():
    sc = generate("training-heavy", 0)
    env = make_env(sc, max_gpus=16, max_jobs=12, max_slots=30, max_apps=2)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    rows = env.episode.rows.size
    jobs = obs["jobs"]
    assert jobs[:rows, 0].all() and not jobs[rows:].any()
    assert obs["gpus"][: sc.gpus, 0].all() and not obs["gpus"][sc.gpus :].any()
    assert obs["slots"][: sc.slots, 0].all() and not obs["slots"][sc.slots :, 0].any()
    assert obs["app_info"][0, 0] == 1 and obs["app_info"][1, 0] == 0
    now = jobs[:rows, JOB_FEATURES.index("now")].astype(bool)
    mask = obs["action_mask"][:-1].reshape(12, len(FIT_RULES))[:rows]
    assert np.array_equal(now, mask.any(axis=1))
    # Inherited work shows in channel 1 of the grid.
    inherited = [job for job in sc.jobs if job.running_on is not None]
    assert obs["grid"][inherited[0].running_on[0], 0, 1] == 1


def test_invalid_actions_are_rejected_cleanly():
    env = make_env("training-heavy", actions="block")
    obs, info = env.reset(seed=0)
    masked = int(np.flatnonzero(info["action_mask"] == 0)[0])
    obs2, reward, terminated, truncated, info2 = env.step(masked)
    assert reward == 0.0 and not terminated and "invalid_action" in info2
    for key in obs:
        assert np.array_equal(obs[key], obs2[key])
    strict = make_env("training-heavy", invalid_action="raise")
    strict.reset(seed=0)
    with pytest.raises(InvalidActionError):
        strict.step(strict.action_space.n + 5)
    # Only forbidden actions can make an episode run long: it is then truncated.
    env.reset(seed=0)
    for _ in range(10_000):
        *_, terminated, truncated, _ = env.step(masked)
        if terminated or truncated:
            break
    assert truncated and not terminated


def test_sizes_that_do_not_fit_name_the_limit():
    sc = generate("scale-64x30", 0)
    with pytest.raises(ValueError, match="max_jobs"):
        make_env(sc, max_jobs=5).reset(seed=0)
    with pytest.raises(ValueError, match="max_gpus"):
        make_env(sc, max_gpus=8).reset(seed=0)
    with pytest.raises(ValueError, match="unknown family"):
        resolve_source(["no-such-family"])
    with pytest.raises(ScenarioError, match="no such file"):
        make_env("no/such/file.yaml")
    with pytest.raises(ValueError, match="render_mode"):
        make_env("training-heavy", render_mode="human")


def test_sampler_draws_within_its_ranges():
    sampler = ScenarioSampler.from_spec(
        {"families": {"batch-fragmentation": 1, "scale-64x30": 1}, "gpus": [8, 40], "jobs": [5, 20]}
    )
    limits = sampler.limits()
    rng = np.random.default_rng(0)
    for _ in range(20):
        sc = sampler.draw(rng)
        assert 8 <= sc.gpus <= 40 and sc.gpus % 8 == 0
        assert 5 <= len(sc.jobs) <= 20
        assert sc.gpus <= limits["max_gpus"] and len(sc.jobs) <= limits["max_jobs"]


@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_rendering(mode):
    env = make_env("training-heavy", render_mode=mode)
    env.reset(seed=0)
    first = env.render()
    rng = np.random.default_rng(0)
    for _ in range(3):
        env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
    frame = env.render()
    if mode == "ansi":
        assert isinstance(frame, str) and "gpu 0|" in frame and "clock" in first
    else:
        assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8 and frame.std() > 0
