"""The ssh transport with a fake ``ssh`` (the real client and sshd: tests/multinode/
test_remote.py): one master connection, programs over it, what ssh's failures mean, and
nothing left running."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote import ssh as ssh_module
from ddpimg.remote.ssh import (
    SshTransport,
    check_host,
    connection_error,
    control_parent,
    ssh_words,
)
from ddpimg.remote.transport import ConnectionLost

# A stand-in for ssh: the master creates its control "socket" (a file holding its pid) and
# waits; -O exit ends it; any other call runs its command line here, unless FAIL says why not.
FAKE_SSH = """\
#!/bin/sh
log="$(dirname "$0")/calls"
printf '%s\\n' "$*" >> "$log"
if [ -n "${FAIL:-}" ]; then echo "$FAIL" >&2; exit 255; fi
for a in "$@"; do case "$a" in ControlPath=*) sock="${a#ControlPath=}" ;; esac; done
case " $* " in
    *" ControlMaster=yes "*) echo $$ > "$sock"; exec sleep 300 ;;
    *" -O exit "*) kill "$(cat "$sock")"; rm -f "$sock"; exit 0 ;;
esac
for last in "$@"; do :; done
exec /bin/sh -c "$last"
"""


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ssh = tmp_path / "bin" / "ssh"
    ssh.parent.mkdir()
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    monkeypatch.delenv("FAIL", raising=False)
    return ssh


def env_for(ssh: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": f"{ssh.parent}:/usr/bin:/bin",
        "DDPIMG_SSH_COMMAND": f"{ssh} -F /my/config",
    } | extra


def test_one_master_every_program_over_it_and_nothing_left(fake_ssh: Path) -> None:
    with SshTransport("me@login", env_for(fake_ssh)) as transport:
        master = transport._master
        assert master is not None
        assert master.poll() is None
        assert transport.run("echo hello", "a greeting").text == "hello\n"
        assert transport.run("exit 3", "a failure").status == 3
    assert master.poll() is not None
    calls = (fake_ssh.parent / "calls").read_text().splitlines()
    assert calls[0].startswith("-F /my/config -o ControlMaster=yes -o ControlPath=")
    assert "-o BatchMode=yes -N -T me@login" in calls[0]
    assert all("-o ControlMaster=no" in call for call in calls[1:3])
    assert "-O exit me@login" in calls[3]


def test_a_master_that_died_is_a_retryable_loss_and_reconnect_opens_another(fake_ssh: Path) -> None:
    transport = SshTransport("login", env_for(fake_ssh))
    transport.connect()
    try:
        assert transport._master is not None
        transport._master.kill()
        transport._master.wait()
        with pytest.raises(ConnectionLost) as lost:
            transport.run("true", "a poll")
        assert lost.value.retryable
        transport.reconnect()
        assert transport.connections == 2
        assert transport.run("echo again", "a poll").text == "again\n"
    finally:
        transport.close()


def test_a_connection_that_fails_says_why(fake_ssh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL", "ssh: Could not resolve hostname nosuch: Name or service not known")
    transport = SshTransport("nosuch", env_for(fake_ssh) | {"FAIL": os.environ["FAIL"]})
    with pytest.raises(
        ConnectionLost, match=r"ssh nosuch: unknown host \(ssh: ssh: Could not resolve"
    ):
        transport.connect()
    assert transport._master is None
    assert transport._dir is None


@pytest.mark.parametrize(
    ("said", "what", "retryable"),
    [
        (
            "ssh: Could not resolve hostname x: Temporary failure in name resolution",
            "unknown host",
            False,
        ),
        ("me@x: Permission denied (publickey).", "the login was refused", False),
        ("Host key verification failed.", "its host key is not the one known", False),
        ("/c:3: Bad configuration option: foo", "ssh's configuration", False),
        ("ssh: connect to host x port 22: Connection refused", "the connection failed", True),
        ("Connection to x closed by remote host.", "the connection failed", True),
        ("client_loop: send disconnect: Broken pipe", "the connection failed", True),
        ("something new", "the connection failed", False),
    ],
)
def test_what_sshs_message_means(said: str, what: str, retryable: bool) -> None:
    error = connection_error("x", f"warning: noise\n{said}\n")
    assert error.message.startswith(f"ssh x: {what} (ssh: ")
    assert error.retryable is retryable
    assert error.hint


def test_the_message_of_the_other_end_is_escaped() -> None:
    assert "\\x1b[2J" in connection_error("x", "\x1b[2J banner\n").message


@pytest.mark.parametrize("host", ["", "-oProxyCommand=id", "a b", "a\nb", "\x1b"])
def test_a_host_is_one_word_and_no_option(host: str) -> None:
    with pytest.raises(DdpimgError, match="not a host name"):
        check_host(host)


def test_the_client_is_the_users_and_must_be_there(fake_ssh: Path, tmp_path: Path) -> None:
    assert ssh_words({"PATH": str(fake_ssh.parent)}) == ["ssh"]
    assert ssh_words({"DDPIMG_SSH_COMMAND": f"{fake_ssh} -F 'my config'"})[1:] == [
        "-F",
        "my config",
    ]
    with pytest.raises(DdpimgError, match="cannot be split into words"):
        ssh_words({"DDPIMG_SSH_COMMAND": "ssh -F 'open"})
    with pytest.raises(DdpimgError, match="nossh: the ssh client is not installed or not on PATH"):
        ssh_words({"DDPIMG_SSH_COMMAND": "nossh", "PATH": str(tmp_path)})


def test_no_master_leaves_a_process_after_an_exception(fake_ssh: Path) -> None:
    transport = SshTransport("login", env_for(fake_ssh))
    pid = 0

    def fail() -> None:
        nonlocal pid
        with transport:
            pid = transport._master.pid if transport._master else 0
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail()
    assert pid
    assert (
        subprocess.run(["kill", "-0", str(pid)], capture_output=True, check=False).returncode != 0
    )


@pytest.mark.parametrize(
    "banner",
    [
        "WARNING: unauthorised access: permission denied to anyone without an account",
        "Permission denied (publickey) is what you get without a key: see the wiki",
    ],
)
def test_a_banner_that_says_permission_denied_is_no_refusal(banner: str) -> None:
    """A pre-login banner comes on ssh's stderr too: a connection dropped after it stays a
    loss worth trying again, not a refused login."""
    error = connection_error("x", f"{banner}\nConnection to x closed by remote host.\n")
    assert error.message.startswith("ssh x: the connection failed (ssh: ")
    assert error.retryable


def test_sshs_own_refusal_after_a_banner_is_a_refusal() -> None:
    said = "Permission denied without an account\nme@x: Permission denied (publickey,password).\n"
    error = connection_error("x", said)
    assert error.message.startswith("ssh x: the login was refused")
    assert not error.retryable


@pytest.mark.parametrize(
    ("platform", "tmpdir", "parent"),
    [
        # macOS: $TMPDIR is /var/folders/<2>/<30>/T/ (49 bytes): it fits 104 bytes.
        ("darwin", "/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T/",
         "/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T"),
        ("darwin", "/Users/someone/Library/Caches/TemporaryItems/a-long-project-name", "/tmp"),
        ("linux", "/tmp", "/tmp"),
        ("linux", "/scratch/" + "x" * 53, "/scratch/" + "x" * 53),
        ("linux", "/scratch/" + "x" * 54, "/tmp"),
        ("freebsd14", "/home/" + "y" * 60, "/tmp"),
    ],
)  # fmt: skip
def test_the_control_socket_fits_the_platforms_sun_path(
    platform: str, tmpdir: str, parent: str
) -> None:
    chosen = control_parent(tmpdir, platform)
    assert chosen == parent
    limit = 108 if platform == "linux" else 104
    # The master binds PATH.XXXXXXXXXXXXXXXX first (OpenSSH's mux.c); the NUL counts too.
    socket = f"{chosen}/ddpimg-ssh-abcdefgh/control.{'r' * 16}"
    assert len(socket.encode()) + 1 <= limit


def test_no_short_enough_folder_is_a_named_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh_module, "FALLBACK_PARENT", "/" + "f" * 80)
    with pytest.raises(DdpimgError, match="would not fit a Unix socket's 104 bytes") as err:
        control_parent("/" + "z" * 90, "darwin")
    assert err.value.hint == "set TMPDIR to a short directory of your own (TMPDIR=/tmp ddpimg ...)"


def test_a_real_master_socket_under_a_long_tmpdir(
    fake_ssh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a TMPDIR too long for a socket the master's folder goes under /tmp."""
    long_dir = tmp_path / ("t" * 60)
    long_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_dir))
    with SshTransport("login", env_for(fake_ssh)) as transport:
        socket = transport._socket
        assert str(socket).startswith("/tmp/ddpimg-ssh-")
        assert len(str(socket).encode()) + 17 + 1 <= 108
