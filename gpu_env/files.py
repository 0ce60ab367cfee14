"""Writing files atomically: a reader never sees half a file, and a failed write leaves the old file as it was.

Every file the project writes (scenarios, plans, reports, figures, policies
and their cards, results) goes through :func:`atomic_path` or
:func:`write_text_atomic`.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Errors of the write itself that carry no file name (a full disk, a quota, a file too large, a failed device).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})


class OutputError(OSError):
    """A file the project was asked to write could not be written: ``filename`` is the file asked for.

    Raised by :func:`atomic_path` (and so by every writer) for a failure of the write itself: the
    folder cannot be made, the temporary file cannot be created, written or renamed. Other
    ``OSError`` inside the block (reading some other file, say) propagates unchanged, so a
    command that reports ``OutputError`` in one line never hides a bug as a write failure.
    """


def _is_write_failure(exc: OSError, paths: tuple[Path, ...]) -> bool:
    if exc.filename is None:
        return exc.errno in _WRITE_ERRNOS
    return any(os.fspath(exc.filename) == os.fspath(p) for p in paths)


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; it replaces ``path`` when the block ends without error.

    The folder is created if needed. The temporary file lies in the same folder
    (so the final rename is atomic), has the same suffix (for writers that go by
    it) and gets the usual permissions (``0666`` less the umask). If the block
    raises, the temporary file is removed and ``path`` is left untouched.

    Raises:
        OutputError: The folder, the temporary file, its writing or its renaming failed.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "out" / "hello.txt"
        >>> with atomic_path(target) as tmp:
        ...     _ = tmp.write_text("hello")
        >>> target.read_text()
        'hello'
    """
    path = Path(path)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # the folder's name is taken by a file: say that, not "File exists"
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(path.parent)) from None
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    except OSError as exc:
        raise OutputError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except OutputError:
        tmp.unlink(missing_ok=True)
        raise
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if _is_write_failure(exc, (tmp, path)):
            raise OutputError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a text file (UTF-8) so that a reader never sees it half-written."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
