"""Train the live policy: sb3-contrib's MaskablePPO on GpuClusterLive-v0, chosen on validation days, exported.

Read top to bottom. Usage::

    .venv/bin/python train_live.py [--timesteps 200000] [--num-envs 4] [--seed 0] [--device cpu|cuda|auto]
        [--run-dir runs/live_ppo] [--export agents/policies/live.onnx] [--no-export]
    .venv/bin/tensorboard --logdir runs/live_ppo        # the curves

1. **Days.** Every episode is a day of one of the seven families (``--families``) at its own size, drawn
   from the training seeds (:data:`agents.rolling.live_env.TRAIN_SEEDS`: the families' past), with the
   actual demand at a forecast error drawn from ``--sigmas`` and runtimes from ``--runtime-models``.
2. **Rewards** against rolling greedy on the same day (``baseline="greedy"``): an episode's return is the
   day's gain over rolling greedy as a share of rolling greedy's objective.
3. **PPO**: MaskablePPO with an MLP (``--hidden``), ``--num-envs`` environments in SB3's DummyVecEnv, every
   draw seeded by ``--seed`` (torch on one thread). The policy starts at the base decision: the logit of each
   dimension's value 0 (start as planned, no headroom) starts ``--prior`` above the others.
   With ``--imitate-days N``, before PPO the policy imitates the sampled-futures planner: N training days are
   played by ``anticipate`` (fitted from 8 past days of the family, as the live benchmark fits it), each slot
   labelled with the action that stands for its decision (:func:`expert_action`), and the actor is trained
   on them by the masked log-likelihood for ``--imitate-epochs`` epochs.
   ``--init FILE`` starts the actor from an exported live policy instead (its ONNX weights).
4. **Selection.** Every ``--eval-every`` timesteps the policy plays the validation days
   (:data:`~agents.rolling.live_env.VALIDATION_SEEDS`, ``--validation-days`` per family, each at sigma 0.3
   with trace runtimes and at sigma 0 with exact ones) deterministically under the mask, as ``live-ppo``
   plans; of the checkpoints PPO has trained (after its first update: the policy shipped as ``live-ppo`` is
   trained by PPO), the one with the best mean ratio to rolling greedy is kept. The days the benchmark scores
   are other seeds again (benchmarks/online_benchmark.py) and are never seen here.
5. **Export** of the kept checkpoint to ONNX with its card (:func:`agents.learned.live_export.export`): the
   validation figures of every evaluation, the one kept, the run's settings and time.

TensorBoard (``run_dir``): SB3's ``rollout/*``, ``train/*`` and ``time/fps``, and ``validation/vs_greedy``,
``validation/worst_vs_greedy`` per evaluation.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.learned.live_export import actor_logits, export, prefer_base  # noqa: E402
from agents.rolling.allocator import Decision  # noqa: E402
from agents.rolling.anticipate import LIVE_FORECAST, live_planner  # noqa: E402
from agents.rolling.drawn_history import past_days  # noqa: E402
from agents.rolling.forecast import NoiseModel  # noqa: E402
from agents.rolling.live_env import TRAIN_SEEDS, VALIDATION_SEEDS, GpuClusterLiveEnv  # noqa: E402
from agents.rolling.live_policy import HEADROOM, MAX_STARTS, SlotView, action_nvec, decide_action, view  # noqa: E402
from agents.rolling.live_ppo import POLICY, masked_argmax  # noqa: E402
from agents.rolling.runtimes import draw_runtimes  # noqa: E402
from agents.rolling.simulation import LiveDay, realized_day  # noqa: E402
from gpu_env.generators import FAMILIES, generate  # noqa: E402

HISTORY_DAYS = 8
"""Past days the expert (``anticipate``) is fitted from for each imitated day, as the live benchmark fits it."""


def validation_days(families: tuple[str, ...], per_family: int) -> list[dict[str, Any]]:
    """The days a checkpoint is chosen on: each family's first seeds, at sigma 0.3 (trace) and 0 (exact)."""
    days = []
    for family in families:
        for k in range(per_family):
            for sigma, model in ((0.3, "trace"), (0.0, "exact")):
                days.append({"family": family, "seed": VALIDATION_SEEDS[k], "sigma": sigma, "runtime_model": model})
    return days


