"""The allocator's learned fast mode: score the queue once, decode job orders in compiled code, no torch.

Planning is one onnxruntime call and one compiled call (``docs/learned-mode.md``):

1. :func:`gpu_env.queue_features.job_features` and
   :func:`~gpu_env.queue_features.cluster_features` describe the queue and the
   cluster (a row per job, no row per GPU or slot);
2. the exported scorer (ONNX, :mod:`lab.training.scorer`) gives every job a
   score and the instance a mode logit, in one call;
3. :func:`candidate_orders` makes ``options.samples`` job orders from those
   scores: the argmax order in the mode the policy prefers, then Gumbel-top-k
   (Plackett-Luce) draws seeded by ``options.seed``, alternating trade modes;
4. :func:`gpu_env.listsched.decode` places every order with the rules'
   placement (greedy's sweep, compiled), all candidates in one call, then
   improves two by promotion (the most valuable jobs a plan left out move to
   the front of its order, :data:`PROMOTE_ROUNDS` rounds, inside the same
   call): the argmax order and the best of the others
   (:func:`candidate_groups`), so more candidates never give a worse plan than
   the argmax order alone; the most valuable plan wins and only its plan is built.

``options.guard`` names a baseline computed too and returned when it is worth
more: FIFO (the shipped default: the learned mode is never below FIFO), greedy,
or none (the policy alone). ``plan.info`` records the policy, the candidates'
objectives and the winner. Every plan is valid by construction (the decoder
keeps SPEC section 2) and is validated again in the tests.

The policy file is an ONNX model written by :mod:`lab.training.export` with a
JSON card beside it (``default.onnx`` + ``default.json``), read by the learned
planners' one loader (:mod:`agents.policy_files`); the shipped one is package
data (``agents/policies/``), so an installed wheel plans without the repository.

>>> from gpu_env.generators import generate
>>> plan(generate("training-heavy", seed=0)).scheduler
'ppo'
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from agents import policy_files
from agents.options import DEFAULT_SAMPLES as DEFAULT_SAMPLES  # re-exported: callers read it here
from agents.options import Guard, PlanOptions
from agents.policy_files import PolicyError as PolicyError  # re-exported: the CLIs and servers catch it here
from agents.policy_files import PolicyFile, PolicyKind, check_names
from agents.policy_files import card_path as card_path  # re-exported
from agents.policy_files import onnx_session as onnx_session  # re-exported
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, Decoded, ListInstance, decode, fifo_replay
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Plan
from gpu_env.queue_features import CLUSTER_FEATURES, JOB_FEATURES, cluster_features, job_features
from gpu_env.scenario import Scenario

CARD_FORMAT = "gpualloc-policy/3"
READABLE_CARD_FORMATS: tuple[str, ...] = ("gpualloc-policy/2", CARD_FORMAT)
"""Formats :func:`load_policy` reads: /3 adds the card's ``selection`` (the round chosen on validation instances) and
reports ``evaluation`` on instances of its own; what the planner checks (spec, temperature) is the same in both."""
INPUTS: tuple[str, ...] = ("jobs", "mask", "cluster")
OUTPUTS: tuple[str, ...] = ("scores", "mode")
DEFAULT_TEMPERATURE = 1.0
PROMOTE_ROUNDS = 2
"""Rounds of the decoder's promotion pass on the best candidate (:func:`gpu_env.listsched.decode`)."""
# The shipped policy, package data of ``agents`` (pyproject.toml). pip installs a wheel's files on
# disk, so the resource is a path there; onnxruntime and the card check read it as a file.
DEFAULT_POLICY = Path(str(resources.files("agents").joinpath("policies", "default.onnx")))


def observation_spec() -> dict[str, Any]:
    """What a policy must have been trained on: the action space and the feature names of each input."""
    return {
        "actions": "list",
        "inputs": list(INPUTS),
        "outputs": list(OUTPUTS),
        "features": {"jobs": list(JOB_FEATURES), "cluster": list(CLUSTER_FEATURES)},
    }


ScoreFn = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, float]]


