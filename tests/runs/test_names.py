"""Run directory names: the parts from the environment (validated), the trainer or script,
the clock, and the way back from a name to its parts."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.runs.names import RunName, job_tag, parse_name, run_name, runs_root, stem_of, time_tag


@pytest.mark.parametrize(
    ("env", "tag"),
    [
        ({}, None),
        ({"SLURM_JOB_ID": "1234567"}, "1234567"),
        # An array task's own SLURM_JOB_ID differs per task; Slurm names it %A_%a.
        (
            {"SLURM_JOB_ID": "1234570", "SLURM_ARRAY_JOB_ID": "1234567",
             "SLURM_ARRAY_TASK_ID": "3"},
            "1234567_3",
        ),
        ({"SLURM_JOB_ID": "9", "SLURM_ARRAY_JOB_ID": "", "SLURM_ARRAY_TASK_ID": ""}, "9"),
    ],
    ids=["no-scheduler", "job", "array-task", "empty-array-variables"],
)  # fmt: skip
def test_the_job_tag_is_the_schedulers_id(env: dict[str, str], tag: str | None) -> None:
    assert job_tag(env) == tag


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SLURM_JOB_ID": "../etc"}, r"SLURM_JOB_ID \('\.\./etc'\) is not a Slurm job id"),
        ({"SLURM_JOB_ID": ""}, r"SLURM_JOB_ID \(empty\) is not a Slurm job id"),
        ({"SLURM_JOB_ID": "1" * 21}, r"SLURM_JOB_ID \('1{21}'\) is not a Slurm job id \(20"),
        ({"SLURM_JOB_ID": "١٢"}, r"SLURM_JOB_ID \('١٢'\) is not a Slurm job id"),
        (
            {"SLURM_ARRAY_JOB_ID": "12"},
            r"SLURM_ARRAY_TASK_ID \(not set\) is not a Slurm job id",
        ),
        (
            {"SLURM_ARRAY_JOB_ID": "12", "SLURM_ARRAY_TASK_ID": "a/b"},
            r"SLURM_ARRAY_TASK_ID \('a/b'\) is not a Slurm job id",
        ),
    ],
    ids=["path", "empty", "long", "non-ascii-digits", "task-missing", "task-malformed"],
)
def test_a_job_id_that_is_not_digits_never_becomes_a_path(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(DdpimgError, match=message) as raised:
        job_tag(env)
    assert raised.value.hint == "give --out DIR, or unset the SLURM_* variables outside a Slurm job"


@pytest.mark.parametrize(
    ("text", "stem"),
    [
        ("mnist", "mnist"),
        ("my_train", "my_train"),
        ("train v2 (final)", "train_v2__final_"),
        ("../../x", "_.._x"),
        (".hidden", "hidden"),
        ("-rf", "rf"),
        ("", "run"),
        ("é", "_"),
        ("a" * 100, "a" * 64),
    ],
)
def test_a_stem_is_a_safe_name_part(text: str, stem: str) -> None:
    assert stem_of(text) == stem
    assert "/" not in stem


def test_time_tags_are_local_and_sort_as_text() -> None:
    early, late = datetime(2026, 11, 29, 3, 15, 0), datetime(2026, 11, 29, 12, 0, 1)
    assert time_tag(early) == "20261129-031500"
    assert time_tag(early) < time_tag(late)


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("mnist-1234567", RunName("1234567", 1)),
        ("mnist-1234567_3", RunName("1234567_3", 1)),
        ("mnist-20261129-031500", RunName("20261129-031500", 1)),
        ("mnist-20261129-031500.2", RunName("20261129-031500", 2)),
        ("mnist-1234567.12", RunName("1234567", 12)),
        ("mnist", None),
        ("mnist-", None),
        ("mnist-abc", None),
        ("mnist-1234567.1", None),  # the first run has no number
        ("mnist-1234567.02", None),
        ("mnist-1234567.x", None),
        ("gpt-1234567", None),
        ("mnist-extra-1234567", None),
    ],
)
def test_names_parse_back_for_their_stem(name: str, parsed: RunName | None) -> None:
    assert parse_name(name, "mnist") == parsed
    if parsed is not None:
        assert run_name("mnist", parsed.tag, parsed.number) == name


def test_a_stem_with_dashes_parses() -> None:
    assert parse_name("my-train-20261129-031500", "my-train") == RunName("20261129-031500", 1)
    assert parse_name("my-train-20261129-031500", "my") is None


def test_names_order_by_start_then_number() -> None:
    names = [
        "m-20261129-031500.10",
        "m-20261129-031500",
        "m-20261128-235959",
        "m-20261129-031500.2",
    ]
    parsed = sorted(name for name in (parse_name(n, "m") for n in names) if name is not None)
    assert [run_name("m", p.tag, p.number) for p in parsed] == [
        "m-20261128-235959", "m-20261129-031500", "m-20261129-031500.2", "m-20261129-031500.10",
    ]  # fmt: skip
    assert not parse_name("m-20261129-031500", "m").from_scheduler  # type: ignore[union-attr]
    assert parse_name("m-12_3", "m").from_scheduler  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("env", "root"),
    [({}, "runs"), ({"DDPIMG_RUNS": "/scratch/me/runs"}, "/scratch/me/runs")],
)
def test_the_runs_root(env: dict[str, str], root: str) -> None:
    assert runs_root(env) == Path(root)
