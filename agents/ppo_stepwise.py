"""The stepwise learned planner (``ppo-stepwise``): a policy that sees the grid as it decodes, no torch.

Planning is one onnxruntime call and two compiled calls (``docs/learned-mode.md``, "The stepwise policy"):

1. the exported network (:mod:`lab.training.stepwise_training`) maps the queue's and the cluster's features
   (:mod:`gpu_env.queue_features`) to each job's static row and returns its step head;
2. :func:`gpu_env.stepwise.orders` builds ``options.samples`` candidates turn by turn, each turn scoring the
   window of the queue against the partial plan: candidate 0 the argmax with trades inline, candidate 1 the argmax
   with deferred trades, the others sampled (Gumbel noise at the card's temperature, seeded by ``options.seed``),
   their modes alternating;
3. :func:`gpu_env.listsched.decode` replays the candidates and promotes on candidate 0 and on the best of the
   others (:func:`agents.ppo.candidate_groups`): more candidates never plan worse than the argmax alone.

``options.guard`` works as in :mod:`agents.ppo` (FIFO by default). The policy is an ONNX file with a JSON card
(``agents/policies/stepwise.onnx`` + ``.json``, package data), trained by ``train_stepwise.py`` and read by the
learned planners' one loader (:mod:`agents.policy_files`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from agents import policy_files
from agents.options import PlanOptions
from agents.policy_files import PolicyError, PolicyFile, PolicyKind, check_names
from agents.ppo import PROMOTE_ROUNDS, candidate_groups, check_temperature, guarded_plan
from gpu_env import stepwise
from gpu_env.listsched import MODE_AFTER, MODE_INLINE, Decoded, ListInstance, decode
from gpu_env.plan import Plan
from gpu_env.queue_features import CLUSTER_FEATURES, JOB_FEATURES, cluster_features, job_features
from gpu_env.scenario import Scenario
from gpu_env.stepwise import STEP_FEATURES, WINDOW, StepHead

CARD_FORMAT = "gpualloc-stepwise-policy/1"
INPUTS: tuple[str, ...] = ("jobs", "cluster")
OUTPUTS: tuple[str, ...] = ("static", "w_step", "w_out", "b_out")
DEFAULT_POLICY = Path(str(resources.files("agents").joinpath("policies", "stepwise.onnx")))


def observation_spec() -> dict[str, Any]:
    """What a stepwise policy must have been trained on: its inputs, outputs and feature names."""
    return {
        "actions": "stepwise",
        "window": WINDOW,
        "inputs": list(INPUTS),
        "outputs": list(OUTPUTS),
        "features": {"jobs": list(JOB_FEATURES), "cluster": list(CLUSTER_FEATURES), "step": list(STEP_FEATURES)},
    }


@dataclass
class StepwisePolicy:
    """An exported stepwise policy ready to plan.

    Attributes:
        path: The ONNX file.
        card: The card's contents.
        sha256: Hex SHA-256 of the ONNX file.
        session: The onnxruntime session.
        temperature: Gumbel temperature of the sampled candidates.
    """

    path: Path
    card: dict[str, Any]
    sha256: str
    session: Any
    temperature: float

    def network(self, jobs: np.ndarray, cluster: np.ndarray) -> tuple[np.ndarray, StepHead]:
        """(n, J) job features and (C,) cluster features -> (n, H) static rows and the step head."""
        feed = {"jobs": jobs.astype(np.float32), "cluster": cluster.astype(np.float32)}
        rows, w_step, w_out, b_out = self.session.run(list(OUTPUTS), feed)
        head = StepHead(
            np.ascontiguousarray(w_step, dtype=np.float64),
            np.ascontiguousarray(w_out, dtype=np.float64).reshape(-1),
            np.ascontiguousarray(b_out, dtype=np.float64).reshape(1),
        )
        return np.ascontiguousarray(rows, dtype=np.float64), head


def _check_card(card: dict[str, Any], card_file: Path) -> None:
    if card.get("observation_spec") != observation_spec():
        raise PolicyError(
            f"{card_file}: field 'observation_spec': the policy was trained on other inputs than this planner "
            "gives (features, window or outputs); retrain with train_stepwise.py"
        )
    check_temperature(card, card_file)


POLICY_FILES = PolicyKind(
    "stepwise policy", (CARD_FORMAT,), "train one with train_stepwise.py, or pass --policy", _check_card
)
"""The stepwise planner's policy files (:func:`agents.policy_files.load`)."""
_CACHE: dict[policy_files.CacheKey, StepwisePolicy] = {}
"""Loaded policies by file version."""


