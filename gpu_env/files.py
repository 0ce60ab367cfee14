"""Writing files atomically: a reader never sees half a file, and a failed write leaves the old file as it was.

Every file the project writes (scenarios, plans, reports, figures, policies
and their cards, results) goes through :func:`atomic_path` or
:func:`write_text_atomic`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; it replaces ``path`` when the block ends without error.

    The folder is created if needed. The temporary file lies in the same folder
    (so the final rename is atomic), has the same suffix (for writers that go by
    it) and gets the usual permissions (``0666`` less the umask). If the block
    raises, the temporary file is removed and ``path`` is left untouched.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "out" / "hello.txt"
        >>> with atomic_path(target) as tmp:
        ...     _ = tmp.write_text("hello")
        >>> target.read_text()
        'hello'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a text file (UTF-8) so that a reader never sees it half-written."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
