"""The locked files for a build without a registry (``--local``): fetched by this machine's
pip (with its caches, indexes and certificates) into WHEELHOUSE, then served on 127.0.0.1 to
the build's pip (the Dockerfile's WHEELS_URL) while the build runs."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from .session import Session

WHEELHOUSE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ddpimg/wheelhouse"
# The URL is a build argument, part of the cache key of the step that installs the lock: the
# same port every time keeps that step cached. Any free port when it is taken.
WHEEL_SERVER_PORT = 38751
SERVER_PORTS = (WHEEL_SERVER_PORT, 0)


class WheelServerError(RuntimeError):
    """The wheel server did not start on any of the ports tried."""


def download_command(
    lock_file: Path,
    mpi4py_wheel: bool,
    dest: Path = WHEELHOUSE,
    target: Sequence[str] = (),
) -> list[str]:
    """pip's command (run by the session's python) that fetches every file of ``lock_file``:
    mpi4py as its source unless ``mpi4py_wheel`` (the Dockerfile's MPI4PY_BUILD); the wheels
    for this machine, or for the platform and Python of ``target`` (Platform.pip_args)."""
    return [
        "python", "-m", "pip", "download", "-qq", "--progress-bar", "off",
        "--no-deps", "--require-hashes", "--no-binary", ":none:" if mpi4py_wheel else "mpi4py",
        *target, "-r", str(lock_file), "--dest", str(dest),
    ]  # fmt: skip


@contextlib.contextmanager
def serve(directory: Path, ports: Sequence[int] = SERVER_PORTS) -> Iterator[tuple[str, int]]:
    """Serve ``directory`` over HTTP on 127.0.0.1, on the first of ``ports`` that is free (0:
    any); yield its URL and the server's PID, and stop the server when the block ends."""
    banner = ""
    for port in ports:
        server = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            cwd=directory,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        banner = server.stdout.readline() if server.stdout else ""
        match = re.search(r"port (\d+)", banner)
        if match is not None:
            break
        server.wait(timeout=30)
    else:
        raise WheelServerError(f"the wheel server did not start on ports {list(ports)}: {banner!r}")
    try:
        yield f"http://127.0.0.1:{match.group(1)}/", server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout:
            server.stdout.close()


@contextlib.contextmanager
def wheelhouse(
    session: Session, lock_file: Path, mpi4py_wheel: bool, target: Sequence[str] = ()
) -> Iterator[str]:
    """Fetch ``lock_file``'s files (for ``target``, see download_command) into WHEELHOUSE and
    serve them; yield the URL."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    session.run(*download_command(lock_file, mpi4py_wheel, target=target))
    with contextlib.ExitStack() as stack:
        try:
            url, pid = stack.enter_context(serve(WHEELHOUSE))
        except WheelServerError as err:
            session.error(str(err))
        session.log(f"serving {WHEELHOUSE} at {url} (PID {pid})")
        yield url