@dataclass
class LoadedPolicy:
    """An exported policy ready to plan: its ONNX session and card.

    Attributes:
        path: The ONNX file.
        card: The card's contents.
        sha256: Hex SHA-256 of the ONNX file (what a plan records, not the machine's path).
        score: (jobs (n, F), mask (n,), cluster (C,)) -> (scores (n,), mode logit).
        temperature: Gumbel temperature of the sampled orders (the card's ``temperature``).
        warm: Whether :func:`warm_up` has planned with it in this process.
    """

    path: Path
    card: dict[str, Any]
    sha256: str
    score: ScoreFn
    temperature: float = DEFAULT_TEMPERATURE
    warm: bool = False


_CACHE: dict[policy_files.CacheKey, LoadedPolicy] = {}
"""Loaded policies by file version (:func:`agents.policy_files.load`)."""


def load_policy(path: str | os.PathLike[str] | None = None) -> LoadedPolicy:
    """Load (once per file version) an exported policy and check its card against this planner.

    Args:
        path: The ``.onnx`` file; default the shipped ``agents/policies/default.onnx``.

    Raises:
        PolicyError: The file or its card is missing or unreadable, or the card's
            observation spec differs from this planner's.
    """
    return policy_files.load(path if path is not None else DEFAULT_POLICY, POLICY_FILES, _CACHE, _loaded)


def check_temperature(card: dict[str, Any], card_file: Path, default: float | None = None) -> float:
    """The card's Gumbel temperature (``default`` when absent, if given).

    Raises:
        PolicyError: It is not a positive finite number.
    """
    temperature = card.get("temperature", default)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not math.isfinite(temperature)
        or not temperature > 0
    ):
        raise PolicyError(f"{card_file}: field 'temperature': expected a positive number, got {temperature!r}")
    return float(temperature)


def _check_card(card: dict[str, Any], card_file: Path) -> None:
    _check_spec(card, card_file)
    check_temperature(card, card_file, DEFAULT_TEMPERATURE)


def _check_spec(card: dict[str, Any], card_file: Path) -> None:
    spec = card.get("observation_spec")
    if not isinstance(spec, dict):
        raise PolicyError(f"{card_file}: field 'observation_spec' missing or not an object")
    for field, want in observation_spec().items():
        got = spec.get(field)
        if field == "features" and isinstance(got, dict):
            for key, names in want.items():
                if got.get(key) != names:
                    raise PolicyError(
                        f"{card_file}: field 'observation_spec.features.{key}': the policy was trained on "
                        f"{got.get(key)}, this planner has {names}; retrain or export a matching policy"
                    )
        elif got != want:
            raise PolicyError(
                f"{card_file}: field 'observation_spec.{field}': the policy was trained with {got!r}, "
                f"this planner has {want!r}; retrain or export a matching policy"
            )


POLICY_FILES = PolicyKind("policy", READABLE_CARD_FORMATS, "train one with train.py, or pass --policy", _check_card)
"""The fast mode's policy files (:func:`agents.policy_files.load`)."""


def _loaded(policy: PolicyFile) -> LoadedPolicy:
    """The fast mode's policy from its opened file: the scorer's inputs and outputs checked."""
    session = policy.session
    check_names(policy, INPUTS, OUTPUTS, prefix=True)
    inputs = session.get_inputs()
    for inp, want in ((inputs[0], len(JOB_FEATURES)), (inputs[2], len(CLUSTER_FEATURES))):
        last = inp.shape[-1] if inp.shape else None
        if isinstance(last, int) and last != want:
            raise PolicyError(f"{policy.path}: input {inp.name!r} has {last} features, this planner gives {want}")

    def score(jobs: np.ndarray, mask: np.ndarray, cluster: np.ndarray) -> tuple[np.ndarray, float]:
        feed = {"jobs": jobs[None], "mask": mask[None].astype(np.float32), "cluster": cluster[None]}
        scores, mode = session.run(list(OUTPUTS), feed)
        return scores[0], float(mode[0])

    temperature = check_temperature(policy.card, card_path(policy.path), DEFAULT_TEMPERATURE)
    return LoadedPolicy(policy.path, policy.card, policy.sha256, score, temperature)


def warm_up(path: str | os.PathLike[str] | None = None) -> None:
    """Pay this process's one-time costs of planning before anything is timed.

    Loads the policy (:func:`load_policy`) and plans one small generated scenario, so that the
    onnxruntime session, the decoder's compiled code (numba compiles it on a machine's first use and
    loads it from its disk cache in later processes) and the imports are ready. Once per loaded policy;
    later calls return at once.

    Raises:
        PolicyError: The policy file is missing, corrupt, or does not match the planner.
    """
    policy = load_policy(path)
    if policy.warm:
        return
    from gpu_env.generators import generate

    # mixed-control has training, inference and real-time apps that jobs trade against: every compiled path runs.
    sc = generate("mixed-control", seed=0)
    inst, _ = _decode_candidates(sc, policy, samples=2, seed=0)
    fifo_replay(sc, inst)
    policy.warm = True


