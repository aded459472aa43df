"""``main()``: a user error is exit status 2 and one line; anything else is exit status 1 and
one line naming the command and the file that holds the traceback, never a bare traceback."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from ddpimg import cli, exitcodes
from ddpimg.errors import DdpimgError


class Failing:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", nargs="*")

    def run(self, args: argparse.Namespace, argv: list[str]) -> int:
        raise self.error


def run_failing(
    error: BaseException, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    monkeypatch.setattr(cli, "command_module", lambda name: Failing(error))
    status = cli.main(["plot", "a-run"])
    return status, capsys.readouterr().err


def test_an_unforeseen_error_is_one_line_and_a_traceback_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    status, err = run_failing(KeyError("loss"), monkeypatch, capsys)
    assert status == exitcodes.TRAINING_FAILED
    assert "Traceback" not in err
    first, hint = err.splitlines()
    found = re.fullmatch(
        r"ddpimg: error: ddpimg plot failed with KeyError: 'loss'; the full traceback is in "
        r"(\S+)",
        first,
    )
    assert found is not None, first
    assert hint.startswith("  hint: an error ddpimg does not foresee")
    saved = Path(found[1])
    assert saved.parent == tmp_path
    text = saved.read_text(encoding="utf-8")
    assert text.startswith("ddpimg plot\nTraceback (most recent call last):")
    assert "KeyError: 'loss'" in text


def test_a_user_error_is_exit_2_and_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = run_failing(DdpimgError("run r: bad", hint="fix it"), monkeypatch, capsys)
    assert status == exitcodes.USAGE
    assert err == "ddpimg: error: run r: bad\n  hint: fix it\n"


def test_a_missing_module_of_ddpimg_itself_is_a_crash_not_a_user_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = run_failing(ModuleNotFoundError(name="ddpimg.nothing"), monkeypatch, capsys)
    assert status == exitcodes.TRAINING_FAILED
    assert err.startswith("ddpimg: error: ddpimg plot failed with ModuleNotFoundError")
    assert "Traceback" not in err
