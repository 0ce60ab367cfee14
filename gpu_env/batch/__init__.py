"""Many planning episodes in arrays, advanced together: the batched form of :mod:`gpu_env.episode`.

:class:`~gpu_env.batch.engine.BatchEngine` steps B episodes (of one scenario or
of several, padded to common sizes) with one call, with the reference
:class:`~gpu_env.episode.Episode`'s exact masks, rewards and plans;
:mod:`gpu_env.batch.batch_observation` gives :class:`~gpu_env.observation.Encoder`'s
observations for all of them. See ``docs/environment.md`` for the design.
:func:`warm_up` compiles the engine's kernels into numba's disk cache (``gpualloc warm-up`` runs it).
"""

from gpu_env.batch.engine import BatchEngine, sizes_for
from gpu_env.batch.kernels import CompileStats, compile_stats
from gpu_env.batch.state import BatchState, Sizes, Start

__all__ = ["BatchEngine", "BatchState", "CompileStats", "Sizes", "Start", "compile_stats", "sizes_for", "warm_up"]


def warm_up() -> CompileStats:
    """Pay the engine's one-time compile before anything is timed: no first ``make_vec`` waits for numba.

    Plays one small ``gymnasium.make_vec("GpuCluster-v0", ...)`` episode per env to its end (reset, then
    ``action_masks()`` and ``step`` with masked random actions), so that each kernel the vector env calls
    (:data:`~gpu_env.batch.kernels.KERNELS`: ``observe_into``, ``masks_into``, ``step_into``) runs once with
    the argument types it is always called with (fixed by the state's dtypes, not by the scenario or the
    options; ``tests/test_engine_warm_up.py`` checks that another process, scenario and option set compile
    nothing). numba compiles them on a machine's first use and writes them to its disk cache; later
    processes, this one's included, load them from there. With numba off (``GPUALLOC_NUMBA=0``) it runs
    nothing.

    Returns:
        The kernels' :class:`~gpu_env.batch.kernels.CompileStats` in this process.
    """
    if not compile_stats().compiled:
        return compile_stats()
    import gymnasium
    import numpy as np

    from gpu_env.generators import generate

    # mixed-control has real-time apps and trades: the placement, curve and narrowing paths all run.
    scenario = generate("mixed-control", seed=0)
    venv = gymnasium.make_vec("GpuCluster-v0", num_envs=2, vectorization_mode="vector_entry_point", scenario=scenario)
    try:
        rng = np.random.default_rng(0)
        venv.reset(seed=0)
        ended = np.zeros(venv.num_envs, dtype=bool)
        while not ended.all():  # every episode ends within its step limit
            masks = venv.action_masks()
            actions = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)  # uniform among the allowed
            _, _, terminated, truncated, _ = venv.step(actions)
            ended |= terminated | truncated
    finally:
        venv.close()
    return compile_stats()
