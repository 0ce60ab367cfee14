"""One writer per cluster: an ``flock`` on a lock file in the configuration's ``slurm.state_dir``.

Two lock files, both under ``slurm.state_dir`` (default ``/var/lib/gpualloc``):

- ``writer.lock`` is held by every cycle that commits, from its snapshot to the end of
  its commit, so that no two commits interleave their holds, releases and
  reservations. A second writer waits for it (``gpualloc slurm cycle --wait``, a
  loop's cycle up to its interval) and then refuses with one line.
- ``run.lock`` is held by ``gpualloc slurm run`` for its whole life: a second loop on
  the same cluster is refused at once, with one line.

The kernel releases an ``flock`` when the last process holding its open file ends,
however it ends (SIGKILL included), so a lock is never left behind. Every Slurm tool a
holder of ``writer.lock`` runs (:mod:`agents.slurm.client`) inherits that file (:func:`held_fds`), so
a writer killed while an ``scontrol`` it started is still on its way keeps the lock until
that call ends: a second writer never reads the cluster before the first one's last
change lands. Each holder writes one line into its
file (pid, command, since when) for the refusal's message. An ``flock`` holds on
one machine (and on a shared file system that supports it, such as NFSv4): every
writer of a cluster must use the same ``state_dir`` (docs/slurm.md).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from agents.slurm.errors import SlurmError

WRITER = "writer.lock"
RUN = "run.lock"
POLL_SECONDS = 0.2  # how often a waiting writer tries the lock again
_HELD: set[int] = set()  # the open files of the locks held with children=True


def held_fds() -> tuple[int, ...]:
    """The files of the locks this process holds for its children: each Slurm tool it runs inherits them."""
    return tuple(sorted(_HELD))


class BusyError(SlurmError):
    """Another writer holds the lock; the message names it (one line: nothing was changed)."""


class Lock:
    """An exclusive ``flock`` on ``path``, taken within ``wait`` seconds or refused with :class:`BusyError`.

    Attributes:
        path: The lock file (its folder is made when missing).
        what: This holder, as written into the file (e.g. ``gpualloc slurm cycle``).
        wait: Seconds to wait for another holder (0: refuse at once).
        on_wait: Called once with the holder's line when the lock is taken by another (to say that it waits).
        sleep: Pause between tries.
        clock: Monotonic seconds (the wait's deadline).
        children: Whether the Slurm tools this process runs while holding it inherit it (:func:`held_fds`): the
            writer's lock, so that it lasts until the last change a dead writer started has landed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        what: str,
        *,
        wait: float = 0.0,
        on_wait: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        children: bool = False,
    ) -> None:
        self.path = Path(path)
        self.what = what
        self.wait = wait
        self.on_wait = on_wait
        self.sleep = sleep
        self.clock = clock
        self.children = children
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, waiting up to ``wait`` seconds.

        Raises:
            BusyError: Another holder kept it for the whole wait.
            SlurmError: The lock file cannot be made or opened (the message names it).
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SlurmError(
                f"{self.path}: cannot open the writer lock ({exc.strerror or exc}); set slurm.state_dir"
            ) from None
        deadline = self.clock() + self.wait
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise SlurmError(f"{self.path}: cannot lock ({exc.strerror or exc})") from None
            holder = _holder(fd)
            if self.clock() >= deadline:
                os.close(fd)
                waited = f"; waited {self.wait:g} s" if self.wait > 0 else ""
                raise BusyError(f"another writer holds {self.path} ({holder}){waited}")
            if not said and self.on_wait is not None:
                self.on_wait(holder)
                said = True
            self.sleep(min(POLL_SECONDS, max(deadline - self.clock(), 0.0)))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, {self.what}, since {_iso(time.time())}\n".encode(), 0)
        self._fd = fd
        if self.children:
            _HELD.add(fd)

    def release(self) -> None:
        """Let the lock go (the file stays; its line is cleared)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        _HELD.discard(fd)
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _holder(fd: int) -> str:
    """The holder's line, or a stand-in while it has not written it yet."""
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "a writer that has not said who it is yet"


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
