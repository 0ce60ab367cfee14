"""What the learned scorer sees: one row per job and a coarse view of the cluster, computed once per plan.

The list-scheduling planner (:mod:`gpu_env.listsched`) scores the whole queue
in one network call, so its input is static: the jobs as the scenario states
them, set against the cluster's capacity over time. Nothing here has one row
per GPU or per slot: the cost grows with the jobs, not the cluster, and every
feature is a ratio (to G, T, the largest weight, the largest value...) so that
one set of weights serves 8 GPUs and 1,024.

:data:`JOB_FEATURES` names the columns of :func:`job_features`;
:data:`CLUSTER_FEATURES` those of :func:`cluster_features`. A policy's card
records both lists, and the planner refuses a policy trained on others.

>>> from gpu_env.generators import generate
>>> from gpu_env.listsched import ListInstance
>>> sc = generate("mixed-control", seed=0)
>>> job_features(sc, ListInstance.build(sc)).shape == (len(sc.jobs), len(JOB_FEATURES))
True
"""

from __future__ import annotations

import numpy as np

from gpu_env.listsched import ListInstance
from gpu_env.scenario import JobType, Scenario

JOB_FEATURES: tuple[str, ...] = (
    "gpus_per_node",  # k / node size
    "gpus_log",  # log2(k) / log2(G + 1)
    "gpus_share",  # k / G
    "duration",  # d / T
    "weight",  # w / largest w
    "weight_rank",  # rank of w among the pending jobs, 0 (largest) .. 1
    "release",  # release / T
    "window",  # allowed starts / T
    "has_deadline",
    "value",  # value at the window's first start / largest such value
    "value_rank",  # rank of that value, 0 (largest) .. 1
    "density",  # that value per GPU-slot / largest density
    "density_rank",
    "area",  # k * d / (G * T)
    "truncated",  # share of the job's slots past the horizon when it starts at its release
    "room",  # mean free capacity (G - inherited - demand-following real-time) over [release, release + d), / G
    "room_min",  # least such capacity over that span, / G
    "fits_at_release",  # whether k <= room_min * G
    "training",
    "batch_inference",
    "quantization",
    "multi_node",  # k > node size
)

CLUSTER_FEATURES: tuple[str, ...] = (
    "gpus_log",  # log2(G) / 10
    "jobs_per_gpu",  # pending jobs / G
    "load",  # pending area / free GPU-slots (G * T less inherited and real-time)
    "realtime_share",  # demand-following real-time GPU-slots / (G * T)
    "inherited_share",  # inherited GPU-slots in the horizon / (G * T)
    "penalty",  # mean app penalty / largest job weight (0 without apps)
    "apps",  # number of apps / 4
    "node_share",  # node size / G
    "decay",  # per-slot decay
    "deadline_share",  # share of pending jobs with a deadline
)


def _rank(x: np.ndarray) -> np.ndarray:
    """0 for the largest value, 1 for the smallest (ties share the rank of their first), length-normalised."""
    n = x.size
    if n <= 1:
        return np.zeros(n, dtype=np.float64)
    order = np.argsort(-x, kind="stable")
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.arange(n, dtype=np.float64)
    return ranks / (n - 1)


