"""Observations of every episode of a :class:`~gpu_env.batch.engine.BatchEngine`, as :class:`Encoder` gives them.

:func:`observe` returns the keys of :func:`gpu_env.observation.shapes` with a
batch axis first; entry i equals ``Encoder(episode_i, limits, scale).observe()``
for the engine's sizes as limits (:meth:`~gpu_env.batch.state.Sizes.limits`)
and each episode's reward scale. Every column is computed from the state in
float64 and cast to float32, as the encoder does; the encoder's incremental
bookkeeping is not needed because each call recomputes the moving columns for
the whole batch at once.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpu_env.batch import bits, fit, kernels
from gpu_env.batch.engine import BatchEngine
from gpu_env.observation import APP_CURVES, GLOBAL_FEATURES, GPU_FEATURES, JOB_FEATURES, SLOT_FEATURES

KEYS: tuple[str, ...] = ("jobs", "grid", "gpus", "slots", "apps", "app_info", "globals", "action_mask")


def observe(engine: BatchEngine, keys: Iterable[str] = KEYS) -> dict[str, np.ndarray]:
    """The observations of all B episodes (fresh arrays).

    Args:
        engine: The engine.
        keys: The keys to compute (a policy needs only its inputs; ``grid`` is the largest).

    Returns:
        Key -> (B, ...) array: float32, the action mask int8.
    """
    keys = tuple(keys)
    unknown = set(keys) - set(KEYS)
    if unknown:
        raise ValueError(f"observe: unknown keys {sorted(unknown)} (expected some of {', '.join(KEYS)})")
    s = engine.state
    out: dict[str, np.ndarray] = {}
    if "jobs" in keys:
        out["jobs"] = _jobs(engine)
    if "grid" in keys:
        out["grid"] = s.grid.copy()
    if "gpus" in keys:
        out["gpus"] = _gpus(engine)
    if "slots" in keys:
        out["slots"] = _slots(engine)
    if "apps" in keys:
        out["apps"] = _apps(engine)
    if "app_info" in keys:
        out["app_info"] = s.app_table.astype(np.float32)
    if "globals" in keys:
        out["globals"] = _globals(engine)
    if "action_mask" in keys:
        out["action_mask"] = engine.action_masks().view(np.int8)
    return out


def _jobs(engine: BatchEngine) -> np.ndarray:
    s = engine.state
    B, R = s.valid.shape
    T = s.slots[:, None]
    clock = s.clock[:, None]
    e = s.earliest
    pending = e >= 0
    now = engine.now()
    scale = s.reward_scale[:, None]
    jobs = np.zeros((B, R, len(JOB_FEATURES)), dtype=np.float32)  # float64 values, cast on assignment
    if kernels.ENABLED:
        kernels.jobs_into(
            jobs, s.valid, s.placed, s.earliest, s.done, s.clock, s.slots, s.row_table, s.values,
            s.reward_scale, engine.sizes.slots,
        )  # fmt: skip
        b, r = np.nonzero(now)
        if b.size:
            kernels.job_options_into(
                b, r, jobs, s.gpus, s.node, s.slots, s.clock, s.load, s.curves, s.k, s.d, s.at, s.wide,
                s.per_area, s.per_block, s.cheapest, s.reward_scale, engine.sizes.gpus,
            )  # fmt: skip
        return jobs
    jobs[..., 0] = s.valid
    jobs[..., 1] = pending
    jobs[..., 2] = s.placed
    jobs[..., 3] = now
    jobs[..., 4:11] = s.row_table
    jobs[..., 8:10] = s.row_table[..., 4:6] - (clock / T)[..., None]
    jobs[..., 11] = np.where(pending, (e - clock) / T, 1.0)
    episode, row = np.arange(B)[:, None], np.arange(R)[None, :]
    jobs[..., 12] = s.values[episode, row, np.minimum(clock, T)] / scale * now
    jobs[..., 13] = s.values[episode, row, np.where(pending, e, engine.sizes.slots)] / scale
    jobs[~s.valid] = 0.0
    b, r = np.nonzero(now)
    if b.size:
        # Real-time GPU-slots a start at the clock takes: k beyond the slack in each slot of its span.
        slack = s.gpus[:, None] - s.load - s.curves.sum(axis=1)  # (B, T)
        k, d, t0 = s.k[b, r], s.d[b, r], s.clock[b]
        take = np.zeros(b.size, dtype=np.int64)
        T = engine.sizes.slots
        flat = slack.reshape(-1)
        end = np.minimum(t0 + d, s.slots[b])
        for j in range(int((end - t0).max(initial=0))):
            t = t0 + j
            over = k - flat[b * T + np.minimum(t, T - 1)]
            take += np.where((t < end) & (over > 0), over, 0)
        at = s.at[b, r]
        table = fit.choices(at, s.wide[b, r], engine._node_sets[0][b], engine._node_sets[1][b], int(s.node[b].max()))
        gpu_scale = 1.0 / s.gpus[b]
        waste_scale = 1.0 / s.node[b]
        cut = s.cheapest[b] / s.reward_scale[b]
        columns = [take * s.per_area[b, r], take * cut, bits.count(at) * s.per_block[b, r]]
        for i in range(3):
            columns += [table[:, 2 * i] * gpu_scale, table[:, 2 * i + 1] * waste_scale]
        jobs[b, r, 14:] = np.stack(columns, axis=1)
    return jobs


def _gpus(engine: BatchEngine) -> np.ndarray:
    s = engine.state
    H = engine.sizes.slots
    g = np.arange(engine.sizes.gpus)
    inside = g < s.gpus[:, None]
    out = np.zeros((engine.batch, engine.sizes.gpus, len(GPU_FEATURES)), dtype=np.float32)
    if kernels.ENABLED:
        kernels.gpus_into(out, s.gpus, s.node, s.free_now, H)
        return out
    out[..., 0] = inside
    node = s.node[:, None]
    out[..., 1] = np.where(inside, (g % node) / node, 0.0)
    out[..., 2] = np.where(inside, np.minimum(s.free_now, H) * (1.0 / H), 0.0)
    return out


def _slots(engine: BatchEngine) -> np.ndarray:
    s = engine.state
    T = engine.sizes.slots
    G = s.gpus[:, None]
    t = np.arange(T)
    inside = t < s.slots[:, None]
    out = np.zeros((engine.batch, T, len(SLOT_FEATURES)), dtype=np.float32)
    if kernels.ENABLED:
        kernels.slots_into(
            out, s.gpus, s.slots, s.clock, s.load, s.curves, s.demand, s.floor_total, s.decay_weights,
            engine.trade_realtime,
        )  # fmt: skip
        return out
    total = s.curves.sum(axis=1)
    out[..., 0] = inside
    out[..., 1] = t < s.clock[:, None]
    out[..., 2] = s.load / G
    out[..., 3] = total / G
    out[..., 4] = s.demand.sum(axis=1) / G
    out[..., 5] = np.maximum(0, s.demand - s.curves).sum(axis=1) / G
    out[..., 6] = (G - s.load - total) / G
    used = s.floor_total if engine.trade_realtime else total
    out[..., 7] = (G - used - s.load) / G
    out[..., 8] = s.decay_weights
    out[~inside] = 0.0
    return out


def _apps(engine: BatchEngine) -> np.ndarray:
    s = engine.state
    G = s.gpus[:, None, None]
    out = np.zeros((*s.curves.shape, len(APP_CURVES)), dtype=np.float32)
    out[..., 0] = s.demand / G
    out[..., 1] = s.curves / G
    out[..., 2] = s.floors / G
    return out


def _globals(engine: BatchEngine) -> np.ndarray:
    s = engine.state
    sizes = engine.sizes
    T, H = s.slots, sizes.slots
    out = np.zeros((engine.batch, len(GLOBAL_FEATURES)), dtype=np.float64)
    out[:, 0] = s.clock / T
    out[:, 1] = (T - s.clock) / H
    out[:, 2] = T / H
    out[:, 3] = s.gpus / sizes.gpus
    out[:, 4] = s.node / s.gpus
    out[:, 5] = (s.earliest >= 0).sum(axis=1) / sizes.jobs
    out[:, 6] = s.objective / s.reward_scale
    out[:, 7] = s.decay
    out[:, 8] = float(engine.trade_realtime)
    return out.astype(np.float32)
