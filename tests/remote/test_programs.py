"""The remote programs and their wrapper: any value reaches the login node's sh as the one
word it was, and the login shell sees one quoted word of safe characters, whatever it is."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpimg.remote import programs


def run_sh(program: str, home: Path, shell: str = "sh") -> str:
    proc = subprocess.run(
        [shell, "-c", programs.command_line(program)],
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=30,
        check=True,
    )
    return proc.stdout.decode()  # not text=True: a "\r" must stay one


def test_the_login_shell_sees_one_single_quoted_word_of_safe_characters() -> None:
    line = programs.command_line("echo 'it'\"s\" $HOME `id` $(id); exit 0\n")
    found = re.fullmatch(
        r"exec /bin/sh -c 'eval \"\$\(echo ([A-Za-z0-9+/=]+) \| base64 -d\)\"'", line
    )
    assert found, line


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_program_runs_as_written(tmp_path: Path, shell: str) -> None:
    program = "printf '%s|' \"$HOME\" 'two words' \"$(printf x)\"\nprintf '\\n'\n"
    assert run_sh(program, tmp_path, shell) == f"{tmp_path}|two words|x|\n"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20),
        min_size=1,
        max_size=5,
    )
)
def test_words_reach_the_program_as_they_were(
    tmp_path_factory: pytest.TempPathFactory, argv: list[str]
) -> None:
    home = tmp_path_factory.mktemp("home")
    program = f"for w in {programs.words(argv)}; do printf '%s\\0' \"$w\"; done\n"
    assert run_sh(programs.PRELUDE + program, home).split("\0")[:-1] == argv


def test_bytes_that_are_not_utf8_go_as_they_were(tmp_path: Path) -> None:
    name = b"caf\xe9".decode("utf-8", "surrogateescape")  # as sys.argv holds such a name
    program = f"printf '%s' {programs.words([name])}\n"
    proc = subprocess.run(
        ["sh", "-c", programs.command_line(program)], capture_output=True, timeout=30, check=True
    )
    assert proc.stdout == b"caf\xe9"


@pytest.mark.parametrize(
    ("path", "word"),
    [
        ("~", '"$HOME"'),
        ("~/x y", "\"$HOME\"/'x y'"),
        ("ddpimg-remote", '"$HOME"/ddpimg-remote'),
        ("/abs/$(id)", "'/abs/$(id)'"),
        ("", '"$HOME"/.'),
    ],
)
def test_home_word(path: str, word: str) -> None:
    assert programs.home_word(path) == word


def test_a_first_word_under_home_is_expanded_there(tmp_path: Path) -> None:
    out = run_sh(f"printf '%s\\n' {programs.words(['~/venv/bin/ddpimg', '~/x'])}\n", tmp_path)
    assert out.splitlines() == [f"{tmp_path}/venv/bin/ddpimg", "~/x"]


def test_read_from_reads_a_piece_and_says_missing(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    assert run_sh(programs.read_from(str(tmp_path / "f"), 3, 4), tmp_path) == "3456"
    proc = subprocess.run(
        ["sh", "-c", programs.command_line(programs.read_from(str(tmp_path / "nope"), 0, 4))],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == programs.MISSING


def test_pack_refuses_suffixes_that_are_not_words() -> None:
    with pytest.raises(ValueError, match="letters and digits"):
        programs.pack("/r", ["manifest.json"], ["png;id"], False, [])


def test_submit_quotes_the_command_for_the_login_nodes_sh() -> None:
    program = programs.submit(
        "r",
        "job",
        "sub dir",
        ddpimg=["ddpimg"],
        sbatch_args=["--job-name=a;b"],
        command=["train", "--script", "x.py", "$(id)"],
    )
    assert "cd ./'sub dir'" in program
    assert "'--job-name=a;b'" in program
    assert shlex.join(["train", "--script", "x.py", "$(id)"]) in program


def test_tail_of_a_log_pattern_reads_the_newest_file_slurm_made(tmp_path: Path) -> None:
    """``ddpimg follow``'s last log lines: Slurm's StdOut keeps %N as it is (22.05)."""
    import os

    (tmp_path / "n1-7.out").write_text("first start\n")
    (tmp_path / "n2-7.out").write_text("second start\n")
    os.utime(tmp_path / "n1-7.out", (1_000_000, 1_000_000))
    assert run_sh(programs.tail_of(f"{tmp_path}/%N-7.out", 100), tmp_path) == "second start\n"
    proc = subprocess.run(
        ["sh", "-c", programs.command_line(programs.tail_of(f"{tmp_path}/%N-8.out", 100))],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == programs.MISSING


@pytest.mark.parametrize(
    ("pattern", "word"),
    [
        ("/w/ddpimg-7.out", "/w/ddpimg-7.out"),
        ("/w/%u-%N-7.out", '/w/"$u"-*-7.out'),
        ("/w/a b*%%.out", "'/w/a b*%.out'"),
    ],
)
def test_log_words_glob_only_where_slurm_filled_in(pattern: str, word: str) -> None:
    assert programs.log_words(pattern) == word
