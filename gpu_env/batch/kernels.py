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
differential tests run both). :func:`compile_stats` says what numba did for the kernels in this
process, and :func:`gpu_env.batch.warm_up` (run by ``gpualloc warm-up``) compiles them into the disk cache.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gpu_env.observation import OBSERVE_BITS as OBSERVE_BITS  # the bits of observe_into's ``which``

KERNELS = ("step_into", "masks_into", "observe_into")


def work_sizes(jobs: int, slots: int, words: int) -> tuple[int, int]:
    """The int64 and uint64 work space ``step_into`` needs for R jobs, T slots and NW words (it allocates none)."""
    return 6 + 5 * slots + 2 * jobs, 3 * words


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


@dataclass(frozen=True)
class CompileStats:
    """What numba did in this process for the engine's kernels (:data:`KERNELS`, the calls the engine makes).

    As :class:`gpu_env.listsched.CompileStats`, for the batched engine: numba compiles a kernel on its first
    use and writes it to its disk cache (``gpu_env/batch/__pycache__`` or ``NUMBA_CACHE_DIR``); a later process
    with the same source, numba and CPU loads it from there.

    Attributes:
        compiled: Whether numba is on (off with ``GPUALLOC_NUMBA=0``: plain Python, nothing to compile).
        cache_dir: Where the compiled kernels are cached (None with numba off).
        loaded: Kernel specialisations loaded from the disk cache in this process (numba's cache hits).
        built: Kernel specialisations compiled in this process, and written to the cache (cache misses).
    """

    compiled: bool
    cache_dir: str | None
    loaded: int
    built: int

    def describe(self) -> str:
        """One line for people: compiled, loaded from the cache, or not yet used (with the hits and misses)."""
        if not self.compiled:
            return "numba is off (GPUALLOC_NUMBA=0): the batched engine runs as plain Python, nothing to compile"
        counts = f"{self.loaded} loaded, {self.built} compiled"
        if self.built:
            return (
                f"the batched engine's kernels were compiled and cached in {self.cache_dir} ({counts}); "
                "later processes load them from there"
            )
        if self.loaded:
            return f"the batched engine's kernels were loaded from numba's cache in {self.cache_dir} ({counts})"
        return f"the batched engine's kernels have not run in this process (numba's cache: {self.cache_dir})"


def compile_stats() -> CompileStats:
    """The kernels' :class:`CompileStats` in this process (numba's dispatcher statistics; imports numba)."""
    module = importlib.import_module("gpu_env.batch._kernels")
    stats = [getattr(getattr(module, name), "stats", None) for name in KERNELS]
    if stats[0] is None:  # GPUALLOC_NUMBA=0: plain functions
        return CompileStats(False, None, 0, 0)
    return CompileStats(
        True,
        stats[0].cache_path,
        sum(sum(s.cache_hits.values()) for s in stats),
        sum(sum(s.cache_misses.values()) for s in stats),
    )


def __getattr__(name: str) -> Any:
    """The kernel ``name``, importing (and, the first time on a machine, compiling) it on first use."""
    if name in KERNELS:
        kernel = getattr(importlib.import_module("gpu_env.batch._kernels"), name)
        globals()[name] = kernel  # later lookups skip this function
        return kernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
