"""Slurm's record of a job read field by field; what does not fit a field's form is unknown."""

from __future__ import annotations

from ddpimg.remote.jobinfo import JobInfo, parse_job

LINE = (
    "JobId=42 JobName=ddpimg UserId=me(1000) JobState=PENDING Reason=Priority Dependency=(null) "
    "Restarts=0 ExitCode=0:0 StartTime=2026-11-29T06:00:00 NodeList=(null) "
    "StdOut=/h/w/ddpimg-42.out"
)


def test_the_fields_follow_needs() -> None:
    assert parse_job(LINE, "42") == JobInfo(
        "PENDING", "Priority", "2026-11-29T06:00:00", "", 0, "0:0", "/h/w/ddpimg-42.out"
    )
    running = LINE.replace("PENDING", "RUNNING").replace("NodeList=(null)", "NodeList=node[1-2]")
    info = parse_job(
        running.replace("Restarts=0", "Restarts=2").replace("Reason=Priority", "Reason=None"), "42"
    )
    assert info is not None
    assert (info.state, info.nodes, info.restarts, info.reason, info.ended) == (
        "RUNNING",
        "node[1-2]",
        2,
        "",
        False,
    )
    done = parse_job(LINE.replace("PENDING", "COMPLETED"), "42")
    assert done is not None
    assert done.ended


def test_another_job_or_nothing_is_none() -> None:
    assert parse_job(LINE, "43") is None
    assert parse_job("slurm_load_jobs error: Invalid job id specified", "42") is None


def test_hostile_fields_are_unknown() -> None:
    line = (
        "JobId=42 JobName=$(id) JobState=running;id Reason=\x1b[2J NodeList=node1;rm "
        "Restarts=1e9 ExitCode=x StartTime=`id` StdOut=relative/path"
    )
    assert parse_job(line, "42") == JobInfo("UNKNOWN")
