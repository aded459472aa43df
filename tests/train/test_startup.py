from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ddpimg.train import startup
from ddpimg.train.startup import PHASES, process_start_time, startup_report


def test_report_gives_each_phase_the_time_since_the_previous_mark() -> None:
    marks = dict(zip(PHASES, (10.5, 10.75, 12.0, 12.5, 12.75, 13.0, 14.0, 14.25), strict=True))
    report = startup_report(marks, started=10.0)
    assert [report[f"{p}_s"] for p in PHASES] == [0.5, 0.25, 1.25, 0.5, 0.25, 0.25, 1.0, 0.25]
    assert report["total_s"] == 4.25
    assert report["marks"] == marks


def test_a_missing_phase_is_none_and_the_next_counts_from_the_last_mark() -> None:
    # A trainer run without the CLI: no launch, plan, imports or process_group marks.
    report = startup_report({"data": 5.0, "model": 6.5, "first_step": 7.0}, started=None)
    assert report["launch_s"] is None
    assert report["process_group_s"] is None
    assert report["data_s"] is None  # nothing before it to count from
    assert (report["model_s"], report["first_step_s"]) == (1.5, 0.5)
    assert report["total_s"] == 2.0


def test_unknown_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown startup phase 'warmup'"):
        startup.mark("warmup")


def test_process_start_is_read_from_proc(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    # A command name with a space and a parenthesis: fields are counted after the last ")".
    fields = ["S"] + ["0"] * 18 + ["1000"] + ["0"] * 10  # field 22 (starttime) = 1000 ticks
    (tmp_path / "self" / "stat").write_text(f"123 (my (odd) cmd) {' '.join(fields)}\n")
    (tmp_path / "uptime").write_text("25.00 40.00\n")
    age_s = 25.0 - 1000 / os.sysconf("SC_CLK_TCK")
    # The clock is read inside the call: bracket it, so that no wait of the machine's counts.
    before = time.time()
    started = process_start_time(str(tmp_path))
    after = time.time()
    assert started is not None
    assert before - 1e-6 <= started + age_s <= after + 1e-6


def test_process_start_of_this_process_is_in_the_past() -> None:
    started = process_start_time()
    assert started is not None
    assert time.time() - 24 * 3600 < started <= time.time()


def test_without_proc_there_is_no_process_start(tmp_path: Path) -> None:
    assert process_start_time(str(tmp_path)) is None
