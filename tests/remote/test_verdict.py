"""follow's words: the live line, the manifest's verdict, the log's lines, all escaped."""

from __future__ import annotations

from ddpimg.remote.verdict import Pace, duration, eval_line, log_lines, run_verdict, train_line


def test_the_live_line() -> None:
    record = {"kind": "train", "step": 12, "loss": 1.23456, "samples_per_s": 812.4}
    assert train_line(record, 40, 13.2) == "step 12/40  loss 1.2346  812 samples/s  0:13 left"
    assert train_line({"step": 3, "steps_per_s": 2.5}, None, None) == "step 3  2.50 steps/s"
    assert train_line({"step": 3, "loss": "\x1b[2J", "samples_per_s": 1e308}, None, None) == (
        "step 3  1e+308 samples/s"
    )
    assert (
        eval_line({"epoch": 1, "loss": 0.5, "accuracy": 0.9})
        == "eval  epoch 1  loss 0.5000  accuracy 90.00%"
    )


def test_time_left_from_the_pace_of_one_run() -> None:
    pace = Pace()
    pace.add(1, 10.0)
    assert pace.left(1, 10) is None
    pace.add(3, 11.0)
    assert pace.left(3, 10) == 3.5
    pace.add(4, 0.5)  # a continued run: its clock starts again
    assert pace.left(4, 10) == 3.0
    assert duration(3725) == "1:02:05"


def test_the_verdicts() -> None:
    summary = {"steps": 40, "final_loss": 0.25, "eval_loss": 0.3, "eval_accuracy": 0.9}
    assert run_verdict({"status": "completed", "exit_status": 0}, summary) == (
        "completed: 40 steps, final loss 0.2500, eval loss 0.3000, accuracy 90.00%"
    )
    preempted = {
        "status": "preempted",
        "exit_status": 75,
        "preemption": {
            "cause": "SIGUSR2",
            "step": 12,
            "checkpoint": "/r/checkpoints/step-00000012",
        },
    }
    assert (
        run_verdict(preempted, None)
        == "preempted (SIGUSR2) after step 12, checkpoint step-00000012 (exit 75)"
    )
    failed = {
        "status": "failed",
        "exit_status": 5,
        "error": "rank 3 on node2 stopped reporting\n  hint: x",
    }
    assert run_verdict(failed, None) == "failed (exit 5): rank 3 on node2 stopped reporting"
    hostile = {"status": "x\x1b[2J", "exit_status": True, "error": "\x1b]0;t\x07" + "y" * 500}
    said = run_verdict(hostile, None)
    assert said.startswith("x\\x1b[2J: \\x1b]0;t\\x07yyy")
    assert len(said) < 320
    assert said.endswith("...")
    assert run_verdict(None, None).startswith("no manifest.json")


def test_log_lines_are_escaped_and_the_cut_first_line_dropped() -> None:
    data = b"rt of a line\nok\n\x1b[2Jcleared\r\n$(id)\n"
    assert log_lines(data, 2) == ["\\x1b[2Jcleared", "$(id)"]
    assert log_lines(data, 10) == ["rt of a line", "ok", "\\x1b[2Jcleared", "$(id)"]
    assert log_lines(b"\xff\xfe bytes\n", 5) == ["\ufffd\ufffd bytes"]
