"""containers/imagebuild/squashfs.py: what `nox -s sqsh` writes for enroot, without an engine
(tests/containers/test_reproducible_export.py runs it on a real image)."""

from __future__ import annotations

import shlex
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from containers.imagebuild import squashfs
from tests.containers.imagebuild.fakes import FakeSession, SessionError

CONFIG: dict[str, Any] = {
    "Created": "2026-11-29T16:03:10Z",
    "Config": {
        "Env": ["PATH=/opt/ddpimg/venv/bin:/usr/bin", "LANG=C.UTF-8"],
        "Entrypoint": ["/usr/bin/tini", "--"],
        "Cmd": ["train", "--help"],
        "WorkingDir": "/tmp",
        "Labels": {"org.opencontainers.image.title": "ddpimg (cpu)"},
    },
}


@pytest.mark.parametrize(
    ("created", "epoch"),
    [
        ("2026-11-29T16:03:10Z", 1795968190),
        ("2026-11-29T16:03:10.123456789Z", 1795968190),
        ("2026-11-29T17:03:10+01:00", 1795968190),
    ],
)
def test_the_epoch_is_the_images_created_time(created: str, epoch: int) -> None:
    assert squashfs.epoch_of({"Created": created}) == epoch


def test_an_image_without_a_created_time_is_refused() -> None:
    with pytest.raises(ValueError, match="'yesterday' is not an RFC 3339 time"):
        squashfs.epoch_of({"Created": "yesterday"})


def _info(kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo("x")
    info.type, info.mode = kind, mode
    return info


@pytest.mark.parametrize(
    ("kind", "mode", "expected"),
    [
        (tarfile.DIRTYPE, 0o555, 0o755),  # /proc, /sys: owner write, as enroot's fixperms
        (tarfile.REGTYPE, 0o640, 0o640),
        (tarfile.REGTYPE, 0o000, 0o400),
        (tarfile.REGTYPE, 0o011, 0o511),  # executable by someone: by the owner too
        (tarfile.REGTYPE, 0o4755, 0o4755),
    ],
)
def test_enroots_permission_fix(kind: bytes, mode: int, expected: int) -> None:
    assert squashfs.enroot_mode(_info(kind, mode)) == expected


@pytest.mark.parametrize(
    ("path", "kept"), [("dev", True), ("dev/null", False), ("devices", True), ("etc", True)]
)
def test_the_runtimes_dev_is_left_out(path: str, kept: bool) -> None:
    assert squashfs.kept(path) is kept


def test_the_rc_script_runs_the_entrypoint_with_the_command_or_cmd(tmp_path: Path) -> None:
    script = squashfs.rc_script(CONFIG)
    assert "# org.opencontainers.image.title ddpimg (cpu)" in script
    assert "cd /tmp && unset OLDPWD || exit 1" in script
    assert 'exec /usr/bin/tini -- "$@"' in script
    assert "exec /usr/bin/tini -- train --help" in script
    rc = tmp_path / "rc"
    # The script is valid sh: with `echo` for `exec` it prints what it would run.
    rc.write_text(script.replace("    exec ", "    echo "))
    ran = subprocess.run(["sh", str(rc)], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "/usr/bin/tini -- train --help"
    ran = subprocess.run(
        ["sh", str(rc), "ddpimg", "doctor"], capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "/usr/bin/tini -- ddpimg doctor"


def test_an_image_without_entrypoint_or_cmd_runs_a_shell() -> None:
    script = squashfs.rc_script({"Config": {}})
    assert "exec /bin/sh" in script
    assert "cd / &&" in script


def test_a_word_with_spaces_is_quoted_in_the_rc_script() -> None:
    script = squashfs.rc_script({"Config": {"Cmd": ["echo", "a b", "$HOME"]}})
    assert f"exec echo {shlex.quote('a b')} {shlex.quote('$HOME')}" in script


def test_enroots_files_carry_the_environment() -> None:
    files = {file.path: file for file in squashfs.enroot_files(CONFIG)}
    assert sorted(files) == ["etc/environment", "etc/fstab", "etc/rc", "etc/rc.local"]
    assert files["etc/environment"].data == b"PATH=/opt/ddpimg/venv/bin:/usr/bin\nLANG=C.UTF-8\n"
    assert files["etc/fstab"].data == b""


def test_the_squash_command_is_enroots_compression_with_fixed_times(tmp_path: Path) -> None:
    command = squashfs.squash_command(tmp_path / "x.sqsh", 1795968190, processors=3)
    assert command[:5] == ["sqfstar", "-comp", "lzo", "-noD", "-exit-on-error"]
    for option in (["-mkfs-time", "1795968190"], ["-all-time", "1795968190"]):
        index = command.index(option[0])
        assert command[index : index + 2] == option
    assert {"-reproducible", "-no-xattrs", "-all-root"} <= set(command)
    assert command[-2:] == ["-force", str(tmp_path / "x.sqsh")]


@pytest.mark.parametrize(
    ("tag", "name"),
    [("ddpimg:cpu", "ddpimg+cpu.sqsh"), ("ddpimg:gpu-arm64", "ddpimg+gpu-arm64.sqsh"),
     ("me/img:1", "me+img+1.sqsh")],
)  # fmt: skip
def test_the_default_output_is_enroots_name(tag: str, name: str) -> None:
    assert squashfs.default_output(tag) == Path(name)


def test_the_session_reports_a_missing_image_as_its_error(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(tag: str, output: Path) -> str:
        raise squashfs.EngineError(f"no such image: {tag}")

    monkeypatch.setattr(squashfs, "export", fail)
    with pytest.raises(SessionError, match="no such image: nope:1"):
        squashfs.export_session(session, ["nope:1"])
