"""Observations of every episode of a :class:`~gpu_env.batch.engine.BatchEngine`, as :class:`Encoder` gives them.

:func:`observe` returns the keys of :func:`gpu_env.observation.shapes` with a
batch axis first; entry i equals ``Encoder(episode_i, limits, scale).observe()``
for the engine's sizes as limits (:meth:`~gpu_env.batch.state.Sizes.limits`)
and each episode's reward scale. Every column is computed from the state in
float64 and cast to float32, as the encoder does, by the compiled kernels of
:mod:`gpu_env.batch.kernels`; each call recomputes the whole batch at once.
:func:`buffers` and ``observe(..., out=...)`` fill the same arrays in place
call after call (the vector env's observations).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpu_env import observation
from gpu_env.batch import kernels
from gpu_env.batch.engine import BatchEngine
from gpu_env.episode import FIT_RULES

KEYS: tuple[str, ...] = ("jobs", "grid", "gpus", "slots", "apps", "app_info", "globals", "action_mask")


_COMPILED = ("jobs", "gpus", "slots", "apps", "globals", "action_mask")  # observe_into's arrays, in its order
_EMPTY = {
    key: np.zeros((0,) * ndim, dtype=np.int8 if key == "action_mask" else np.float32)
    for key, ndim in zip(_COMPILED, (3, 3, 3, 4, 2, 2), strict=True)
}  # stand-ins for the keys not asked for


def buffers(engine: BatchEngine, keys: Iterable[str] = KEYS) -> dict[str, np.ndarray]:
    """Arrays for ``observe(engine, keys, out=...)``: key -> (B, ...) float32 (the action mask int8), uninitialised."""
    shapes = observation.shapes(engine.sizes.limits(), engine.n_actions)
    return {
        key: np.empty((engine.batch, *shapes[key]), dtype=np.int8 if key == "action_mask" else np.float32)
        for key in _checked(keys)
    }


def observe(
    engine: BatchEngine, keys: Iterable[str] = KEYS, out: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """The observations of all B episodes.

    Args:
        engine: The engine.
        keys: The keys to compute (a policy needs only its inputs; ``grid`` is the largest).
        out: Arrays to fill in place (:func:`buffers`; the keys computed are then ``out``'s), or None for
            fresh arrays.

    Returns:
        Key -> (B, ...) array: float32, the action mask int8 (``out`` itself when given).
    """
    if out is None:
        out = buffers(engine, keys)
    else:
        _check_buffers(engine, out)
    s = engine.state
    sizes = engine.sizes
    which = 0
    for key, array in out.items():
        if key == "grid":
            if not np.may_share_memory(array, s.grid):  # the vector env's grid is the engine's own
                np.copyto(array, s.grid)
        elif key == "app_info":
            np.copyto(array, s.app_table)
        else:
            which |= kernels.OBSERVE_BITS[key]
    if which:
        kernels.observe_into(
            s,
            which,
            *(out.get(key, _EMPTY[key]) for key in _COMPILED),
            sizes.slots,
            sizes.gpus,
            sizes.jobs,
            engine.trade_realtime,
            len(FIT_RULES),
            np.zeros(6, dtype=np.int64),
        )
    return out


def _check_buffers(engine: BatchEngine, out: dict[str, np.ndarray]) -> None:
    """Raise ValueError unless every array of ``out`` has its key's shape and dtype (the kernels do not check)."""
    shapes = observation.shapes(engine.sizes.limits(), engine.n_actions)
    for key in _checked(out):
        array = out[key]
        shape, dtype = (engine.batch, *shapes[key]), np.int8 if key == "action_mask" else np.float32
        if array.shape != shape or array.dtype != dtype:
            raise ValueError(f"observe: out[{key!r}] is {array.dtype}{array.shape}, expected {np.dtype(dtype)}{shape}")


def _checked(keys: Iterable[str]) -> tuple[str, ...]:
    keys = tuple(keys)
    unknown = set(keys) - set(KEYS)
    if unknown:
        raise ValueError(f"observe: unknown keys {sorted(unknown)} (expected some of {', '.join(KEYS)})")
    return keys
