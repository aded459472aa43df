"""The script runtime in one process: resume choice, metrics lines, preemption signals."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from ddpimg.script.options import ScriptOptions
from ddpimg.script.record import ScriptRecord
from ddpimg.script.runtime import ScriptPreempted, ScriptRuntime


def _runtime(**options: object) -> ScriptRuntime:
    return ScriptRuntime(ScriptOptions(**options), rank=0, world_size=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("resume", "continuing", "expected"),
    [
        ("auto", True, "/o/checkpoint-8"),
        ("auto", False, None),
        ("none", True, None),
        ("/given", False, "/given"),
        ("/given", True, "/given"),
    ],
)
def test_which_checkpoint_a_framework_is_given(
    resume: str, continuing: bool, expected: str | None
) -> None:
    runtime = _runtime(resume=resume)
    runtime.continuing = continuing
    assert runtime.resume_from(lambda: "/o/checkpoint-8") == expected


def test_metrics_lines_get_the_step_and_the_time_and_no_nan(tmp_path: Path) -> None:
    runtime = _runtime()
    runtime.record = ScriptRecord.start(
        tmp_path, script=__file__, args=[], run_info={}, world={}, options={}, previous=None,
        env={},
    )  # fmt: skip
    runtime.optimizer_step_begins()
    runtime.optimizer_step_ended()
    runtime.log("train", None, {"loss": 1.5, "lr": float("nan")})
    runtime.log("eval", 7, {"loss": 2.5})
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(line["kind"], line["step"], line["loss"]) for line in lines] == [
        ("train", 1, 1.5), ("eval", 7, 2.5),
    ]  # fmt: skip
    assert lines[0]["lr"] is None
    assert all(line["elapsed_s"] >= 0 for line in lines)
    assert runtime.last_loss == 1.5
    assert runtime.summary_record() | {"elapsed_s": 0} == {
        "kind": "summary", "steps": 1, "final_loss": 1.5, "elapsed_s": 0, "world_size": 1,
    }  # fmt: skip


def test_a_signal_nobody_acts_on_ends_the_script_at_once() -> None:
    runtime = _runtime(preempt_signals=("USR2",))
    runtime.begin_script()
    with runtime.preemption, pytest.raises(ScriptPreempted) as stopped:
        os.kill(os.getpid(), signal.SIGUSR2)
    assert (stopped.value.cause, stopped.value.checkpoint) == ("SIGUSR2", None)


def test_a_signal_during_the_boot_only_raises_the_flag_until_the_script_begins() -> None:
    """The boot's waits (rendezvous, rank 0's decision) look at the flag and end in one
    line: an exception from the handler in their middle was a 14-line traceback, exit 1."""
    runtime = _runtime(preempt_signals=("TERM",))
    with runtime.preemption:
        os.kill(os.getpid(), signal.SIGTERM)
        assert runtime.preemption.received == "SIGTERM"
        with pytest.raises(ScriptPreempted) as stopped:
            runtime.begin_script()
    assert (stopped.value.cause, stopped.value.step, stopped.value.checkpoint) == (
        "SIGTERM", 0, None,
    )  # fmt: skip


def test_a_signal_with_a_consumer_only_raises_the_flag() -> None:
    runtime = _runtime(preempt_signals=("USR2",))
    runtime.acting("huggingface")
    with runtime.preemption:
        os.kill(os.getpid(), signal.SIGUSR2)
    assert runtime.preemption.received == "SIGUSR2"
    # One process, no process group: the flag is the agreement.
    import torch

    assert runtime.stop_agreed(1, torch.device("cpu"))


def test_without_preemption_signals_nothing_is_caught() -> None:
    runtime = _runtime(preempt_signals=())
    before = signal.getsignal(signal.SIGUSR2)
    with runtime.preemption:
        assert signal.getsignal(signal.SIGUSR2) is before


def test_progress_in_the_manifest_counts_the_steps_of_the_runs_it_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ddpimg follow shows of a script that logs nothing."""
    previous = {"status": "preempted", "progress": {"steps": 40}}
    runtime = _runtime()
    runtime.record = ScriptRecord.start(
        tmp_path, script=__file__, args=[], run_info={}, world={}, options={}, previous=previous,
        env={},
    )  # fmt: skip
    for _ in range(3):
        runtime.optimizer_step_ended()
    progress = json.loads((tmp_path / "manifest.json").read_text())["progress"]
    assert (progress["steps"], progress["run_steps"]) == (41, 1)  # the first step at once
    runtime.record_progress(final=True)
    progress = json.loads((tmp_path / "manifest.json").read_text())["progress"]
    assert (progress["steps"], progress["run_steps"]) == (43, 3)
    runtime.at_step(100)  # a framework's count holds the earlier runs' steps itself
    runtime.record_progress(final=True)
    assert json.loads((tmp_path / "manifest.json").read_text())["progress"]["steps"] == 100
