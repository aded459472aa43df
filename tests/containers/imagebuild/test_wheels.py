"""containers/imagebuild/wheels.py: the locked files fetched and served on 127.0.0.1."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.imagebuild import wheels


@pytest.mark.parametrize(("mpi4py_wheel", "no_binary"), [(False, "mpi4py"), (True, ":none:")])
def test_download_command(mpi4py_wheel: bool, no_binary: str, tmp_path: Path) -> None:
    command = wheels.download_command(Path("containers/lock/pypi.txt"), mpi4py_wheel, tmp_path)
    assert command[:4] == ["python", "-m", "pip", "download"]
    assert command[command.index("--no-binary") + 1] == no_binary
    assert command[command.index("-r") + 1] == "containers/lock/pypi.txt"
    assert command[command.index("--dest") + 1] == str(tmp_path)
    assert {"--no-deps", "--require-hashes"} <= set(command)
    assert "--platform" not in command  # this machine's own wheels


def test_download_command_for_another_platform(tmp_path: Path) -> None:
    target = ["--platform", "manylinux_2_28_aarch64", "--python-version", "3.11"]
    command = wheels.download_command(Path("l.txt"), True, tmp_path, target)
    start = command.index("--platform")
    assert command[start : start + len(target)] == target


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_serves_the_directory_then_stops(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"wheel")
    with wheels.serve(tmp_path, ports=(0,)) as (url, pid):
        assert url.startswith("http://127.0.0.1:")
        assert pid > 0
        with urllib.request.urlopen(url + "a.whl", timeout=10) as response:
            assert response.read() == b"wheel"
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "a.whl", timeout=10)


def test_serve_takes_another_port_when_the_first_is_taken(tmp_path: Path, taken_port: int) -> None:
    with wheels.serve(tmp_path, ports=(taken_port, 0)) as (url, _):
        assert not url.endswith(f":{taken_port}/")


def test_serve_says_which_ports_it_tried(tmp_path: Path, taken_port: int) -> None:
    with (
        pytest.raises(wheels.WheelServerError, match=rf"did not start on ports \[{taken_port}\]"),
        wheels.serve(tmp_path, ports=(taken_port,)),
    ):
        pass  # pragma: no cover
