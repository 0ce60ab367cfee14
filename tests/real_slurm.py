"""What the tests against a real Slurm (tests/test_slurm_*cluster*.py) share: the skip, the cluster, waits, reads.

Each such module calls :func:`skip_without_slurm` at import and takes its module-scoped ``cluster`` fixture from
:func:`cluster_fixture`: a :class:`~lab.local_slurm.LocalCluster` on 127.0.0.1, started once for the
module and stopped after it even when a test fails. Waits poll Slurm with a deadline that only guards a hang.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import pytest

from agents.slurm import jsonread
from agents.slurm.client import SlurmClient
from lab.local_slurm import ACCOUNTING_HINT, INSTALL_HINT, LocalCluster, missing_tools
from tests.conftest import HANG_GUARD_S


def skip_without_slurm(*, accounting: bool = False) -> None:
    """Skip the calling module, at its import, where Debian's Slurm (with ``accounting``: and its job accounting)
    or root is missing; under ``GPUALLOC_REQUIRE_SLURM=1`` (.ci/run installed it) that is a failure instead."""
    missing = missing_tools(accounting=accounting)
    if not missing:
        return
    if accounting:
        why = f"Slurm with accounting is not here (missing: {', '.join(missing)}); {INSTALL_HINT}; {ACCOUNTING_HINT}"
    else:
        why = f"Slurm is not here (missing: {', '.join(missing)}); {INSTALL_HINT}"
    if os.environ.get("GPUALLOC_REQUIRE_SLURM") == "1":  # .ci/run installed it: a skip there is a failure
        raise RuntimeError(why)
    pytest.skip(why, allow_module_level=True)


def cluster_fixture(folder: str, nodes: int, *, set_conf: bool = False):
    """A module-scoped fixture ``cluster``: ``nodes`` nodes of 8 fake GPUs under a temporary ``folder``.

    With ``set_conf`` the module's tests run with ``SLURM_CONF`` naming its configuration (restored after).
    """

    @pytest.fixture(scope="module", name="cluster")
    def cluster(tmp_path_factory: pytest.TempPathFactory):
        root = tmp_path_factory.mktemp(folder)
        with pytest.MonkeyPatch.context() as patch:
            with LocalCluster(root, nodes=nodes, gpus_per_node=8, timeout=HANG_GUARD_S) as local:
                if set_conf:
                    patch.setenv("SLURM_CONF", str(local.conf))
                yield local

    return cluster


def client_of(cluster: LocalCluster) -> SlurmClient:
    """The driver's client of the cluster, with the tests' hang guard and a few quick retries."""
    return SlurmClient(env=cluster.env, timeout=HANG_GUARD_S, retries=4, retry_delay=0.5)


def wait_for(condition: Callable[[], bool], what: str, every: float = 0.2) -> None:
    """Poll ``condition`` every ``every`` seconds until it holds; fail, naming ``what``, after the hang guard."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def all_jobs(cluster: LocalCluster) -> dict[str, jsonread.SlurmJob]:
    """Every job ``squeue`` lists, by id (ended ones too, while Slurm keeps them)."""
    return {j.id: j for j in jsonread.read_jobs(json.loads(cluster.run("squeue", "--all", "--json").stdout))}


def queue(cluster: LocalCluster) -> dict[str, jsonread.SlurmJob]:
    """The jobs in the queue (pending, running or starting), by id."""
    return {i: j for i, j in all_jobs(cluster).items() if j.state in ("PENDING", "RUNNING", "CONFIGURING")}
