"""The queue scorer (torch; training and export only): one forward pass scores every job of a plan.

A deep-sets network over the jobs of :func:`gpu_env.queue_features.job_features`
and the cluster of :func:`~gpu_env.queue_features.cluster_features`:

1. every job row, with the cluster vector, goes through one shared MLP (the job embedding),
   then ``attention`` masked self-attention blocks let each job see the others;
2. the mean and the max of the embeddings over the pending jobs, with the
   cluster vector, make the context;
3. a second shared MLP sees each embedding with the context and gives the
   job's score; the context alone gives the mode logit (whether trades wait
   until every job had its turn, :data:`gpu_env.listsched.MODE_AFTER`).

No weight depends on the number of jobs, so one file plans 8 GPUs and 1,024.
A job order is a Plackett-Luce draw from the scores (:func:`order_log_prob`);
the planner takes the argmax order and Gumbel-perturbed ones (``docs/learned-mode.md``).
"""

from __future__ import annotations

import torch
from torch import nn

from gpu_env.queue_features import CLUSTER_FEATURES, JOB_FEATURES


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class JobAttention(nn.Module):
    """One pre-norm self-attention block over the pending jobs (masked), with a residual and an MLP.

    Written out (no ``nn.MultiheadAttention``) so that the ONNX graph is plain matrix products.
    """

    def __init__(self, hidden: int, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = _mlp([hidden, 2 * hidden, hidden])

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, n, H) embeddings after attending over the jobs where ``mask`` (B, n) is 1."""
        B, n, H = h.shape
        q, k, v = self.qkv(self.norm(h)).chunk(3, dim=-1)
        d = H // self.heads

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(B, n, self.heads, d).transpose(1, 2)  # (B, heads, n, d)

        att = split(q) @ split(k).transpose(-1, -2) / d**0.5  # (B, heads, n, n)
        att = att + ((mask - 1.0) * 1e4).reshape(B, 1, 1, n)
        mixed = (torch.softmax(att, dim=-1) @ split(v)).transpose(1, 2).reshape(B, n, H)
        h = h + self.out(mixed)
        return h + self.mlp(self.norm2(h))


class QueueScorer(nn.Module):
    """Scores of every job and the mode logit, from one pass over the queue.

    Args:
        hidden: Width of the embeddings.
        attention: Self-attention blocks over the jobs after the embedding (0: deep sets only).
    """

    def __init__(self, hidden: int = 96, attention: int = 0) -> None:
        super().__init__()
        f, c = len(JOB_FEATURES), len(CLUSTER_FEATURES)
        self.hidden = hidden
        self.attention = attention
        self.embed = _mlp([f + c, hidden, hidden])
        self.blocks = nn.ModuleList(JobAttention(hidden) for _ in range(attention))
        self.context = _mlp([2 * hidden + c, hidden, hidden])
        self.head = _mlp([2 * hidden, hidden, 1])
        self.mode = _mlp([hidden, hidden // 2, 1])

    def forward(
        self, jobs: torch.Tensor, mask: torch.Tensor, cluster: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and mode logit.

        Args:
            jobs: (B, n, F) job features.
            mask: (B, n) 1.0 for the jobs to place, 0.0 for inherited and padding rows.
            cluster: (B, C) cluster features.

        Returns:
            scores (B, n) (-1e9 where ``mask`` is 0) and the mode logit (B,).
        """
        B, n, _ = jobs.shape
        c = cluster.unsqueeze(1).expand(B, n, cluster.shape[-1])
        h = torch.relu(self.embed(torch.cat([jobs, c], dim=-1)))  # (B, n, H)
        for block in self.blocks:
            h = block(h, mask)
        m = mask.unsqueeze(-1)
        count = m.sum(dim=1).clamp(min=1.0)
        mean = (h * m).sum(dim=1) / count
        top = (h * m - (1.0 - m) * 1e4).max(dim=1).values * (count > 0).float()
        ctx = torch.relu(self.context(torch.cat([mean, top, cluster], dim=-1)))  # (B, H)
        both = torch.cat([h, ctx.unsqueeze(1).expand(B, n, self.hidden)], dim=-1)
        scores = self.head(both).squeeze(-1)
        scores = torch.where(mask > 0, scores, torch.full_like(scores, -1e9))
        return scores, self.mode(ctx).squeeze(-1)


def order_log_prob(scores: torch.Tensor, orders: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Plackett-Luce log-probability of job orders under scores (ListMLE's likelihood).

    ``log P(o) = sum_i [s(o_i) - logsumexp_{j >= i} s(o_j)]`` over the first ``lengths`` positions,
    the jobs not in the order (padding, inherited) excluded.

    Args:
        scores: (B, n) scores.
        orders: (B, L) job indices into n, each row a permutation of its pending jobs then padding (any index).
        lengths: (B,) pending jobs per row.

    Returns:
        (B,) log-probabilities.
    """
    L = orders.shape[1]
    s = torch.gather(scores, 1, orders.clamp(min=0))  # (B, L)
    valid = torch.arange(L, device=scores.device).unsqueeze(0) < lengths.unsqueeze(1)
    s = torch.where(valid, s, torch.full_like(s, -1e9))
    # logsumexp over the suffix j >= i: a reversed cumulative logsumexp.
    suffix = torch.logcumsumexp(s.flip(1), dim=1).flip(1)
    terms = torch.where(valid, s - suffix, torch.zeros_like(s))
    return terms.sum(dim=1)
