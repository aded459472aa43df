"""The largest batch that fits on the device, and how a benchmark's batch was chosen.

The search is pure: it is handed a trial, a function that runs one training step
(forward, backward, optimizer step) at a batch size and returns the peak memory it used as
a fraction of the device's memory, or raises torch's out-of-memory error. It doubles the
batch from ``start`` until a trial fails (or ``limit`` fits), then bisects between the last
size that fitted and the first that did not, down to ``multiple`` (tensor cores want
multiples of 8). A size that ran but whose peak passed ``headroom`` counts as not fitting:
the benchmark's own run holds a little more than one bare step (DDP's gradient buckets, the
allocator's fragmentation, the evaluation), and a size at the edge would fail there. At most
``max_trials`` trials run; the answer is always a size whose trial fitted.

benchmarks/batch_probe.py is the torch side (the trial on a GPU); nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# The error torch raises when the caching allocator cannot find the memory (a RuntimeError
# subclass since torch 2.1; older builds raise a bare RuntimeError with the same message).
OOM_CLASS_NAME = "OutOfMemoryError"
OOM_MESSAGE = "CUDA out of memory"

Stop = Literal["limit fits", "boundary found", "trials used up"]
Verdict = Literal["fits", "out of memory", "over headroom"]


@dataclass(frozen=True)
class SearchLimits:
    """Where the search starts and ends: sizes are multiples of ``multiple`` from ``start``
    to ``limit``, at most ``max_trials`` trials, a peak of at most ``headroom`` of the
    device's memory."""

    start: int
    limit: int
    multiple: int = 8
    max_trials: int = 12
    headroom: float = 0.9

    def __post_init__(self) -> None:
        if self.multiple < 1:
            raise ValueError(f"multiple {self.multiple}: give 1 or more")
        if self.start < self.multiple or self.start % self.multiple:
            raise ValueError(f"start {self.start}: give a multiple of {self.multiple}")
        if self.limit < self.start or self.limit % self.multiple:
            raise ValueError(
                f"limit {self.limit}: give a multiple of {self.multiple} of at least "
                f"the start, {self.start}"
            )
        if self.max_trials < 1:
            raise ValueError(f"max_trials {self.max_trials}: give 1 or more")
        if not 0.0 < self.headroom <= 1.0:
            raise ValueError(f"headroom {self.headroom}: give a fraction in (0, 1]")

    def describe(self) -> str:
        return (
            f"multiples of {self.multiple} from {self.start} to {self.limit}, peak at most "
            f"{100 * self.headroom:.0f}% of the device's memory, at most {self.max_trials} "
            "trials"
        )


@dataclass(frozen=True)
class Trial:
    """One trial: the size, what it found, and its peak memory fraction when it ran."""

    batch: int
    verdict: Verdict
    peak_fraction: float | None = None

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"


@dataclass(frozen=True)
class Searched:
    """What a search found: ``batch``, the largest size that fitted, and every trial."""

    batch: int
    limits: SearchLimits
    trials: tuple[Trial, ...]
    stopped: Stop


class NoBatchFits(RuntimeError):
    """Even the search's first size did not fit."""


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is torch's out-of-memory error (the class, or the message torch
    builds without it)."""
    return type(err).__name__ == OOM_CLASS_NAME or OOM_MESSAGE in str(err)


def _try(trial: Callable[[int], float], batch: int, headroom: float) -> Trial:
    try:
        peak = trial(batch)
    except Exception as err:
        if not is_out_of_memory(err):
            raise  # a broken step is not a size that does not fit
        return Trial(batch, "out of memory")
    return Trial(batch, "fits" if peak <= headroom else "over headroom", peak)


def find_largest_batch(trial: Callable[[int], float], limits: SearchLimits) -> Searched:
    """The largest multiple of ``limits.multiple`` in ``[start, limit]`` whose ``trial``
    fitted: doubling from ``start``, then bisecting. Raises ``NoBatchFits`` when ``start``
    does not fit; any error of ``trial`` that is not out-of-memory passes through."""
    trials: list[Trial] = []

    def attempt(batch: int) -> bool:
        trials.append(_try(trial, batch, limits.headroom))
        return trials[-1].fits

    if not attempt(limits.start):
        found = trials[0]
        raise NoBatchFits(
            f"batch {limits.start} does not fit ({found.verdict}"
            + ("" if found.peak_fraction is None else f", peak {100 * found.peak_fraction:.0f}%")
            + "): nothing smaller is searched; give a batch with the benchmark's flag"
        )
    fitted, failed = limits.start, None
    while fitted < limits.limit and len(trials) < limits.max_trials:
        batch = min(2 * fitted, limits.limit)
        if not attempt(batch):
            failed = batch
            break
        fitted = batch
    if failed is None:
        return Searched(
            fitted,
            limits,
            tuple(trials),
            "limit fits" if fitted == limits.limit else "trials used up",
        )
    while failed - fitted > limits.multiple and len(trials) < limits.max_trials:
        middle = fitted + (failed - fitted) // (2 * limits.multiple) * limits.multiple
        if attempt(middle):
            fitted = middle
        else:
            failed = middle
    stopped: Stop = "boundary found" if failed - fitted <= limits.multiple else "trials used up"
    return Searched(fitted, limits, tuple(trials), stopped)


@dataclass(frozen=True)
class BatchChoice:
    """The batch a benchmark ran with and how it was chosen: ``given`` by a flag,
    ``searched`` on the device, or ``fixed`` (the CPU's toy size, where nothing is
    searched)."""

    batch: int
    how: Literal["given", "searched", "fixed"]
    searched: Searched | None = None
    flag: str = ""

    def describe(self) -> str:
        """How the batch was chosen, for the table (the batch itself is written beside)."""
        if self.how == "given":
            return f"given by {self.flag}" if self.flag else "given"
        if self.searched is None:
            return "fixed: no GPU to search on"
        found = self.searched
        trials = len(found.trials)
        text = f"searched: largest fitting up to {found.limits.limit}, {trials} trials"
        if found.stopped == "trials used up":
            text += " (all used before the boundary: a larger batch may fit)"
        return text

    def record(self) -> dict[str, Any]:
        """The JSON record: the batch, how, and a search's limits and trials."""
        record: dict[str, Any] = {"batch": self.batch, "how": self.how, "text": self.describe()}
        if self.flag:
            record["flag"] = self.flag
        if self.searched is not None:
            limits = self.searched.limits
            record["search"] = {
                "start": limits.start,
                "limit": limits.limit,
                "multiple": limits.multiple,
                "max_trials": limits.max_trials,
                "headroom": limits.headroom,
                "stopped": self.searched.stopped,
                "trials": [
                    {"batch": t.batch, "verdict": t.verdict, "peak_fraction": t.peak_fraction}
                    for t in self.searched.trials
                ],
            }
        return record


def searched_from_record(record: dict[str, Any]) -> Searched:
    """A ``Searched`` back from ``BatchChoice.record()["search"]`` plus ``batch`` (how the
    probe's process hands its result to the benchmark's)."""
    search = record["search"]
    limits = SearchLimits(
        start=int(search["start"]),
        limit=int(search["limit"]),
        multiple=int(search["multiple"]),
        max_trials=int(search["max_trials"]),
        headroom=float(search["headroom"]),
    )
    trials = tuple(
        Trial(int(t["batch"]), t["verdict"], t["peak_fraction"]) for t in search["trials"]
    )
    return Searched(int(record["batch"]), limits, trials, search["stopped"])