def expert_action(slot: SlotView, decision: Decision) -> np.ndarray:
    """The action that stands for the sampled-futures planner's decision at the slot.

    ``anticipate`` takes one of its candidates (:attr:`Decision.chosen`): its base decision (all zeros),
    holding one start-now job or all of them (their hold bits), or a hedge plan (``margin z``: that level for every
    app, the nearest of :data:`HEADROOM`, a margin at or below the forecast as none); the plan without the fill and
    the plan of a sampled future count as the base.
    """
    action = np.zeros(len(action_nvec()), dtype=np.int64)
    label = decision.chosen
    if label.startswith("holding "):
        target = label.removeprefix("holding ")
        held = {p.job for p in slot.starts} if target == "all" else {target}
        for i, p in enumerate(slot.starts):
            action[i] = int(p.job in held)
    elif label.startswith(("headroom ", "margin ")):
        z = max(0.0, float(label.split()[1]))  # the live action raises only: a margin below the forecast reads as none
        level = int(np.argmin([abs(z - h) for h in HEADROOM]))
        for a in range(len(slot.state.apps)):
            action[MAX_STARTS + a] = level
    return action


def candidate_actions(slot: SlotView) -> list[np.ndarray]:
    """The actions a hindsight label weighs at a slot.

    The base decision first, then each single hold, all holds, and each headroom level for every app.
    """
    zeros = np.zeros(len(action_nvec()), dtype=np.int64)
    out = [zeros]
    for i in range(len(slot.starts)):
        a = zeros.copy()
        a[i] = 1
        out.append(a)
    if len(slot.starts) > 1:
        a = zeros.copy()
        a[: len(slot.starts)] = 1
        out.append(a)
    for level in range(1, len(HEADROOM)) if slot.state.apps else ():
        a = zeros.copy()
        a[MAX_STARTS : MAX_STARTS + len(slot.state.apps)] = level
        out.append(a)
    return out


def rolled_out(live: LiveDay, slot: SlotView, action: np.ndarray) -> float:
    """The realized day's objective with ``action`` taken now and the base decision in every later slot."""
    day = live.fork()
    day.commit(decide_action(slot, action))
    return play_base(day)


def play_base(day: LiveDay) -> float:
    """Play the rest of ``day`` with the base decision (the action of all zeros); the executed day's objective."""
    zeros = np.zeros(len(action_nvec()), dtype=np.int64)
    while not day.done:
        state, ran = day.state()
        day.commit(decide_action(view(state, day.t, ran), zeros))
    return day.result("base").metrics.objective


def hindsight_action(live: LiveDay, slot: SlotView, margin: float) -> np.ndarray:
    """The candidate action whose rollout on the realized day earns the most (:func:`rolled_out`).

    The base decision unless another earns more than ``margin`` times the base's objective more.
    """
    candidates = candidate_actions(slot)
    if len(candidates) == 1:
        return candidates[0]
    values = [rolled_out(live, slot, a) for a in candidates]
    best = int(np.argmax(values))
    if values[best] - values[0] <= margin * max(abs(values[0]), 1.0):
        return candidates[0]
    return candidates[best]


