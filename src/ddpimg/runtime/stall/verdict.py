"""Who the others were waiting for, judged from the ranks' progress records, and the one
message a surviving rank prints about it. Pure: records in, words out.

A rank is lost when it

- ``failed``: it published its own error before it exited;
- went ``silent``: its last report is older than ``stale_after`` (its process is stopped,
  dead, or its node is gone);
- is ``unknown``: it never reported at all;
- is ``behind``: nobody failed or went silent, but it still reports from an earlier point
  of the run (a lower ``seq``) than the others: alive, and stuck there.

Every other rank was waiting. With nobody lost, the collective itself failed while every
rank was at the same point: the network is the suspect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ddpimg.runtime.stall.record import ProgressRecord

How = Literal["failed", "silent", "unknown", "behind"]
# Groups of lost ranks spelled out in a message; the rest are counted.
MAX_GROUPS = 8


@dataclass(frozen=True)
class LostRank:
    rank: int
    how: How
    host: str = ""
    pid: int = 0
    step: int | None = None
    phase: str = ""
    last_heard: float | None = None  # wall time of its last report
    since: float | None = None  # wall time it entered ``phase``
    error: str = ""


@dataclass(frozen=True)
class Verdict:
    """The judgement, shared through the store so that every survivor names the same ranks.
    ``store``: the address of a rendezvous store that did not answer (nothing could be
    read; then ``lost`` is empty)."""

    judged_by: int
    judged_at: float
    lost: tuple[LostRank, ...] = ()
    waiting: tuple[int, ...] = ()
    store: str = ""
    store_timeout_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        lost = tuple(LostRank(**item) for item in data.get("lost", ()))
        return cls(**{**data, "lost": lost, "waiting": tuple(data.get("waiting", ()))})

    @property
    def raised(self) -> bool:
        """Whether every rank named failed by an error of its own (none went silent, never
        reported or stayed behind, and the store answered): a failed run, not a lost rank."""
        return bool(self.lost) and all(lost.how == "failed" for lost in self.lost)

    @property
    def hosts(self) -> list[str]:
        """The hosts of the lost ranks, in rank order, each once."""
        return list(dict.fromkeys(lost.host for lost in self.lost if lost.host))


def judge(
    records: Mapping[int, ProgressRecord | None],
    world_size: int,
    now: float,
    stale_after: float,
    judged_by: int,
) -> Verdict:
    """The verdict on ``records`` (rank -> its last record, None if it never reported)."""
    lost: list[LostRank] = []
    alive: list[ProgressRecord] = []
    for rank in range(world_size):
        record = records.get(rank)
        if record is None:
            lost.append(LostRank(rank, "unknown"))
        elif record.state == "failed":
            lost.append(_lost(record, "failed"))
        elif record.state == "running" and now - record.beat > stale_after:
            lost.append(_lost(record, "silent"))
        else:
            alive.append(record)
    running = [record for record in alive if record.state == "running"]
    if not lost and running:
        lowest = min(record.seq for record in running)
        if any(record.seq > lowest for record in running):
            lost = [_lost(record, "behind") for record in running if record.seq == lowest]
    named = {item.rank for item in lost}
    waiting = tuple(rank for rank in range(world_size) if rank not in named)
    return Verdict(judged_by, now, tuple(lost), waiting)


def _lost(record: ProgressRecord, how: How) -> LostRank:
    return LostRank(
        rank=record.rank,
        how=how,
        host=record.host,
        pid=record.pid,
        step=record.step,
        phase=record.phase,
        last_heard=record.beat,
        since=record.since,
        error=record.error,
    )


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = previous = None
    for rank in [*ordered, None]:
        if rank is not None and previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    return ", ".join(parts)


def _ranks(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)}"


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.0f} s"


@dataclass
class _Group:
    first: LostRank
    ranks: list[int] = field(default_factory=list)
    latest: float | None = None  # the most recent report in the group


def _groups(lost: Sequence[LostRank]) -> list[_Group]:
    """Lost ranks that read the same (same host, step, phase, way of being lost), together."""
    groups: dict[tuple[object, ...], _Group] = {}
    for item in lost:
        key = (item.how, item.host, item.step, item.phase, item.error)
        group = groups.setdefault(key, _Group(item))
        group.ranks.append(item.rank)
        if item.last_heard is not None:
            group.latest = max(group.latest or item.last_heard, item.last_heard)
    return list(groups.values())


def _describe_group(group: _Group, now: float) -> str:
    item = group.first
    who = _ranks(group.ranks)
    if item.how == "unknown":
        return f"{who} never reported (host unknown)"
    where = f"host {item.host}" + (f", pid {item.pid}" if len(group.ranks) == 1 else "")
    at = f"at step {item.step} in phase {item.phase}"
    if item.how == "failed":
        return f"{who} ({where}) failed {at}: {item.error}"
    if item.how == "behind":
        stuck = _seconds(now - item.since) if item.since is not None else "a while"
        return f"{who} ({where}) still reports, but is stuck {at} for {stuck}"
    ago = _seconds(now - group.latest) if group.latest is not None else "long"
    # Reports come once a heartbeat: the rank may have gone a few steps further.
    last = f"last report: step {item.step}, phase {item.phase}"
    return f"{who} ({where}) stopped reporting {ago} ago ({last})"


def describe_lost(verdict: Verdict, now: float) -> str:
    """Who was lost and how (``now``: the reader's wall time, for "how long ago")."""
    if verdict.store:
        return (
            f"the rendezvous store at {verdict.store} did not answer within "
            f"{verdict.store_timeout_s:g} s: the process serving it (rank 0, or torchrun's "
            "agent on the first node) is stopped or dead, or its node is unreachable"
        )
    if not verdict.lost:
        return "every rank still reports, all at the same point: the collective itself failed"
    groups = _groups(verdict.lost)
    parts = [_describe_group(group, now) for group in groups[:MAX_GROUPS]]
    if len(groups) > MAX_GROUPS:
        more = sum(len(group.ranks) for group in groups[MAX_GROUPS:])
        parts.append(f"and {more} more ranks")
    return "; ".join(parts)


def _hint(verdict: Verdict, script: bool = False) -> str:
    if script:
        resume = "then run the same command again (a Trainer resumes from its newest checkpoint)"
        fewer = "on the remaining nodes if it is gone"
    else:
        resume = "then run again with --resume auto"
        fewer = "on the remaining nodes if it is gone: keep --global-batch-size"
    if verdict.store:
        host = verdict.store.rpartition(":")[0]
        return (
            f"look at {host} (rank 0's log; dmesg: GPU Xid errors, the out-of-memory killer, "
            f"hung I/O); {resume} ({fewer})"
        )
    if not verdict.lost:
        return (
            "suspect the network between the nodes: `srun ddpimg doctor` measures each node's "
            f"links against the site's floor; {resume}"
        )
    first = verdict.lost[0]
    hosts = ", ".join(verdict.hosts) or "the host of that rank"
    if first.how == "failed":
        return f"the failing rank's own error is in its log (on {hosts}); fix it, {resume}"
    if first.how == "behind":
        return (
            f"the process is alive but stuck: `py-spy dump --pid {first.pid}` on {first.host} "
            f"shows where (a hung file-system read, a deadlock); {resume}"
        )
    return (
        f"look at {hosts} (that rank's log; dmesg: GPU Xid errors, the out-of-memory "
        f"killer, hung I/O); {resume} ({fewer})"
    )


def describe(
    verdict: Verdict,
    *,
    observer: int,
    host: str,
    step: int,
    cause: str,
    now: float,
    checkpoint: tuple[str, int] | None,
    flight_recorder: str | None = None,
    script: bool = False,
) -> tuple[str, str]:
    """The message of the surviving rank ``observer`` and its hint. ``cause``: what ended
    its wait (the backend's error, or no progress); ``checkpoint``: the last one this run
    wrote or resumed from; ``flight_recorder``: NCCL's dump directory; ``script``: a user's
    script, which may have written checkpoints nobody told the watch of, and continues by
    the same command."""
    lost = describe_lost(verdict, now)
    waiting = [rank for rank in verdict.waiting if rank != observer]
    if verdict.lost and waiting:
        lost += f"; also waiting: {_ranks(waiting)}"
    parts = [lost]
    if checkpoint is None and script:
        parts.append("no checkpoint known to ddpimg (the script's own are not tracked)")
    elif checkpoint is None:
        parts.append("no checkpoint written yet (a rerun starts over)")
    else:
        parts.append(f"last valid checkpoint: {checkpoint[0]} (step {checkpoint[1]})")
    if flight_recorder:
        parts.append(
            f"NCCL flight recorder dumps: {flight_recorder}/rank_<N> (read them with "
            f"`torchfrtrace {flight_recorder}`)"
        )
    message = f"rank {observer} ({host}) gave up at step {step} ({cause}): " + "; ".join(parts)
    return message, _hint(verdict, script)
