"""Many planning episodes in arrays, advanced together: the batched form of :mod:`gpu_env.episode`.

:class:`~gpu_env.batch.engine.BatchEngine` steps B episodes (of one scenario or
of several, padded to common sizes) with one call, with the reference
:class:`~gpu_env.episode.Episode`'s exact masks, rewards and plans;
:mod:`gpu_env.batch.observe` gives :class:`~gpu_env.observation.Encoder`'s
observations for all of them. See ``docs/environment.md`` for the design.
"""

from gpu_env.batch.engine import BatchEngine, sizes_for
from gpu_env.batch.state import BatchState, Sizes, Start

__all__ = ["BatchEngine", "BatchState", "Sizes", "Start", "sizes_for"]
