"""Where fan-out tasks run: the backends (serially, a local process pool, Ray), the checks on them and their errors.

:mod:`agents.fanout` runs tasks on a :class:`Backend` and gives these names as its own (``agents.fanout.Backend``);
the command-line arguments that choose one (:func:`agents.arguments.add_fanout_options`,
:func:`agents.arguments.fanout_backend`) build it here, below both.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Literal

RAY_INSTALL_HINT = 'pip install -e ".[ray]"'
LOCAL_RAY = "local"  # Backend.address for a Ray started here

BackendKind = Literal["serial", "pool", "ray"]


class FanoutError(ValueError):
    """Settings that cannot run: reported as one line, exit status 2 at the command line."""


class OversubscribedError(FanoutError):
    """More CPU threads asked for than the machine or the cluster has."""


class RayNotInstalledError(FanoutError):
    """``--ray`` without Ray installed."""


@dataclass(frozen=True)
class Backend:
    """Where tasks run.

    Attributes:
        kind: ``serial``, ``pool`` or ``ray``.
        parallel: Processes of the pool (1 for the others).
        address: For Ray: :data:`LOCAL_RAY` to start a local Ray, else a cluster address
            (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``).
    """

    kind: BackendKind = "serial"
    parallel: int = 1
    address: str | None = None

    @classmethod
    def serial(cls) -> Backend:
        """One task after another in this process."""
        return cls()

    @classmethod
    def pool(cls, parallel: int) -> Backend:
        """A local process pool of ``parallel`` processes (serial when ``parallel`` is 1)."""
        if parallel < 1:
            raise FanoutError(f"--parallel: expected an integer >= 1, got {parallel}")
        return cls("pool", parallel) if parallel > 1 else cls()

    @classmethod
    def ray(cls, address: str | None = None) -> Backend:
        """Ray: a local instance (``address`` None or :data:`LOCAL_RAY`) or a running cluster.

        Raises:
            RayNotInstalledError: Ray is not installed here.
        """
        require_ray()
        return cls("ray", 1, address or LOCAL_RAY)

    def describe(self, workers: int = 1) -> str:
        """What ran the tasks, for reports: ``serial``, ``process pool, 2 processes x 1 CP-SAT worker``, ..."""
        each = f"{workers} CP-SAT worker{'s' if workers != 1 else ''}"
        if self.kind == "pool":
            return f"process pool, {self.parallel} processes x {each}"
        if self.kind == "ray":
            where = "local Ray" if self.address == LOCAL_RAY else f"Ray cluster at {self.address}"
            return f"{where}, num_cpus={workers} per task"
        return f"serial, {each}"


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def check_cpu_budget(parallel: int, workers: int, cpus: int | None = None) -> None:
    """Refuse a pool whose tasks would together ask for more CPUs than there are.

    ``parallel`` tasks run at once, each with ``workers`` CP-SAT threads, so
    ``parallel * workers <= cpus``. One process (``parallel`` 1) is not checked:
    its ``workers`` are the solver's own business.

    Raises:
        OversubscribedError: ``parallel * workers > cpus``.
    """
    cpus = available_cpus() if cpus is None else cpus
    if parallel > 1 and parallel * workers > cpus:
        raise OversubscribedError(
            f"--parallel {parallel} x --workers {workers} = {parallel * workers} CPU threads, "
            f"but this machine has {cpus} CPUs: lower --parallel or --workers so that their product is <= {cpus}"
        )


def require_ray() -> None:
    """Check that Ray can be imported, without importing it.

    Raises:
        RayNotInstalledError: Ray is not installed.
    """
    if importlib.util.find_spec("ray") is None:
        raise RayNotInstalledError(f"--ray needs Ray, which is not installed here: {RAY_INSTALL_HINT}")
