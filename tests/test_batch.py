"""The batched engine against the reference Episode: same masks, rewards, observations and plans, step by step.

Every test drives B episodes of :class:`gpu_env.batch.BatchEngine` and B
reference :class:`gpu_env.episode.Episode` (with their
:class:`~gpu_env.observation.Encoder`) with the same random masked actions; a
finished episode is restarted on the next scenario of the list, so one batch
runs many trajectories. At every step the masks must be identical, the rewards
and objectives equal within 1e-9 (float64), the observations within 1e-9 (both
float32 casts of the same float64 numbers), and each finished plan identical
to ``Episode.plan()`` (placements, curves and metrics).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from gpu_env.batch import BatchEngine, Sizes, sizes_for
from gpu_env.batch.batch_observation import KEYS, observe
from gpu_env.episode import ActionLayout, ActionMode, Episode
from gpu_env.generators import FAMILIES, generate
from gpu_env.observation import Encoder
from gpu_env.scenario import Scenario
from gpu_env.validation import validate

TOL = 1e-9  # float64 numpy engine against the float64 reference
ALL_FAMILIES = (*FAMILIES, "trace-alibaba", "trace-helios")


@dataclass
class Tally:
    """What a differential run covered."""

    trajectories: int = 0
    steps: int = 0
    families: set[str] = field(default_factory=set)


def drive(
    scenarios: list[Scenario],
    batch: int,
    seed: int,
    *,
    trade_realtime: bool = True,
    observe_every: int = 1,
    sizes: Sizes | None = None,
) -> Tally:
    """Run every scenario to its end once in a batch of ``batch`` slots, comparing with the reference each step."""
    sizes = sizes or sizes_for(scenarios)
    engine = BatchEngine(batch, sizes, trade_realtime=trade_realtime)
    limits = sizes.limits()
    layout = ActionLayout.make(ActionMode.FIT, sizes.jobs, sizes.gpus)
    queue = list(scenarios)
    episodes: list[Episode | None] = [None] * batch
    encoders: list[Encoder | None] = [None] * batch

    def start(i: int) -> None:
        if not queue:
            episodes[i] = encoders[i] = None
            return
        sc = queue.pop(0)
        engine.reset(sc, index=[i])
        ep = Episode(sc, layout, trade_realtime=trade_realtime)
        episodes[i] = ep
        encoders[i] = Encoder(ep, limits, float(sc.gpus * sc.slots * ep.w_max))

    for i in range(batch):
        start(i)
    rng = np.random.default_rng(seed)
    tally = Tally()
    step = 0
    while any(ep is not None for ep in episodes):
        masks = engine.action_masks()
        obs = None
        if step % observe_every == 0:
            obs = observe(engine)
        done_now = engine.state.done.copy()
        actions = np.zeros(batch, dtype=np.int64)
        for i, ep in enumerate(episodes):
            if ep is None:
                assert done_now[i]
                continue
            where = f"step {step}, episode {i} ({ep.scenario.name}, seed {ep.scenario.seed})"
            assert np.array_equal(masks[i], ep.action_mask()), where
            if obs is not None:
                ref = encoders[i].observe()
                for key in KEYS:
                    np.testing.assert_allclose(obs[key][i], ref[key], rtol=0, atol=TOL, err_msg=f"{where}: {key}")
            actions[i] = rng.choice(np.flatnonzero(masks[i]))
        rewards, done = engine.step(actions)
        objectives = engine.state.objective
        for i, ep in enumerate(episodes):
            if ep is None:
                assert rewards[i] == 0.0
                continue
            reward = ep.apply(int(actions[i]))
            tally.steps += 1
            assert abs(rewards[i] - reward) <= TOL, f"step {step}, episode {i}: reward {rewards[i]} != {reward}"
            assert abs(objectives[i] - ep.objective) <= TOL
            assert bool(done[i]) == ep.done
            if ep.done:
                plan = engine.plan(i)
                assert plan.to_dict() == ep.plan().to_dict(), f"episode {i} ({ep.scenario.name}): plans differ"
                tally.trajectories += 1
                tally.families.add(ep.scenario.family or ep.scenario.name)
                start(i)
        step += 1
    return tally


SIZES = {"small": (8, 6), "medium": (16, 14), "own": (None, None)}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_matches_reference_on_every_family(family: str, size: str) -> None:
    gpus, jobs = SIZES[size]
    count = {"small": 150, "medium": 60, "own": 16}[size]
    scenarios = [generate(family, 1000 + seed, gpus=gpus, num_jobs=jobs) for seed in range(count)]
    tally = drive(scenarios, batch=16, seed=len(family), observe_every=1 if size != "small" else 2)
    assert tally.trajectories == count
    assert tally.steps >= count  # every episode takes at least one step


def test_matches_reference_with_families_mixed_in_one_batch() -> None:
    scenarios = [generate(family, 2000 + seed) for seed in range(4) for family in ALL_FAMILIES]
    tally = drive(scenarios, batch=24, seed=7)
    assert tally.families == set(ALL_FAMILIES)


def test_matches_reference_without_trading_realtime() -> None:
    scenarios = [generate(family, 3000 + seed, gpus=16, num_jobs=12) for seed in range(6) for family in FAMILIES]
    drive(scenarios, batch=16, seed=3, trade_realtime=False)


@pytest.mark.parametrize("gpus", [72, 128, 200])
def test_matches_reference_past_one_word_of_gpus(gpus: int) -> None:
    scenarios = [
        generate(family, 4000 + seed, gpus=gpus) for seed in range(2) for family in ("scale-64x30", "mixed-control")
    ]
    drive(scenarios, batch=4, seed=gpus, observe_every=3)


def test_one_scenario_many_rollouts_with_padding_to_larger_sizes() -> None:
    sc = generate("batch-fragmentation", 5)
    base = sizes_for([sc])
    sizes = Sizes(base.jobs + 5, base.gpus + 8, base.slots + 4, base.apps + 1, base.duration + 3)
    tally = drive([sc] * 40, batch=40, seed=11, sizes=sizes)
    assert tally.trajectories == 40


@pytest.mark.parametrize("compiled", [True, False])
def test_matches_reference_compiled_and_as_plain_python(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels compiled (numba) and the same kernels run as plain Python (``kernels.plain()``)."""
    if not compiled:
        use_plain_kernels(monkeypatch)
    scenarios = [generate(family, 6000 + seed, gpus=16, num_jobs=10) for seed in range(2) for family in ALL_FAMILIES]
    scenarios += [generate("scale-64x30", 6100, gpus=72, num_jobs=10)]  # two words
    tally = drive(scenarios, batch=8, seed=5)
    assert tally.trajectories == len(scenarios)
    tally = drive(scenarios[:6], batch=4, seed=6, trade_realtime=False)
    assert tally.trajectories == 6


