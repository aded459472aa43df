"""Which node-local paths a script may expand between double quotes (ddpimg.shellpath)."""

from __future__ import annotations

import pytest

from ddpimg.shellpath import expandable_path_problem


@pytest.mark.parametrize(
    "path",
    ["/tmp", "$TMPDIR", "${TMPDIR}", "${TMPDIR:-/tmp}", "${TMPDIR-/tmp}/x", "$LOCAL/$USER",
     "/local_scratch/${SLURM_JOB_ID}", "/a>b|c;d"],
)  # fmt: skip
def test_plain_paths_and_variables_are_allowed(path: str) -> None:
    assert expandable_path_problem(path) is None


@pytest.mark.parametrize(
    "path",
    ["", "tmp", "-rf", "$(id)", "/x/$(id)", "`id`", '/x"y', "/x\\y", "/a b", "/a\nb",
     "${X:=/tmp}", "${X:-$(id)}", "${X:-`id`}", "${X:-${Y}}", "${#X}", "${X/a/b}", "$1",
     "$$", "${X"],
)  # fmt: skip
def test_anything_else_is_refused(path: str) -> None:
    problem = expandable_path_problem(path)
    assert problem is not None
    assert repr(path) in problem
