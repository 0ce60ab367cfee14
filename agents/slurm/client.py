"""Slurm's command-line tools, called with a timeout and retried: the only place that runs them.

:class:`SlurmClient` reads (``squeue --json``, ``sinfo --json``,
``scontrol -d -o show reservation``) and changes (``scontrol hold``, ``release``,
``update JobId=N NodeList=...``, ``create``/``delete``/``update reservation``).
Every call has a timeout. A call that can be repeated safely (every read, ``hold``,
``NodeList``, a reservation's new end) is tried again after a pause that doubles
when it fails; one that cannot (``release``, ``create`` and ``delete reservation``)
is tried once here, and the caller reads Slurm back before trying again
(:mod:`agents.slurm.commit`), so that a change that was made but whose answer was
lost is never reported as failed nor made twice. Every failure raises
:class:`CommandError` naming the command and Slurm's last answer, and saying
whether Slurm answered at all (``unreachable``). Every change is recorded in
:attr:`SlurmClient.changes` so that a caller can say what it did.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agents.slurm import jsonread
from agents.slurm.errors import CommandError, UnreadableError
from agents.slurm.lock import held_fds


@dataclass
class SlurmClient:
    """Runs Slurm's tools.

    Attributes:
        bin_dir: Folder of the tools ("" : PATH, then /usr/sbin).
        timeout: Seconds per call.
        retries: Tries per call.
        retry_delay: Seconds before the second try (doubled for each further one).
        env: Environment of the calls (default: this process's; ``SLURM_CONF`` picks the cluster).
        changes: Every changing command that succeeded, in order.
        failures: Every try that failed, as one line each (for the cycle's report).
    """

    bin_dir: str = ""
    timeout: float = 30.0
    retries: int = 3
    retry_delay: float = 1.0
    env: Mapping[str, str] | None = None
    changes: list[list[str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    sleep: Callable[[float], None] = time.sleep

    def _tool(self, name: str) -> str:
        if self.bin_dir:
            return os.path.join(self.bin_dir, name)
        path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin"
        return shutil.which(name, path=path) or name

    def call(self, argv: Sequence[str], *, change: bool = False, tries: int | None = None) -> str:
        """Run one command, up to ``tries`` times (default :attr:`retries`); returns its stdout.

        Raises:
            CommandError: Every try failed (exit status, timeout, or the tool is missing).
        """
        command = [self._tool(argv[0]), *argv[1:]]
        tries = self.retries if tries is None else tries
        delay = self.retry_delay
        last = ""
        unreachable = False
        for attempt in range(1, tries + 1):
            try:
                proc = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout,
                    env=dict(self.env or os.environ),
                    pass_fds=held_fds(),  # the writer's lock outlives this process while the call runs
                )
            except subprocess.TimeoutExpired:
                last, unreachable = f"no answer within {self.timeout:g} s", True
            except FileNotFoundError:
                raise CommandError(f"{argv[0]}: not installed (or slurm.bin is wrong)") from None
            else:
                if proc.returncode == 0:
                    if change:
                        self.changes.append(list(argv))
                    return proc.stdout
                last = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1]
                unreachable = unanswered(proc.stderr + proc.stdout)
            self.failures.append(f"{' '.join(argv)}: try {attempt}/{tries}: {last}")
            if attempt < tries:
                self.sleep(delay)
                delay *= 2
        times = "once" if tries == 1 else f"{tries} times"
        raise CommandError(f"{' '.join(argv)}: failed {times}: {last}", unreachable=unreachable)

    # ------------------------------------------------------------------ reading

    def _json(self, argv: Sequence[str]) -> dict:
        text = self.call(argv)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UnreadableError(f"{' '.join(argv)}: not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, dict):
            raise UnreadableError(f"{' '.join(argv)}: expected a JSON object")
        return data

    def jobs(self) -> list[jsonread.SlurmJob]:
        """Every job Slurm knows (``squeue --json``; 22.05 ignores squeue's filters with --json)."""
        return jsonread.read_jobs(self._json(["squeue", "--all", "--json"]))

    def pending_jobs(self, jobs: Sequence[str]) -> set[str]:
        """Which of ``jobs`` still pend: ``squeue --noheader --states=PENDING --jobs=...`` (text, one id a line).

        A read of a few jobs, for the wait after a release: ``squeue --json`` lists every job (22.05 ignores
        its filters), which costs a whole snapshot's read at 500 pending jobs.
        """
        if not jobs:
            return set()
        text = self.call(["squeue", "--noheader", "--states=PENDING", f"--jobs={','.join(jobs)}", "--format=%i"])
        return {line.strip() for line in text.splitlines() if line.strip()}

    def nodes(self) -> list[jsonread.SlurmNode]:
        """Every node (``sinfo --json``)."""
        return jsonread.read_nodes(self._json(["sinfo", "--all", "--json"]))

    def reservations(self) -> list[jsonread.SlurmReservation]:
        """Every reservation with its cores per node (``scontrol -d -o show reservation``)."""
        return jsonread.read_reservations(self.call(["scontrol", "-d", "-o", "show", "reservation"]))

    # ------------------------------------------------------------------ changing

    def hold(self, job: str) -> None:
        """``scontrol hold JOB``."""
        self.call(["scontrol", "hold", job], change=True)

    def release(self, job: str) -> None:
        """``scontrol release JOB``, tried once (the caller reads back before trying again)."""
        self.call(["scontrol", "release", job], change=True, tries=1)

    def set_nodes(self, job: str, nodes: Sequence[str]) -> None:
        """``scontrol update JobId=JOB NodeList=a,b``: the job may run only there, on all of them."""
        self.call(["scontrol", "update", f"JobId={job}", f"NodeList={','.join(nodes)}"], change=True)

    def create_reservation(
        self,
        name: str,
        cores: Mapping[str, int],
        minutes: int,
        users: Sequence[str],
        partition: str | None,
        *,
        overlap: bool = False,
    ) -> None:
        """A core reservation from now: ``cores[node]`` cores on each node, for ``minutes``.

        With ``overlap`` (``Flags=OVERLAP``) it may take cores that other reservations hold, never those of a
        running job: the one way to make a smaller reservation on a full node before the larger one goes.
        """
        nodes = list(cores)
        argv = [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={name}",
            "StartTime=now",
            f"Duration={max(1, minutes)}",
            f"Nodes={','.join(nodes)}",
            f"CoreCnt={','.join(str(cores[n]) for n in nodes)}",
            f"Users={','.join(users)}",
        ]
        if partition:
            argv.append(f"PartitionName={partition}")
        if overlap:
            argv.append("Flags=OVERLAP")
        self.call(argv, change=True, tries=1)

    def delete_reservation(self, name: str) -> None:
        """``scontrol delete ReservationName=NAME``, tried once (the caller reads back before trying again)."""
        self.call(["scontrol", "delete", f"ReservationName={name}"], change=True, tries=1)

    def renew_reservation(self, name: str, minutes: int) -> None:
        """A reservation ends ``minutes`` from now, in place: ``scontrol update ReservationName=NAME EndTime=...``.

        ``Flags=IGNORE_JOBS``: Slurm 22.05 refuses to move the end of a core reservation on a node
        where any job runs ("Requested nodes are busy"), even one that uses none of its cores; the
        reservation keeps its cores (docs/slurm.md, what Slurm allows).
        """
        argv = [
            "scontrol",
            "update",
            f"ReservationName={name}",
            "Flags=IGNORE_JOBS",
            f"EndTime=now+{max(1, minutes)}minutes",
        ]
        self.call(argv, change=True)


UNANSWERED = (
    "unable to contact slurm controller",
    "socket timed out",
    "zero bytes were transmitted or received",
    "connection refused",
    "communication connection failure",
    "slurm_receive_msg",
    "transport endpoint",
    "no route to host",
)
"""Slurm's words for "no answer from the controller": a command that failed so may have taken effect."""


def unanswered(text: str) -> bool:
    """Whether a failed command's output says that the controller did not answer (:data:`UNANSWERED`)."""
    low = text.lower()
    return any(words in low for words in UNANSWERED)