def use_plain_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the engine and the observations call the plain-Python copy of every kernel."""
    from gpu_env.batch import kernels

    plain = kernels.plain()
    for name in kernels.KERNELS:
        monkeypatch.setattr(kernels, name, getattr(plain, name), raising=False)


def test_plain_kernels_are_python_functions() -> None:
    from gpu_env.batch import kernels

    plain = kernels.plain()
    assert all(type(getattr(plain, name)).__name__ == "function" for name in kernels.KERNELS)


def test_forbidden_actions_and_done_episodes_change_nothing() -> None:
    sc = generate("mixed-control", 3)
    engine = BatchEngine.for_scenarios([sc], batch=2)
    masks = engine.action_masks()
    forbidden = int(np.flatnonzero(~masks[0])[0])
    before = engine.state.objective.copy()
    rewards, done = engine.step([forbidden, engine.layout.advance])
    assert rewards[0] == 0.0 and not done[0]
    assert np.array_equal(engine.action_masks()[0], masks[0])
    assert engine.state.objective[0] == before[0]
    while not engine.state.done[1]:
        engine.step([forbidden, engine.layout.advance])
    plan = engine.plan(1)
    frozen = engine.state.objective[1]
    rewards, done = engine.step([forbidden, 0])
    assert rewards[1] == 0.0 and done[1] and engine.state.objective[1] == frozen
    assert not engine.action_masks()[1].any()
    assert engine.plan(1).to_dict() == plan.to_dict()
    assert validate(sc, plan) == []


def test_scenario_too_large_for_the_sizes_is_refused() -> None:
    small, large = generate("training-heavy", 0), generate("scale-64x30", 0)
    engine = BatchEngine.for_scenarios([small])
    with pytest.raises(ValueError, match="needs"):
        engine.reset(large)


# ----------------------------------------------------------------------------- the Gymnasium vector env


def test_make_vec_matches_the_single_env_with_next_step_autoreset() -> None:
    import gymnasium as gym

    import gpu_env  # noqa: F401  (registers GpuCluster-v0 and its vector entry point)
    from gpu_env.batch.vector_env import GpuClusterVectorEnv
    from gpu_env.env import GpuClusterEnv

    sc = generate("priority-inversion", 9)
    N = 3
    venv = gym.make_vec("GpuCluster-v0", num_envs=N, vectorization_mode="vector_entry_point", scenario=sc, plans=True)
    assert isinstance(venv, GpuClusterVectorEnv)
    assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    singles = [GpuClusterEnv(sc) for _ in range(N)]
    obs, infos = venv.reset(seed=0)
    refs = [env.reset(seed=0) for env in singles]
    assert obs["jobs"].shape == (N, *venv.single_observation_space["jobs"].shape)
    assert venv.observation_space.contains(obs)
    rng = np.random.default_rng(0)
    restarting = np.zeros(N, dtype=bool)
    finished = 0
    for _ in range(120):
        masks = venv.action_masks()
        assert masks.shape == (N, venv.single_action_space.n) and masks.dtype == bool
        assert np.array_equal(masks, infos["action_mask"]) and infos["_action_mask"].all()
        actions = np.zeros(N, dtype=np.int64)
        for i, env in enumerate(singles):
            if restarting[i]:
                continue
            ref_obs, _ = refs[i]
            assert np.array_equal(masks[i], env.action_masks())
            for key in ref_obs:
                np.testing.assert_allclose(obs[key][i], ref_obs[key], rtol=0, atol=TOL)
            actions[i] = rng.choice(np.flatnonzero(masks[i]))
        obs, rewards, terminated, truncated, infos = venv.step(actions)
        for i, env in enumerate(singles):
            if restarting[i]:  # NEXT_STEP: this step restarted the episode, ignoring the action
                assert rewards[i] == 0.0 and not terminated[i] and not truncated[i]
                refs[i] = env.reset(seed=0)
                restarting[i] = False
                continue
            ref_obs, reward, term, trunc, info = env.step(int(actions[i]))
            refs[i] = (ref_obs, info)
            assert abs(rewards[i] - reward) <= TOL and terminated[i] == term and truncated[i] == trunc
            if term or trunc:
                assert infos["_plan"][i] and infos["plan"][i] == info["plan"]
                assert infos["metrics"][i] == info["metrics"]
                restarting[i] = True
                finished += 1
            else:
                assert "_plan" not in infos or not infos["_plan"][i]
    assert finished >= N


def test_make_vec_without_plans_gives_the_single_envs_objectives_and_plans_on_request() -> None:
    """Plans off (the default): the episode statistics are the single env's metrics; ``call("plan", i)`` its plan."""
    import gymnasium as gym

    import gpu_env  # noqa: F401  (registers GpuCluster-v0)
    from gpu_env.env import GpuClusterEnv
    from gpu_env.plan import Plan

    scenarios = [generate(family, 8000 + seed) for seed, family in enumerate(ALL_FAMILIES)]
    N = 4
    for sc in scenarios[:4]:
        venv = gym.make_vec("GpuCluster-v0", num_envs=N, vectorization_mode="vector_entry_point", scenario=sc)
        singles = [GpuClusterEnv(sc) for _ in range(N)]
        obs, infos = venv.reset(seed=0)
        for env in singles:
            env.reset(seed=0)
        buffers = dict(obs)
        rng = np.random.default_rng(len(sc.name))
        live = np.ones(N, dtype=bool)
        while live.any():
            masks = venv.action_masks()
            actions = np.where(masks, rng.random(masks.shape), -1).argmax(axis=1)
            obs, rewards, terminated, truncated, infos = venv.step(actions)
            assert all(obs[key] is buffers[key] for key in obs)  # filled in place
            assert "plan" not in infos and "metrics" not in infos
            for i in np.flatnonzero(live):
                _, reward, term, trunc, info = singles[i].step(int(actions[i]))
                assert abs(rewards[i] - reward) <= TOL and (terminated[i], truncated[i]) == (term, trunc)
                assert bool(infos.get("_episode", np.zeros(N, bool))[i]) == (term or trunc)
                if not (term or trunc):
                    continue
                live[i] = False
                stats = {key: values[i] for key, values in infos["episode"].items()}
                metrics = info["metrics"]
                for key in ("objective", "job_value", "utilization"):
                    assert abs(stats[key] - metrics[key]) <= 1e-6, key  # the metrics are rounded to 6 places
                assert stats["shortfall"] == metrics["shortfall"]
                assert abs(stats["objective"] - (stats["job_value"] - stats["penalty"])) <= TOL
                assert abs(stats["r"] * info["reward_scale"] - info["objective"]) <= 1e-6
                assert stats["l"] == singles[i].episode.steps
                plan = venv.call("plan", i)
                assert isinstance(plan, Plan) and validate(sc, plan) == []
                assert plan.to_dict() == info["plan"]
            live &= ~(terminated | truncated)
        assert not infos["_episode"][~(terminated | truncated)].any()


