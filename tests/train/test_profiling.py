"""``--profile``: the step range, and torch.profiler driven by the loop's phases, written
where ``ddpimg plot`` reads the step-time breakdown from (``ddpimg.trace_breakdown``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ddpimg.errors import DdpimgError
from ddpimg.runtime.stall.record import BACKWARD, COLLECTIVE, DATA, FORWARD, OPTIMIZER
from ddpimg.runtime.stall.watch import RankProgress
from ddpimg.trace_breakdown import read_breakdowns
from ddpimg.train.profiling import (
    StepProfiler,
    parse_profile_steps,
    profile_window,
    rank_directory,
)


@pytest.mark.parametrize(
    ("text", "expected"), [("20-25", (20, 25)), (" 3 - 3 ", (3, 3)), ("7", (7, 7))]
)
def test_parse_profile_steps(text: str, expected: tuple[int, int]) -> None:
    assert parse_profile_steps(text) == expected


@pytest.mark.parametrize("text", ["", "a-b", "3-", "-4", "1,2", "2-3-4"])
def test_a_bad_range_is_named(text: str) -> None:
    with pytest.raises(DdpimgError, match=rf"--profile {text!r} is not a step range"):
        parse_profile_steps(text)


def loop(progress: RankProgress, steps: int) -> None:
    """What the training loop tells its progress, with real work in each phase."""
    weights = torch.randn(64, 64, requires_grad=True)
    for step in range(1, steps + 1):
        progress.enter(DATA, step)
        batch = torch.randn(32, 64)
        progress.enter(FORWARD, step)
        loss = (batch @ weights).square().mean()
        progress.enter(BACKWARD, step)
        loss.backward()
        progress.enter(OPTIMIZER, step)
        with torch.no_grad():
            weights -= 0.01 * weights.grad  # type: ignore[operator]
        progress.enter(COLLECTIVE, step)
    progress.enter(DATA, steps + 1)  # the loop asks for one more batch, then stops


@pytest.mark.parametrize(
    ("steps", "total", "expected"),
    [((20, 25), 100, (20, 25)), ((6, 9), 8, (6, 8)), ((8, 8), 8, (8, 8)), ((9, 12), 8, None)],
)
def test_the_window_is_cut_at_the_runs_end(
    steps: tuple[int, int], total: int, expected: tuple[int, int] | None
) -> None:
    assert profile_window(steps, total) == expected


@pytest.mark.parametrize(("window", "expected_steps"), [((3, 5), 3), ((1, 2), 2), ((6, 8), 3)])
def test_the_profiled_steps_and_their_phases_are_in_the_trace(
    tmp_path: Path, window: tuple[int, int], expected_steps: int
) -> None:
    inner = RankProgress()
    profiler = StepProfiler(window, tmp_path, 1, torch.device("cpu"), memory=False)
    progress = profiler.progress(inner)
    loop(progress, 8)
    profiler.close()
    assert inner.position[1:3] == (9, DATA)  # the stall watch's progress was kept up to date
    traces = list(rank_directory(tmp_path, 1).glob("rank_1.*.pt.trace.json"))
    assert len(traces) == 1
    (breakdown,) = read_breakdowns(tmp_path)
    assert (breakdown.rank, breakdown.steps) == (1, expected_steps)
    assert set(breakdown.phases) == {"data", "forward", "backward", "optimizer", "collective"}
    assert 0 < sum(breakdown.phases.values()) <= breakdown.step_s * 1.0001


def test_no_trace_outside_the_window(tmp_path: Path) -> None:
    profiler = StepProfiler((20, 25), tmp_path, 0, torch.device("cpu"), memory=False)
    loop(profiler.progress(RankProgress()), 5)
    profiler.close()
    assert read_breakdowns(tmp_path) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "unreadable"), ('{"traceEvents": 3}', "no traceEvents list")],
)
def test_a_malformed_trace_is_named(tmp_path: Path, content: str, message: str) -> None:
    trace = rank_directory(tmp_path, 0) / "rank_0.1.pt.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(content)
    with pytest.raises(DdpimgError, match=f"profiler trace {trace}: {message}"):
        read_breakdowns(tmp_path)


@pytest.mark.gpu
def test_memory_snapshot_on_cuda(tmp_path: Path) -> None:
    """The allocator's history over the profiled steps, dumped as torch writes it (a
    pickle for pytorch.org/memory_viz; not loaded here: a pickle is code)."""
    profiler = StepProfiler((2, 3), tmp_path, 0, torch.device("cuda"), memory=True)
    progress = profiler.progress(RankProgress())
    for step in range(1, 5):
        progress.enter(DATA, step)
        torch.randn(1024, 1024, device="cuda").square().sum().item()
    profiler.close()
    snapshot = rank_directory(tmp_path, 0) / "memory_snapshot.pickle"
    assert snapshot.read_bytes()[:1] == b"\x80"  # pickle's protocol marker
