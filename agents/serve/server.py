"""Running the service: ``gpualloc serve`` binds a socket, says where, and runs uvicorn on it.

The socket is bound here, before uvicorn starts, so that ``--port 0`` (a port the
OS chooses) can be read back at once: from the log line ``gpualloc serve:
listening on http://HOST:PORT`` and from ``--port-file``, written (atomically)
after the bind. One process serves; the exact pool's workers are its children and
die with it. SIGTERM or Ctrl-C stops it: open requests end, workers are killed.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
from pathlib import Path

from agents.serve.app import create_app
from agents.serve.settings import Settings
from gpu_env.files import write_text_atomic


class ServeError(Exception):
    """Settings that cannot serve (one line, exit status 2 at the command line)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: Path) -> str:
    """The bearer token: the file's first line, stripped.

    Raises:
        ServeError: The file is missing, unreadable or has no token.
    """
    try:
        token = path.read_text(encoding="utf-8").strip().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeError(f"{path}: --token-file: cannot read: {exc}") from None
    if not token or len(token[0].strip()) < 16:
        raise ServeError(f"{path}: --token-file: expected a token of at least 16 characters on the first line")
    return token[0].strip()


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: the OS chooses).

    Raises:
        ServeError: The address cannot be bound (in use, not this machine's).
    """
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it
        # every answer on a kept-alive connection waited 40 ms for a delayed ACK (measured: 44 ms -> 2 ms per /healthz).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        raise ServeError(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve(settings: Settings, host: str, port: int, port_file: Path | None = None, access_log: bool = False) -> int:
    """Serve until stopped; returns the exit status (0)."""
    import uvicorn

    sock = bind(host, port)
    bound = sock.getsockname()[1]
    if port_file is not None:
        write_text_atomic(port_file, f"{bound}\n")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    shown = f"[{host}]" if ":" in host else host
    print(
        f"gpualloc serve: listening on http://{shown}:{bound} (exact pool: {settings.exact_processes} processes, "
        f"queue {settings.exact_queue}; fast: {settings.fast_threads} threads, queue {settings.fast_queue}; "
        f"token {'required' if settings.token else 'off'}; stateless)",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        create_app(settings),
        log_level="info",
        access_log=access_log,
        timeout_graceful_shutdown=5,
        lifespan="on",
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0
