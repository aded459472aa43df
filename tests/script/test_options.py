"""The options train hands the boot, through one variable the boot removes."""

from __future__ import annotations

import pytest

from ddpimg.errors import LauncherError
from ddpimg.script.options import ENV_VAR, ScriptOptions


def test_options_travel_whole_and_the_variable_is_removed() -> None:
    options = ScriptOptions(
        out="o", timeout_s=12.5, watch=False, preempt_signals=("TERM",), resume="/c/p",
        run_info={"source": "slurm", "hosts": ["n1", "n2"]},
    )  # fmt: skip
    environ = {"HOME": "/h", **options.to_environ()}
    assert ScriptOptions.pop_from(environ) == options
    assert environ == {"HOME": "/h"}


def test_outside_train_the_boot_says_what_runs_it() -> None:
    with pytest.raises(LauncherError, match=f"{ENV_VAR} is not set: the script boot runs only"):
        ScriptOptions.pop_from({})


@pytest.mark.parametrize("text", ["not json", "[]", '{"out": "x", "bogus": 1}', "{}"])
def test_a_damaged_variable_is_named(text: str) -> None:
    with pytest.raises(LauncherError, match=f"{ENV_VAR} does not hold the options train writes"):
        ScriptOptions.pop_from({ENV_VAR: text})
