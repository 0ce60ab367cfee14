"""The learned policy's network: every pending job scored by the same weights (torch; training and export only).

The planner (:mod:`agents.ppo`) never imports this module: it runs the exported
ONNX file. The network reads the observation of :mod:`gpu_env.observation`:

* each job row goes through one shared MLP (the job embedding);
* a context vector comes from the slots (capacity, load, real-time and demand
  per slot, with each app's curves summed in), the GPUs and the apps, each
  embedded per item by a shared MLP and pooled (masked mean and max), and the
  global features;
* a second shared MLP sees each job's embedding beside the context and pooled
  summaries of all jobs (mean over jobs, max over the jobs that can start now),
  and scores the job's placement options (one logit per fit rule);
* ADVANCE gets one logit, and the critic one value, from the context and the
  pooled job scores.

No weight depends on the number of jobs, GPUs, slots or apps: the same trained
policy plans clusters and queues larger than any it saw. The ``grid`` key is not
read: its content reaches the network through the per-GPU free runs and the
per-slot loads.

For stable-baselines3 the network is a features extractor whose output holds the
action logits and the critic's features side by side; :class:`JobScorerPolicy`
splits them and uses the logits as they are (no extra linear layer mixes the
jobs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from gpu_env.episode import FIT_RULES
from gpu_env.observation import APP_CURVES, APP_FEATURES, GLOBAL_FEATURES, GPU_FEATURES, JOB_FEATURES, SLOT_FEATURES

INPUTS: tuple[str, ...] = ("jobs", "gpus", "slots", "apps", "app_info", "globals")
"""Observation keys the network reads, in the order of the exported model's inputs."""

_NEG = -1e9
_CLOCK = GLOBAL_FEATURES.index("clock")
_NOW = JOB_FEATURES.index("now")


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out), nn.ReLU())