def test_vector_env_draws_scenarios_from_families() -> None:
    import gymnasium as gym

    venv = gym.make_vec("GpuCluster-v0", num_envs=8, vectorization_mode="vector_entry_point", scenario=list(FAMILIES))
    venv.reset(seed=1)
    rng = np.random.default_rng(0)  # one stream: fresh draws every step
    ended = 0
    seen: set[str] = set()
    for _ in range(80):
        masks = venv.action_masks()
        actions = np.where(masks, rng.random(masks.shape), -1).argmax(axis=1)
        live = masks.any(axis=1)  # an episode that ended last step restarts now, its action ignored
        assert masks[np.arange(8), actions][live].all()
        _, rewards, terminated, truncated, infos = venv.step(actions)
        assert np.isfinite(rewards).all() and not truncated.any()
        if terminated.any():
            ended += int(terminated.sum())
            for i in np.flatnonzero(terminated):
                plan = venv.call("plan", i).to_dict()
                assert plan["placements"] is not None and infos["_episode"][i]
                seen.add(plan["scenario"])
    assert ended > 8
    assert len(seen) > 1  # the episodes were drawn from several families, not one scenario


def sc_small() -> Scenario:
    return generate("training-heavy", 0)


def test_maskable_ppo_trains_on_the_sb3_adapter() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks

    from gpu_env.batch.vector_env import GpuClusterVectorEnv
    from lab.sb3_vec_env import BatchVecEnv

    class Recording(BatchVecEnv):
        """The adapter, keeping the engine's masks and the actions of every step, and counting engine steps."""

        def __init__(self, venv: GpuClusterVectorEnv) -> None:
            super().__init__(venv)
            self.steps: list[tuple[np.ndarray, np.ndarray]] = []  # (the engine's masks before the step, actions)
            self.engine_steps = 0
            engine_step = venv.engine.step

            def counted(actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                self.engine_steps += 1
                return engine_step(actions)

            venv.engine.step = counted  # type: ignore[method-assign]

        def step_wait(self):  # type: ignore[no-untyped-def]
            self.steps.append((self.venv.engine.action_masks(), self._actions.copy()))
            return super().step_wait()

    torch.set_num_threads(1)
    N = 4
    venv = Recording(GpuClusterVectorEnv(N, generate("training-heavy", 0)))
    venv.reset()
    masks = get_action_masks(venv)
    assert masks.shape == (N, venv.action_space.n) and masks.all(axis=0).any()
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(40):
        actions = np.where(venv.action_masks(), rng.random(masks.shape), -1).argmax(axis=1)
        _, _, dones, infos = venv.step(actions)
        for i in np.flatnonzero(dones):
            assert "terminal_observation" in infos[i] and infos[i]["plan"]["scheduler"] == "env"
            ended += 1
    assert ended >= 4 and venv.action_masks().any(axis=1).all()  # restarted episodes have moves at once
    venv.steps.clear()
    venv.engine_steps = 0

    model = MaskablePPO("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(256)
    # One rollout of 64 steps in each of the 4 episodes: SB3 counts what the adapter was stepped.
    assert len(venv.steps) == venv.engine_steps == 64 and model.num_timesteps == N * venv.engine_steps == 256
    # Every action SB3 sent was allowed by the engine's mask at that step ...
    for step_masks, actions in venv.steps:
        assert step_masks[np.arange(N), actions].all()
    # ... and the rollout buffer trained on exactly those masks and actions.
    buffer = model.rollout_buffer
    recorded_masks = np.stack([m for m, _ in venv.steps])  # (n_steps, N, A)
    recorded_actions = np.stack([a for _, a in venv.steps])  # (n_steps, N)
    stored_masks = buffer.swap_and_flatten(recorded_masks) if buffer.generator_ready else recorded_masks
    stored_actions = buffer.swap_and_flatten(recorded_actions) if buffer.generator_ready else recorded_actions
    assert np.array_equal(buffer.action_masks.reshape(stored_masks.shape).astype(bool), stored_masks)
    assert np.array_equal(buffer.actions.reshape(stored_actions.shape).astype(np.int64), stored_actions)
    # The update changed the policy, and left it finite.
    after = list(model.policy.parameters())
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, after, strict=True))
    assert all(torch.isfinite(a).all() for a in after)
