"""The batched engine's one compiled implementation: numba kernels over a :class:`~gpu_env.batch.state.BatchState`.

Each kernel takes the whole state (a named tuple of arrays) and loops over the
episodes, with the same integer arithmetic and the same float64 expressions, in
the same order, as the reference :class:`gpu_env.episode.Episode` and its
:class:`~gpu_env.observation.Encoder`: :func:`step_into` is ``Episode.apply`` of
every episode (placement, real-time curves, narrowing, search, clock),
:func:`masks_into` the action masks, and :func:`observe_into` the observation
keys of ``jobs``, ``gpus``, ``slots``, ``apps``, ``globals`` and ``action_mask`` in
one call (each call costs some microseconds to unpack the state's arrays).

The kernels allocate nothing (the engine passes their work space, :func:`work_sizes`)
and are compiled without numba's reference counting (``_nrt=False``): with it, every
state array a helper reads cost two atomic operations per call, and the step took
0.86 ms instead of 0.51 ms at B = 256 (measured in one process, both builds
interleaved). The per-episode helpers are inlined into the kernels
(``inline="always"``).

Numba is imported on the first use of a kernel (the kernels live in
``gpu_env/batch/_kernels.py``), not when the engine is imported, and the
compiled kernels are cached on disk (``cache=True``): only the first process on
a machine compiles them (costs in ``docs/environment.md``). With
``GPUALLOC_NUMBA=0`` in the environment they run as plain Python (slow; for
debugging), and :func:`plain` gives that plain-Python copy in any process (the
differential tests run both).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

KERNELS = ("step_into", "masks_into", "observe_into")


def work_sizes(jobs: int, slots: int, words: int) -> tuple[int, int]:
    """The int64 and uint64 work space ``step_into`` needs for R jobs, T slots and NW words (it allocates none)."""
    return 6 + 5 * slots + 2 * jobs, 3 * words


OBSERVE_BITS: dict[str, int] = {"jobs": 1, "gpus": 2, "slots": 4, "apps": 8, "globals": 16, "action_mask": 32}
"""The observation keys :func:`observe_into` fills, as bits of its ``which`` argument."""

_plain: ModuleType | None = None


def plain() -> ModuleType:
    """The kernels as plain Python functions (a second copy of ``_kernels.py``, compiled by nothing)."""
    global _plain
    if _plain is None:
        path = Path(__file__).with_name("_kernels.py")
        spec = importlib.util.spec_from_file_location("gpu_env.batch._kernels_plain", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        module.PLAIN = True  # type: ignore[attr-defined]  # read by _kernels.py: the stand-in decorator
        spec.loader.exec_module(module)
        _plain = module
    return _plain


def __getattr__(name: str) -> Any:
    """The kernel ``name``, importing (and, the first time on a machine, compiling) it on first use."""
    if name in KERNELS:
        kernel = getattr(importlib.import_module("gpu_env.batch._kernels"), name)
        globals()[name] = kernel  # later lookups skip this function
        return kernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