def policy_record(policy: LoadedPolicy) -> dict[str, str]:
    """What a plan records about the policy that made it: file name and hash, no path of this machine."""
    return {"file": policy.path.name, "sha256": policy.sha256}


# ----------------------------------------------------------------------------- candidates


def candidate_orders(
    scores: np.ndarray, mode_logit: float, pending: np.ndarray, samples: int, seed: int, temperature: float
) -> tuple[np.ndarray, np.ndarray]:
    """Job orders and trade modes of the candidates, from one set of scores.

    Candidate 0 is the argmax order (scores descending, ties by file position)
    in the mode the policy prefers (:data:`~gpu_env.listsched.MODE_AFTER` when
    ``mode_logit > 0``); candidate 1 the same order in the other mode; the
    others are Gumbel-top-k draws (a Plackett-Luce sample of the whole order
    each, at ``temperature``), their modes alternating from the preferred one.

    Args:
        scores: (n,) score of each job.
        mode_logit: The policy's preference for deferred trades.
        pending: (n,) bool, the jobs to order (inherited ones are not).
        samples: Candidates (at least 1).
        seed: Seed of the Gumbel draws.
        temperature: Scale of the Gumbel noise.

    Returns:
        orders (samples, m) of job indices and modes (samples,), m the pending jobs.
    """
    idx = np.flatnonzero(pending)
    s = scores[idx].astype(np.float64)
    prefer = MODE_AFTER if mode_logit > 0 else MODE_INLINE
    other = MODE_INLINE if prefer == MODE_AFTER else MODE_AFTER
    orders = np.empty((samples, idx.size), dtype=np.int64)
    modes = np.empty(samples, dtype=np.int64)
    orders[0] = idx[np.argsort(-s, kind="stable")]
    modes[0] = prefer
    if samples > 1:
        orders[1] = orders[0]
        modes[1] = other
    if samples > 2:
        rng = np.random.default_rng(seed)
        gumbel = -np.log(-np.log(rng.random((samples - 2, idx.size)) + 1e-300) + 1e-300)
        keys = s[None, :] + temperature * gumbel
        orders[2:] = idx[np.argsort(-keys, axis=1, kind="stable")]
        modes[2:] = np.where(np.arange(samples - 2) % 2 == 0, prefer, other)
    return orders, modes


def _decode_candidates(
    scenario: Scenario, policy: LoadedPolicy, samples: int, seed: int, promote_rounds: int = PROMOTE_ROUNDS
) -> tuple[ListInstance, Decoded]:
    inst = ListInstance.build(scenario)
    jobs = job_features(scenario, inst)
    cluster = cluster_features(scenario, inst)
    scores, mode_logit = policy.score(jobs, inst.pending, cluster)
    orders, modes = candidate_orders(scores, mode_logit, inst.pending, samples, seed, policy.temperature)
    return inst, decode(inst, orders, modes, promote_rounds=promote_rounds, groups=candidate_groups(samples))


def candidate_groups(samples: int) -> np.ndarray:
    """Promotion groups of the candidates: the argmax order alone in group 0, the others in group 1.

    Promotion refines the best of each group (:func:`gpu_env.listsched.decode`), so the planner with many
    candidates is never below the argmax order alone, promoted as it is with ``samples=1``.
    """
    return np.minimum(np.arange(samples, dtype=np.int64), 1)


def candidates(
    scenario: Scenario, policy: LoadedPolicy, samples: int, seed: int = 0, promote_rounds: int = PROMOTE_ROUNDS
) -> list[Plan]:
    """The policy's candidate plans for a scenario, with their metrics (for inspection).

    :func:`plan` chooses among the same candidates but builds only the winner's plan.

    Args:
        scenario: The problem.
        policy: A loaded policy (:func:`load_policy`).
        samples: Number of candidates (at least 1); candidate 0 is the argmax order.
        seed: Seed of the sampled orders.
        promote_rounds: Rounds of promotion on the best candidate (0: each candidate as its order decodes).

    Returns:
        ``samples`` valid plans named ``"ppo"``, each with ``metrics`` filled.
    """
    _, decoded = _decode_candidates(scenario, policy, samples, seed, promote_rounds)
    plans = []
    for i in range(decoded.objective.size):
        p = decoded.plan(i, scenario, "ppo")
        p.metrics = compute_metrics(scenario, p)
        plans.append(p)
    return plans


