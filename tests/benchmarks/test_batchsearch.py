"""The search for the largest batch that fits (benchmarks/parts/batchsearch.py), driven by a
fake device: the trial is the only thing replaced, by one that fits below a boundary and
raises torch's own out-of-memory error above it (or reports a peak over the headroom).
benchmarks/batch_probe.py, the torch side, runs once on the CPU, where nothing runs out."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import batch_probe
import bench
import gpu_runbook
from parts import gpu
from parts.batchsearch import (
    BatchChoice,
    NoBatchFits,
    SearchLimits,
    find_largest_batch,
    is_out_of_memory,
    searched_from_record,
)


@dataclass
class FakeDevice:
    """A device where a batch of ``fits_up_to`` or less fits, and whose peak memory is
    ``per_sample`` of the device a sample (so a batch can run and still pass the
    headroom). Records every size tried."""

    fits_up_to: int
    per_sample: float = 0.0
    tried: list[int] = field(default_factory=list)

    def trial(self, batch: int) -> float:
        self.tried.append(batch)
        if batch > self.fits_up_to:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {batch} MiB. GPU 0 has a total "
                "capacity of 139.81 GiB"
            )
        return batch * self.per_sample


@pytest.mark.parametrize("boundary", [8, 9, 15, 16, 17, 100, 184, 255, 256, 257, 511])
def test_the_search_finds_the_largest_multiple_at_or_below_the_boundary(boundary: int) -> None:
    device = FakeDevice(fits_up_to=boundary)
    found = find_largest_batch(device.trial, SearchLimits(start=8, limit=512, max_trials=20))
    assert found.batch == boundary // 8 * 8
    assert found.stopped == "boundary found"
    assert all(t.batch % 8 == 0 and 8 <= t.batch <= 512 for t in found.trials)


def test_it_doubles_then_bisects() -> None:
    device = FakeDevice(fits_up_to=200)
    found = find_largest_batch(device.trial, SearchLimits(start=8, limit=1024, max_trials=20))
    assert device.tried == [8, 16, 32, 64, 128, 256, 192, 224, 208, 200]
    assert [t.verdict for t in found.trials][-5:] == [
        "out of memory", "fits", "out of memory", "out of memory", "fits"
    ]  # fmt: skip
    assert found.batch == 200


def test_a_limit_that_fits_ends_the_search_there() -> None:
    device = FakeDevice(fits_up_to=10_000)
    found = find_largest_batch(device.trial, SearchLimits(start=64, limit=2048))
    assert device.tried == [64, 128, 256, 512, 1024, 2048]
    assert (found.batch, found.stopped) == (2048, "limit fits")


def test_a_limit_between_doublings_is_tried_itself() -> None:
    device = FakeDevice(fits_up_to=10_000)
    found = find_largest_batch(device.trial, SearchLimits(start=8, limit=40))
    assert device.tried == [8, 16, 32, 40]
    assert found.batch == 40


def test_a_peak_over_the_headroom_does_not_fit() -> None:
    # Every size runs; 1% of the device a sample passes 90% above 90 samples.
    device = FakeDevice(fits_up_to=10_000, per_sample=0.01)
    found = find_largest_batch(device.trial, SearchLimits(start=8, limit=512, headroom=0.9))
    assert found.batch == 88
    over = [t for t in found.trials if t.verdict == "over headroom"]
    assert over
    assert all(t.peak_fraction is not None and t.peak_fraction > 0.9 for t in over)
    assert max(t.batch for t in found.trials if t.fits) == 88


@pytest.mark.parametrize("max_trials", [1, 2, 3, 5, 7, 9])
def test_the_trials_are_bounded_and_the_answer_always_fitted(max_trials: int) -> None:
    device = FakeDevice(fits_up_to=300)
    limits = SearchLimits(start=8, limit=1024, max_trials=max_trials)
    found = find_largest_batch(device.trial, limits)
    assert len(device.tried) == len(found.trials) <= max_trials
    assert found.batch <= 300
    assert any(t.batch == found.batch and t.fits for t in found.trials)
    assert found.batch == max(t.batch for t in found.trials if t.fits)
    # 9 trials: the doublings to 512 (7) and two bisections still leave a gap wider than 8.
    assert found.stopped == "trials used up"


@settings(max_examples=300, deadline=None)
@given(
    multiple=st.sampled_from([1, 2, 8, 32]),
    start_units=st.integers(1, 16),
    span_units=st.integers(0, 300),
    boundary=st.integers(0, 12_000),
    max_trials=st.integers(1, 30),
)
def test_any_search_reports_a_size_that_fitted_within_its_bounds(
    multiple: int, start_units: int, span_units: int, boundary: int, max_trials: int
) -> None:
    start = multiple * start_units
    limits = SearchLimits(start, start + multiple * span_units, multiple, max_trials)
    device = FakeDevice(fits_up_to=boundary)
    if boundary < start:
        with pytest.raises(NoBatchFits):
            find_largest_batch(device.trial, limits)
        return
    found = find_largest_batch(device.trial, limits)
    assert len(found.trials) <= max_trials
    assert all(t.batch % multiple == 0 and start <= t.batch <= limits.limit for t in found.trials)
    assert start <= found.batch <= min(boundary, limits.limit)
    assert any(t.batch == found.batch and t.fits for t in found.trials)
    if found.stopped != "trials used up":
        # The largest multiple of the granularity that fits, up to the limit.
        assert found.batch == min(boundary // multiple * multiple, limits.limit)


def test_a_granularity_of_one_finds_the_exact_boundary() -> None:
    device = FakeDevice(fits_up_to=77)
    found = find_largest_batch(
        device.trial, SearchLimits(start=1, limit=128, multiple=1, max_trials=14)
    )
    assert found.batch == 77
    assert found.stopped == "boundary found"


def test_a_start_that_does_not_fit_is_an_error_naming_the_flag() -> None:
    device = FakeDevice(fits_up_to=4)
    with pytest.raises(NoBatchFits, match=r"batch 8 does not fit \(out of memory\).*flag"):
        find_largest_batch(device.trial, SearchLimits(start=8, limit=64))
    assert device.tried == [8]


def test_an_error_that_is_not_out_of_memory_passes_through() -> None:
    def broken(batch: int) -> float:
        raise RuntimeError("Input type (float) and bias type (c10::BFloat16) should be the same")

    with pytest.raises(RuntimeError, match="bias type"):
        find_largest_batch(broken, SearchLimits(start=8, limit=64))


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (torch.OutOfMemoryError("anything"), True),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
        (MemoryError(), False),  # the host's memory: not the device's batch limit
    ],
)
def test_only_torchs_out_of_memory_error_counts(err: BaseException, expected: bool) -> None:
    assert is_out_of_memory(err) is expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"start": 12, "limit": 64}, "start 12: give a multiple of 8"),
        ({"start": 0, "limit": 64, "multiple": 1}, "start 0"),
        ({"start": 64, "limit": 32}, "limit 32: give a multiple of 8 of at least the start"),
        ({"start": 8, "limit": 100}, "limit 100"),
        ({"start": 8, "limit": 64, "max_trials": 0}, "max_trials 0"),
        ({"start": 8, "limit": 64, "headroom": 1.5}, "headroom 1.5"),
        ({"start": 8, "limit": 64, "multiple": 0}, "multiple 0"),
    ],
)
def test_limits_are_checked(arguments: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchLimits(**arguments)  # type: ignore[arg-type]


def test_the_choice_says_how_the_batch_was_chosen_and_survives_the_json() -> None:
    device = FakeDevice(fits_up_to=200)
    found = find_largest_batch(device.trial, SearchLimits(start=8, limit=512))
    searched = BatchChoice(found.batch, "searched", found)
    assert searched.describe() == f"searched: largest fitting up to 512, {len(found.trials)} trials"
    assert searched_from_record(searched.record()) == found
    given = BatchChoice(96, "given", flag="--gpu-gpt-batch-size")
    assert given.describe() == "given by --gpu-gpt-batch-size"
    assert given.record() == {
        "batch": 96, "how": "given", "text": "given by --gpu-gpt-batch-size",
        "flag": "--gpu-gpt-batch-size",
    }  # fmt: skip
    cut = find_largest_batch(device.trial, SearchLimits(start=8, limit=1024, max_trials=3))
    assert "a larger batch may fit" in BatchChoice(cut.batch, "searched", cut).describe()


def test_a_flag_wins_and_the_cpu_keeps_its_fixed_batch() -> None:
    size = gpu.SIZES["gpu"]["gpt"]
    flag = gpu.BATCH_FLAGS["gpt"]
    chosen = gpu.choose_batch("gpt", size, "cuda", given=48, flag=flag)
    assert chosen == BatchChoice(48, "given", flag=flag)
    dry = gpu.SIZES["dry-run"]["gpt"]
    chosen = gpu.choose_batch("gpt", dry, "cpu", given=None, flag=flag)
    assert chosen == BatchChoice(dry["batch"], "fixed")


def test_the_batch_flags_reach_the_parts() -> None:
    ns = bench.parse_args(["--parts", "gpu", "--gpu-gpt-batch-size", "64"])
    assert (ns.gpu_gpt_batch_size, ns.gpu_resnet_batch_size) == (64, None)
    runbook = gpu_runbook.parse_args(["--dry-run", "--resnet-batch-size", "512"])
    assert runbook.batches == {"resnet": 512, "gpt": None}


@pytest.mark.parametrize(
    ("parse", "argv"),
    [
        (bench.parse_args, ["--gpu-resnet-batch-size", "0"]),
        (gpu_runbook.parse_args, ["--dry-run", "--gpt-batch-size", "-8"]),
    ],
)
def test_a_batch_below_one_is_refused(
    parse: Callable[[list[str]], object], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    assert "give a batch of 1 or more" in capsys.readouterr().err


def test_the_probe_steps_the_trainer_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    """The torch side's plumbing (its task, step and result line): on the CPU nothing runs
    out of memory, so the search climbs to its limit."""
    argv = ["gpt", "--size", "tiny", "--start", "2", "--limit", "4", "--multiple", "2"]
    assert batch_probe.main([*argv, "--device", "cpu"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    record = json.loads(line.removeprefix("RESULT "))
    assert [t["batch"] for t in record["search"]["trials"]] == [2, 4]
    assert record["batch"] == 4