def imitation_data(
    families: tuple[str, ...],
    days: int,
    sigmas: tuple[float, ...],
    models: tuple[str, ...],
    seed: int,
    labels: str = "anticipate",
    margin: float = 0.002,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slots of training days, each labelled with an expert's action: observations, masks, actions.

    ``labels="anticipate"``: the days are played by ``anticipate`` (fitted from 8 past days), each slot labelled
    with its decision (:func:`expert_action`). ``labels="hindsight"``: each slot is labelled with the candidate
    action that earns most on the day as it then happened (:func:`hindsight_action`), and the day is played on
    with it: a clairvoyant expert whose choices the policy learns to predict from what it sees.
    """
    rng = np.random.default_rng(seed)
    obs, masks, actions = [], [], []
    began = time.perf_counter()
    for k in range(days):
        family = families[k % len(families)]
        day_seed = int(TRAIN_SEEDS[int(rng.integers(len(TRAIN_SEEDS)))])
        sigma, model = sigmas[k % len(sigmas)], models[(k // len(sigmas)) % len(models)]
        day = generate(family, day_seed)
        runtimes = draw_runtimes(day, model, day_seed)
        actual = realized_day(day, NoiseModel(sigma).draw(day, day_seed), runtimes)
        planner = None
        if labels == "anticipate":
            past = past_days(family, day.gpus, day_seed, HISTORY_DAYS, sigma)
            planner = live_planner("anticipate", history=past, day=day, seed=day_seed)
        live = LiveDay(day, actual, corrector=LIVE_FORECAST, runtimes=runtimes)
        while not live.done:
            state, ran = live.state()
            slot = view(state, live.t, ran)
            if planner is not None:
                decision = planner.decide(state, live.t, ran)
                action = expert_action(slot, decision)
            else:
                action = hindsight_action(live, slot, margin)
                decision = decide_action(slot, action)
            obs.append(slot.observation)
            masks.append(slot.mask)
            actions.append(action)
            live.commit(decision)
        if (k + 1) % 10 == 0 or k + 1 == days:
            print(
                f"train_live.py: imitation: {k + 1} of {days} days labelled ({labels}) "
                f"({(time.perf_counter() - began) / 60:.1f} min)",
                file=sys.stderr,
                flush=True,
            )
    return np.array(obs, dtype=np.float32), np.array(masks, dtype=bool), np.array(actions, dtype=np.int64)


def play(policy_act: Any, env: GpuClusterLiveEnv, day: dict[str, Any]) -> tuple[float, float]:
    """One validation day played by ``policy_act(observation, mask) -> action``: (objective, rolling greedy's)."""
    obs, info = env.reset(options=day)
    done = False
    while not done:
        obs, _, done, _, info = env.step(policy_act(obs, env.action_masks()))
    return float(info["objective"]), float(info["greedy_objective"])


def imitate(
    model: Any,
    obs: np.ndarray,
    masks: np.ndarray,
    actions: np.ndarray,
    epochs: int,
    batch: int,
    seed: int,
    departure_weight: float = 1.0,
) -> dict[str, Any]:
    """Behaviour cloning of the expert's actions, then how often the policy agrees.

    The loss is the masked log-likelihood, a slot where the expert departs from the base decision weighted
    ``departure_weight``.
    """
    import torch

    policy = model.policy
    device = policy.device
    X = torch.as_tensor(obs, device=device)
    A = torch.as_tensor(actions, device=device)
    W = torch.as_tensor(
        np.where(np.any(actions != 0, axis=1), departure_weight, 1.0), dtype=torch.float32, device=device
    )
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(actions))
        for at in range(0, len(order), batch):
            b = order[at : at + batch]
            _, log_prob, _ = policy.evaluate_actions(X[b], A[b], action_masks=masks[b])
            loss = -(W[b] * log_prob).sum() / W[b].sum()
            policy.optimizer.zero_grad()
            loss.backward()
            policy.optimizer.step()
    with torch.no_grad():
        logits = actor_logits(policy, X)
    rows = logits.cpu().numpy().astype(np.float64)
    taken = np.array([masked_argmax(row, m) for row, m in zip(rows, masks, strict=True)])
    same = np.all(taken == actions, axis=1)
    departs = np.any(actions != 0, axis=1)
    return {
        "slots": len(actions),
        "departures": int(departs.sum()),
        "agreement": float(same.mean()) if len(same) else 0.0,
        "agreement_departures": float(same[departs].mean()) if departs.any() else 0.0,
        "epochs": epochs,
        "departure_weight": departure_weight,
    }


def init_actor(policy: Any, path: Path) -> None:
    """Load an exported live policy's actor (its ONNX weights) into ``policy``; the value network stays fresh."""
    import onnx
    import torch
    from onnx import numpy_helper

    try:
        graph = onnx.load(str(path)).graph
    except OSError:
        raise
    except Exception as exc:  # protobuf's DecodeError and the like: not an ONNX file
        raise ValueError(f"not an ONNX model ({type(exc).__name__}: {exc})") from None
    weights = {i.name.removeprefix("inner."): numpy_helper.to_array(i) for i in graph.initializer}
    state = policy.state_dict()
    missing = [k for k in state if (k.startswith(("mlp_extractor.policy_net.", "action_net."))) and k not in weights]
    if missing:
        raise ValueError(f"the file holds no {missing[0]} (not a live policy of this network)")
    for key, value in weights.items():
        if key not in state or tuple(state[key].shape) != value.shape:
            raise ValueError(
                f"{key}: {value.shape} in the file, this network has {tuple(state.get(key, torch.empty(0)).shape)}"
            )
        state[key] = torch.as_tensor(value.copy())
    policy.load_state_dict(state)


def main(argv: list[str] | None = None) -> int:
    """Train, choose and export the live policy (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=200_000)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--sigmas", default="0,0.3")
    parser.add_argument("--runtime-models", default="exact,trace")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--n-steps", type=int, default=256, help="steps per environment per update")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--prior", type=float, default=3.0, help="initial logit of the base decision's values")
    parser.add_argument("--imitate-days", type=int, default=0, help="days of anticipate's decisions to imitate first")
    parser.add_argument("--init", type=Path, default=None, help="start from this exported live policy's actor (ONNX)")
    parser.add_argument("--imitate-epochs", type=int, default=20)
    parser.add_argument(
        "--labels", default="anticipate", choices=("anticipate", "hindsight"), help="the expert imitated"
    )
    parser.add_argument("--label-margin", type=float, default=0.002, help="hindsight: share a departure must gain")
    parser.add_argument("--departure-weight", type=float, default=1.0, help="imitation: weight of a departure's slot")
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--validation-days", type=int, default=2, help="per family, each at two sigmas")
    parser.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "live_ppo")
    parser.add_argument("--export", type=Path, default=POLICY)
    parser.add_argument("--no-export", action="store_true")
    args = parser.parse_args(argv)
    families = tuple(f for f in args.families.split(",") if f)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        print(
            f"train_live.py: --families: unknown {', '.join(unknown)} (known: {', '.join(FAMILIES)})", file=sys.stderr
        )
        return 2
    try:
        sigmas = tuple(float(s) for s in args.sigmas.split(","))
    except ValueError:
        print(f"train_live.py: --sigmas: expected numbers, got {args.sigmas!r}", file=sys.stderr)
        return 2
    models = tuple(m for m in args.runtime_models.split(",") if m)
    if any(m not in ("exact", "trace") for m in models):
        print(
            f"train_live.py: --runtime-models: expected exact and/or trace, got {args.runtime_models!r}",
            file=sys.stderr,
        )
        return 2

    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    if device == "auto":
        device = "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("train_live.py: --device cuda: no CUDA device here", file=sys.stderr)
        return 2
    env_kwargs = {"families": families, "sigma": sigmas, "runtime_model": models, "baseline": "greedy"}
    vec = make_vec_env(GpuClusterLiveEnv, n_envs=args.num_envs, seed=args.seed, env_kwargs=env_kwargs)
    model = MaskablePPO(
        "MlpPolicy",
        vec,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        ent_coef=args.ent_coef,
        gamma=1.0,
        gae_lambda=0.95,
        policy_kwargs={"net_arch": [args.hidden, args.hidden]},
        tensorboard_log=str(args.run_dir),
        seed=args.seed,
        device=device,
        verbose=0,
    )
    # Start at the base decision: the value 0 of every dimension (start as planned, no headroom) is made
    # e^PRIOR times likelier than each other value, so that exploration begins from rolling greedy's fill.
    prefer_base(model.policy, args.prior)
    init_card: dict[str, Any] | None = None
    if args.init is not None:
        try:
            init_actor(model.policy, args.init)
            before = json.loads(args.init.with_suffix(".json").read_text(encoding="utf-8"))
            init_card = {"file": str(args.init), **{k: before.get(k) for k in ("imitation", "selection", "settings")}}
        except (OSError, ValueError, KeyError) as exc:
            print(f"train_live.py: --init {args.init}: {exc}", file=sys.stderr)
            return 2
    imitation: dict[str, Any] = {}
    if args.imitate_days > 0:
        labelling = time.perf_counter()
        obs, masks, actions = imitation_data(
            families, args.imitate_days, sigmas, models, args.seed, args.labels, args.label_margin
        )
        imitation = imitate(
            model, obs, masks, actions, args.imitate_epochs, args.batch_size, args.seed, args.departure_weight
        )
        imitation.update(
            days=args.imitate_days,
            labels=args.labels,
            margin=args.label_margin,
            minutes=round((time.perf_counter() - labelling) / 60.0, 1),
        )
        print(
            f"train_live.py: imitation of {len(actions)} slots ({imitation['departures']} departures from the "
            f"base decision): the policy takes the expert's action on {imitation['agreement']:.3f} of them, on "
            f"{imitation['agreement_departures']:.3f} of the departures",
            file=sys.stderr,
        )
    checker = GpuClusterLiveEnv(families, baseline="greedy")
    days = validation_days(families, args.validation_days)
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"vs_greedy": -np.inf}
    began = time.perf_counter()

    def act(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            tensor = torch.as_tensor(obs, dtype=torch.float32, device=model.device).reshape(1, -1)
            logits = actor_logits(model.policy, tensor)
        return masked_argmax(logits.cpu().numpy().reshape(-1).astype(np.float64), mask)

    def evaluate(step: int) -> None:
        ratios = []
        for day in days:
            objective, greedy = play(act, checker, day)
            ratios.append(objective / greedy if greedy > 0 else 1.0)
        row = {
            "timesteps": step,
            "vs_greedy": float(np.mean(ratios)),
            "worst_vs_greedy": float(np.min(ratios)),
            "days_below_greedy": int(sum(r < 1 - 1e-9 for r in ratios)),
            "minutes": round((time.perf_counter() - began) / 60.0, 2),
        }
        history.append(row)
        model.logger.record("validation/vs_greedy", row["vs_greedy"])
        model.logger.record("validation/worst_vs_greedy", row["worst_vs_greedy"])
        print(
            f"train_live.py: {step} timesteps, {row['minutes']} min: validation {row['vs_greedy']:.4f} of rolling "
            f"greedy (worst day {row['worst_vs_greedy']:.4f}, {row['days_below_greedy']} of {len(days)} below)",
            file=sys.stderr,
            flush=True,
        )
        if step > 0 and row["vs_greedy"] > best["vs_greedy"]:  # a checkpoint PPO has trained
            best.update(row, state=copy.deepcopy(model.policy.state_dict()))

    class Validate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = args.eval_every

        def _on_training_start(self) -> None:
            evaluate(0)

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next:
                self.next += args.eval_every
                evaluate(self.num_timesteps)
            return True

    model.learn(total_timesteps=args.timesteps, callback=Validate(), tb_log_name="ppo")
    if history[-1]["timesteps"] != model.num_timesteps:
        evaluate(model.num_timesteps)
    model.policy.load_state_dict(best.pop("state"))
    minutes = (time.perf_counter() - began) / 60.0
    print(
        f"train_live.py: kept the checkpoint of {best['timesteps']} timesteps: {best['vs_greedy']:.4f} of rolling "
        f"greedy on {len(days)} validation days ({minutes:.1f} min in all)",
        file=sys.stderr,
    )
    if not args.no_export:
        card = {
            "trained_by": "sb3-contrib MaskablePPO (train_live.py)",
            "environment": "GpuClusterLive-v0",
            "settings": {
                "timesteps": args.timesteps,
                "num_envs": args.num_envs,
                "seed": args.seed,
                "families": list(families),
                "sigmas": list(sigmas),
                "runtime_models": list(models),
                "hidden": args.hidden,
                "n_steps": args.n_steps,
                "batch_size": args.batch_size,
                "learning_rate": args.learning_rate,
                "ent_coef": args.ent_coef,
                "prior": args.prior,
                "init": None if args.init is None else str(args.init),
                "device": device,
            },
            "imitation": imitation,
            "init": init_card,
            "validation_days": days,
            "validation": history,
            "selection": best,
            "minutes": round(minutes, 1),
            "machine": platform.platform(),
            "torch": torch.__version__,
        }
        export(model.policy, args.export, card)
        print(f"train_live.py: -> {args.export} and {args.export.with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