def job_features(scenario: Scenario, inst: ListInstance) -> np.ndarray:
    """(n, len(JOB_FEATURES)) float32: one row per job of the scenario, in file order (inherited rows zero)."""
    sc = scenario
    G, T, ns = sc.gpus, sc.slots, sc.node_size
    n = len(sc.jobs)
    out = np.zeros((n, len(JOB_FEATURES)), dtype=np.float64)
    if n == 0:
        return out.astype(np.float32)
    pend = inst.pending
    k = inst.k.astype(np.float64)
    d = inst.d.astype(np.float64)
    w = np.array([job.weight for job in sc.jobs], dtype=np.float64)
    release = np.array([job.release for job in sc.jobs], dtype=np.float64)
    value = inst.first_value
    area = k * d
    density = np.where(area > 0, value / np.maximum(area, 1.0), 0.0)
    room = G - inst.load - inst.curves.sum(axis=0)  # (T,)
    csum = np.concatenate(([0.0], np.cumsum(room, dtype=np.float64)))
    lo = np.minimum(inst.lo, T - 1)
    end = np.minimum(lo + inst.d, T)
    span = np.maximum(end - lo, 1)
    mean_room = (csum[end] - csum[lo]) / span
    # Least room over each span: the minimum over the window [lo, end) of a (T, T) table of running minima.
    table = np.minimum.accumulate(np.triu(np.broadcast_to(room, (T, T))) + np.tril(np.full((T, T), G), -1), axis=1)
    min_room = np.where(end > lo, table[lo, np.maximum(end - 1, lo)], 0).astype(np.float64)
    types = [job.type for job in sc.jobs]

    def col(name: str) -> int:
        return JOB_FEATURES.index(name)

    def share(x: np.ndarray) -> np.ndarray:
        top = x[pend].max(initial=0.0)
        return x / top if top > 0 else np.zeros_like(x)

    idx = np.flatnonzero(pend)
    ranks = {name: np.zeros(n) for name in ("w", "v", "dens")}
    for name, x in (("w", w), ("v", value), ("dens", density)):
        ranks[name][idx] = _rank(x[idx])
    out[:, col("gpus_per_node")] = k / ns
    out[:, col("gpus_log")] = np.log2(k) / np.log2(G + 1)
    out[:, col("gpus_share")] = k / G
    out[:, col("duration")] = d / T
    out[:, col("weight")] = share(w)
    out[:, col("weight_rank")] = ranks["w"]
    out[:, col("release")] = release / T
    out[:, col("window")] = (inst.hi - inst.lo) / T
    out[:, col("has_deadline")] = [job.deadline is not None for job in sc.jobs]
    out[:, col("value")] = share(value)
    out[:, col("value_rank")] = ranks["v"]
    out[:, col("density")] = share(density)
    out[:, col("density_rank")] = ranks["dens"]
    out[:, col("area")] = area / (G * T)
    out[:, col("truncated")] = np.maximum(0.0, release + d - T) / d
    out[:, col("room")] = mean_room / G
    out[:, col("room_min")] = min_room / G
    out[:, col("fits_at_release")] = k <= min_room
    out[:, col("training")] = [t == JobType.TRAINING for t in types]
    out[:, col("batch_inference")] = [t == JobType.BATCH_INFERENCE for t in types]
    out[:, col("quantization")] = [t == JobType.QUANTIZATION for t in types]
    out[:, col("multi_node")] = k > ns
    out[~pend] = 0.0
    return out.astype(np.float32)


def cluster_features(scenario: Scenario, inst: ListInstance) -> np.ndarray:
    """(len(CLUSTER_FEATURES),) float32: the cluster as a whole."""
    sc = scenario
    G, T = sc.gpus, sc.slots
    pend = inst.pending
    area = float((inst.k * inst.d)[pend].sum())
    rt = float(inst.curves.sum())
    held = float(inst.load.sum())
    free = max(G * T - rt - held, 1.0)
    w_max = max((job.weight for job in sc.jobs), default=1.0) or 1.0
    penalty = float(np.mean([app.penalty for app in sc.apps])) / w_max if sc.apps else 0.0
    n_pend = int(pend.sum())
    values = {
        "gpus_log": np.log2(G) / 10.0,
        "jobs_per_gpu": n_pend / G,
        "load": area / free,
        "realtime_share": rt / (G * T),
        "inherited_share": held / (G * T),
        "penalty": penalty,
        "apps": len(sc.apps) / 4.0,
        "node_share": sc.node_size / G,
        "decay": float(sc.decay),
        "deadline_share": sum(job.deadline is not None for job in sc.jobs if job.running_on is None) / max(n_pend, 1),
    }
    return np.array([values[name] for name in CLUSTER_FEATURES], dtype=np.float32)