def guard_plan(scenario: Scenario, inst: ListInstance, guard: Guard) -> tuple[Callable[[], Plan], float]:
    """The guard's plan (built only when asked for: it is used only when it wins) and its objective (SPEC section 3).

    The baseline both learned planners (``ppo`` and ``ppo-stepwise``) return when it is worth more than every
    candidate of their policy (``options.guard``; not :attr:`~agents.options.Guard.NONE`).

    FIFO's plan is replayed by the decoder (:func:`gpu_env.listsched.fifo_replay`: its peak reservation, its
    arrival order, no trades), one compiled call; the tests hold it to :func:`agents.fifo.plan` placement by
    placement.
    """
    if guard is Guard.FIFO:
        decoded = fifo_replay(scenario, inst)
        return (lambda: decoded.plan(0, scenario, "fifo")), float(decoded.objective[0])
    from agents import greedy

    found = greedy.solve(scenario)  # greedy's plan and its objective, as agents.greedy.plan returns the plan
    return (lambda: found.plan), found.objective


def plan(scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """The learned fast mode as a scheduler: the best of the policy's candidates, or the guard's plan.

    Args:
        scenario: The problem.
        options: ``options.policy`` names the exported ``.onnx`` file (default the
            shipped one); ``options.samples`` candidates are decoded, seeded by ``options.seed``;
            ``options.guard`` names the baseline (FIFO, greedy or none) computed too
            and returned, under the name ``"ppo"``, when it is worth more than every candidate.

    Returns:
        The plan, with ``info``: ``policy`` (file and hash), ``samples`` (candidates
        decoded), ``guard`` (the option's value), ``objectives`` (each candidate's
        objective), ``guard_objective`` (the baseline's, absent with guard ``none``)
        and ``winner`` (the winning candidate's index, or ``"fifo"``/``"greedy"``
        when the guard's plan won).

    Raises:
        PolicyError: The policy file is missing, corrupt, or does not match the planner.
    """
    options = options or PlanOptions()
    policy = load_policy(options.policy)
    inst, decoded = _decode_candidates(scenario, policy, options.samples, options.seed)
    return guarded_plan(scenario, inst, decoded, options.guard, policy_record(policy), "ppo")


def guarded_plan(
    scenario: Scenario, inst: ListInstance, decoded: Decoded, guard: Guard, policy: dict[str, str], scheduler: str
) -> Plan:
    """The best candidate's plan, or the guard's where it is worth more than every candidate; named ``scheduler``.

    What both learned planners (``ppo`` and ``ppo-stepwise``) return from their decoded candidates, with the
    ``info`` :func:`plan` describes.

    Args:
        scenario: The problem.
        inst: Its list instance, the candidates were decoded on.
        decoded: The candidates' plans; only the winner's is built.
        guard: The baseline (:func:`guard_plan`; none with :attr:`~agents.options.Guard.NONE`).
        policy: What the plan records about the policy (:func:`policy_record`).
        scheduler: The plan's scheduler name.
    """
    objectives = decoded.objective.tolist()
    winner: int | str = decoded.best  # the first on a tie: the argmax order first
    info: dict[str, Any] = {
        "policy": policy,
        "samples": len(objectives),
        "guard": guard.value,
        "objectives": [round(o, 6) for o in objectives],
    }
    result: Plan | None = None
    if guard is not Guard.NONE:
        build_baseline, guard_objective = guard_plan(scenario, inst, guard)
        info["guard_objective"] = round(guard_objective, 6)
        if guard_objective > max(objectives) + 1e-9:
            baseline = build_baseline()
            result = Plan(scenario.name, scheduler, list(baseline.placements), dict(baseline.curves))
            winner = guard.value
    if result is None:
        result = decoded.plan(int(winner), scenario, scheduler)  # only the winner's plan is built
    info["winner"] = winner
    result.info = info
    return result