def _loaded(policy: PolicyFile) -> StepwisePolicy:
    check_names(policy, INPUTS, OUTPUTS)
    temperature = check_temperature(policy.card, policy_files.card_path(policy.path))
    return StepwisePolicy(policy.path, policy.card, policy.sha256, policy.session, temperature)


def load_policy(path: str | os.PathLike[str] | None = None) -> StepwisePolicy:
    """Load (once per file version) an exported stepwise policy and check its card.

    Raises:
        PolicyError: The file or its card is missing or unreadable, or made for another planner.
    """
    return policy_files.load(path if path is not None else DEFAULT_POLICY, POLICY_FILES, _CACHE, _loaded)


def candidate_modes(samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(modes, sampled) of the candidates: the argmax inline, then deferred, then sampled ones alternating."""
    modes = np.where(np.arange(samples) % 2 == 0, MODE_INLINE, MODE_AFTER).astype(np.int64)
    sampled = np.arange(samples) >= 2
    return modes, sampled


def decode_candidates(
    inst: ListInstance,
    base: np.ndarray,
    rows: np.ndarray,
    head: StepHead,
    samples: int,
    seed: int,
    temperature: float,
    promote_rounds: int = PROMOTE_ROUNDS,
) -> Decoded:
    """The candidates' plans: turn orders built by the policy, replayed and promoted by the decoder."""
    modes, sampled = candidate_modes(samples)
    temperatures = np.where(sampled, temperature, 0.0)
    orders = stepwise.orders(inst, base, rows, head, modes, temperatures, seed)
    return decode(inst, orders, modes, promote_rounds=promote_rounds, groups=candidate_groups(samples))


def priority_base(scenario: Scenario, inst: ListInstance) -> np.ndarray:
    """The window's order: the pending jobs in greedy's priority order."""
    jobs = scenario.jobs
    weight = np.array([job.weight for job in jobs], dtype=np.float64)
    has_deadline = np.array([job.deadline is not None for job in jobs], dtype=np.bool_)
    return stepwise.priority_order(inst, weight, has_deadline)


def warm_up(path: str | os.PathLike[str] | None = None) -> None:
    """Load the policy and plan one small scenario, so that no later plan waits for the compiler.

    Raises:
        PolicyError: The policy file is missing, corrupt, or does not match the planner.
    """
    from gpu_env.generators import generate

    plan(generate("mixed-control", seed=0), PlanOptions(policy=Path(path) if path else None, samples=3))


def plan(scenario: Scenario, options: PlanOptions | None = None) -> Plan:
    """The stepwise planner as a scheduler: the best of its candidates, or the guard's plan.

    Args:
        scenario: The problem.
        options: ``options.policy`` names the exported ``.onnx`` file (default the shipped one);
            ``options.samples`` candidates, seeded by ``options.seed``; ``options.guard`` the baseline.

    Returns:
        The plan, named ``"ppo-stepwise"``, with ``info`` as :func:`agents.ppo.plan`'s.

    Raises:
        PolicyError: The policy file is missing, corrupt, or does not match the planner.
    """
    options = options or PlanOptions()
    policy = load_policy(options.policy)
    inst = ListInstance.build(scenario)
    rows, head = policy.network(job_features(scenario, inst), cluster_features(scenario, inst))
    found = decode_candidates(
        inst, priority_base(scenario, inst), rows, head, options.samples, options.seed, policy.temperature
    )
    record = {"file": policy.path.name, "sha256": policy.sha256}
    return guarded_plan(scenario, inst, found, options.guard, record, "ppo-stepwise")