def _pool(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Masked mean and max over dimension 1: (B, N, H), (B, N) -> (B, 2H); zeros where nothing is valid."""
    w = valid.unsqueeze(-1)
    count = w.sum(dim=1)
    mean = (x * w).sum(dim=1) / count.clamp(min=1.0)
    peak = torch.where(w > 0, x, torch.full_like(x, _NEG)).amax(dim=1)
    peak = torch.where(count > 0, peak, torch.zeros_like(peak))
    return torch.cat([mean, peak], dim=-1)


class JobScorer(nn.Module):
    """Per-job logits and critic features from an observation (any numbers of jobs, GPUs, slots, apps).

    Args:
        hidden: Width of every embedding.
        value_features: Width of the critic's features.
    """

    def __init__(self, hidden: int = 64, value_features: int = 64) -> None:
        super().__init__()
        h = hidden
        self.hidden = hidden
        self.value_features = value_features
        self.n_options = len(FIT_RULES)
        self.job_embed = _mlp(len(JOB_FEATURES), h, h)
        # per slot: its features, the summed app curves, its position in the horizon and relative to the clock
        self.slot_embed = _mlp(len(SLOT_FEATURES) + len(APP_CURVES) + 2, h, h)
        self.gpu_embed = _mlp(len(GPU_FEATURES), h, h // 2)
        self.app_embed = _mlp(len(APP_FEATURES), h // 2, h // 2)
        n_context = 2 * h + h + h + len(GLOBAL_FEATURES)
        self.context = _mlp(n_context, h, h)
        self.job_score = _mlp(h + h + 2 * h, h, h)
        self.job_head = nn.Linear(h, self.n_options)
        self.advance_head = nn.Sequential(nn.Linear(h + 2 * h, h), nn.ReLU(), nn.Linear(h, 1))
        self.value_head = _mlp(h + 2 * h, h, value_features)
        for head in (self.job_head, self.advance_head[-1]):
            nn.init.orthogonal_(head.weight, gain=0.01)
            nn.init.zeros_(head.bias)

    def forward(
        self,
        jobs: torch.Tensor,
        gpus: torch.Tensor,
        slots: torch.Tensor,
        apps: torch.Tensor,
        app_info: torch.Tensor,
        globals_: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, J * len(FIT_RULES) + 1), ADVANCE last, and critic features (B, value_features)."""
        batch = jobs.shape[0]
        job_valid = jobs[:, :, 0]
        job_now = jobs[:, :, _NOW]
        slot_valid = slots[:, :, 0]
        gpu_valid = gpus[:, :, 0]
        app_valid = app_info[:, :, 0]

        h_slots = slots.shape[1]
        position = torch.arange(h_slots, dtype=slots.dtype, device=slots.device) / h_slots
        position = position.unsqueeze(0).expand(batch, h_slots)
        relative = position - globals_[:, _CLOCK : _CLOCK + 1]
        slot_in = torch.cat([slots, apps.sum(dim=1), position.unsqueeze(-1), relative.unsqueeze(-1)], dim=-1)
        slot_ctx = _pool(self.slot_embed(slot_in), slot_valid)
        gpu_ctx = _pool(self.gpu_embed(gpus), gpu_valid)
        app_ctx = _pool(self.app_embed(app_info), app_valid)
        context = self.context(torch.cat([slot_ctx, gpu_ctx, app_ctx, globals_], dim=-1))  # (B, h)

        emb = self.job_embed(jobs)  # (B, J, h)
        n_jobs = jobs.shape[1]
        summary = _pool(emb, job_valid)[:, : self.hidden]  # mean over the jobs
        now_peak = _pool(emb, job_now)[:, self.hidden :]  # max over the jobs that can start now
        shared = torch.cat([context, summary, now_peak], dim=-1)  # (B, 3h)
        x = self.job_score(torch.cat([emb, shared.unsqueeze(1).expand(batch, n_jobs, shared.shape[-1])], dim=-1))
        job_logits = self.job_head(x).reshape(batch, n_jobs * self.n_options)
        pooled = _pool(x, job_valid)
        top = torch.cat([context, pooled], dim=-1)
        logits = torch.cat([job_logits, self.advance_head(top)], dim=-1)
        return logits, self.value_head(top)


class JobScorerExtractor(BaseFeaturesExtractor):
    """SB3 features extractor around :class:`JobScorer`: features = [logits, critic features]."""

    def __init__(self, observation_space: spaces.Dict, hidden: int = 64, value_features: int = 64) -> None:
        n_jobs = observation_space["jobs"].shape[0]
        self.n_logits = n_jobs * len(FIT_RULES) + 1
        super().__init__(observation_space, features_dim=self.n_logits + value_features)
        self.net = JobScorer(hidden, value_features)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """Concatenated logits and critic features."""
        logits, value = self.net(*(observations[key] for key in INPUTS))
        return torch.cat([logits, value], dim=-1)


class _Split(nn.Module):
    """SB3's ``mlp_extractor`` slot: hands the logits to the actor and the rest to the critic."""

    def __init__(self, n_logits: int, n_value: int) -> None:
        super().__init__()
        self.n_logits = n_logits
        self.latent_dim_pi = n_logits
        self.latent_dim_vf = n_value

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return features[:, : self.n_logits]

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return features[:, self.n_logits :]


class JobScorerPolicy(MaskableActorCriticPolicy):
    """MaskablePPO policy whose action logits are the job scorer's, unmixed.

    Keyword arguments ``hidden`` and ``value_features`` size the network.
    """

    def __init__(self, *args: Any, hidden: int = 64, value_features: int = 64, **kwargs: Any) -> None:
        kwargs["features_extractor_class"] = JobScorerExtractor
        kwargs["features_extractor_kwargs"] = {"hidden": hidden, "value_features": value_features}
        kwargs.setdefault("ortho_init", False)
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        ext = self.features_extractor
        self.mlp_extractor = _Split(ext.n_logits, ext.features_dim - ext.n_logits)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


class ExportModule(nn.Module):
    """What is exported: observation arrays in, raw logits and the critic's value out (masks applied by the caller)."""

    def __init__(self, policy: JobScorerPolicy) -> None:
        super().__init__()
        self.net = policy.features_extractor.net
        self.value_net = policy.value_net

    def forward(
        self,
        jobs: torch.Tensor,
        gpus: torch.Tensor,
        slots: torch.Tensor,
        apps: torch.Tensor,
        app_info: torch.Tensor,
        globals_: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (B, J * len(FIT_RULES) + 1), value (B, 1))."""
        logits, features = self.net(jobs, gpus, slots, apps, app_info, globals_)
        return logits, self.value_net(features)


def policy_logits(policy: JobScorerPolicy, obs: dict[str, np.ndarray]) -> np.ndarray:
    """Raw logits of a batch of observations through the torch policy (tests, export checks)."""
    with torch.no_grad():
        tensors = {k: torch.as_tensor(np.asarray(obs[k], dtype=np.float32)) for k in INPUTS}
        return policy.features_extractor.net(*(tensors[k] for k in INPUTS))[0].numpy()
