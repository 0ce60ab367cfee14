"""Compiled loops for the numpy engine's hottest parts (numba, optional).

Each kernel is a plain loop over the episodes (or placed rows) it is given,
with the same integer arithmetic and the same float64 expressions, in the same
order, as the array code it replaces (:mod:`gpu_env.batch.fit`,
:mod:`gpu_env.batch.realtime`, the engine's placement, search and free runs,
the ``jobs``, ``gpus`` and ``slots`` observations of :mod:`gpu_env.batch.observe`),
so results are identical; the differential test runs with and without them.

The engine uses them when numba is installed and the environment variable
``GPUALLOC_NUMBA`` is not ``0`` (:data:`ENABLED`); otherwise (the allocator's
default install) it runs its array code. Numba itself is imported on the first
use of a kernel (the kernels live in ``gpu_env/batch/_kernels.py``), not when the
engine is imported, and the compiled kernels are cached on disk (``cache=True``):
only the first process compiles them (costs measured in ``docs/environment.md``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

ENABLED: bool = os.environ.get("GPUALLOC_NUMBA", "1") != "0" and importlib.util.find_spec("numba") is not None
"""Whether the engine calls the kernels (tests may switch it)."""

KERNELS = (
    "place_into",
    "mark_into",
    "narrow_into",
    "free_runs_into",
    "job_options_into",
    "search_into",
    "jobs_into",
    "gpus_into",
    "slots_into",
)


def __getattr__(name: str) -> Any:
    """The kernel ``name``, importing (and, the first time on a machine, compiling) it on first use."""
    if name in KERNELS:
        kernel = getattr(importlib.import_module("gpu_env.batch._kernels"), name)
        globals()[name] = kernel  # later lookups skip this function
        return kernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
