"""``--resume auto|PATH|none`` in a 1-rank world: which checkpoint, warnings and errors."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.batch import BatchLayout
from ddpimg.train.checkpoint import Resume, resolve_resume
from ddpimg.train.checkpoint.files import (
    CHECKPOINTS,
    checkpoint_name,
    publish,
    staging_name,
    write_marker,
)
from ddpimg.train.checkpoint.state import CheckpointRecord, LoopState, fingerprint
from ddpimg.train.config import TrainConfig
from ddpimg.train.tasks import arguments_json


def resolve(config: TrainConfig, ctx: DistContext, stream: io.StringIO) -> Resume | None:
    """``resolve_resume`` of ``config`` in ``ctx`` (a model without BatchNorm)."""
    batch = BatchLayout.of(config, ctx.world_size)
    return resolve_resume(config, ctx, batch, stream, {})


def save_record(config: TrainConfig, step: int, root: Path | None = None) -> Path:
    """A checkpoint of ``config`` (1 rank, DDP) with only loop.json besides the marker: the
    choice of a checkpoint reads nothing else."""
    root = root or config.out / CHECKPOINTS
    staging = root / staging_name(step)
    staging.mkdir(parents=True)
    batch = BatchLayout.of(config, 1)
    record = CheckpointRecord(
        loop=LoopState(step=step, epoch=1, index=step, epoch_done=False),
        world_size=1,
        global_batch=batch.global_size,
        strategy="ddp",
        fingerprint=fingerprint(config, batch, {}),
        metrics_lines=step,
        reason="interval",
        saved_utc="2024-06-01T00:00:00Z",
    )
    (staging / "loop.json").write_text(json.dumps(record.to_json()))
    write_marker(staging, step)
    publish(staging, root / checkpoint_name(step))
    return root / checkpoint_name(step)


def truncate_marker(path: Path) -> None:
    (path / "complete.json").write_text("{")


@pytest.fixture
def config(make_config: Callable[..., TrainConfig], tmp_path: Path) -> TrainConfig:
    return make_config(out=tmp_path / "run")


def test_fresh_out_starts_silently(ctx: DistContext, config: TrainConfig) -> None:
    stream = io.StringIO()
    assert resolve(config, ctx, stream) is None
    assert stream.getvalue() == ""
    # The check that every rank sees --out leaves nothing behind.
    assert list((config.out / CHECKPOINTS).iterdir()) == []


def test_auto_takes_the_newest_valid_and_names_each_skipped(
    ctx: DistContext, config: TrainConfig
) -> None:
    for step in (2, 4, 6, 8):
        save_record(config, step)
    root = config.out / CHECKPOINTS
    truncate_marker(root / "step-00000008")
    size = (root / "step-00000006" / "loop.json").stat().st_size
    (root / "step-00000006" / "loop.json").write_text("{}")
    stream = io.StringIO()
    resume = resolve(config, ctx, stream)
    assert resume is not None
    assert resume.path == root / "step-00000004"
    assert resume.record.loop.step == 4
    assert resume.in_out
    assert stream.getvalue().splitlines() == [
        f"ddpimg: warning: skipping checkpoint {root}/step-00000008: complete.json is "
        "unreadable (not JSON (Expecting property name enclosed in double quotes at line 1, "
        "column 2))",
        f"ddpimg: warning: skipping checkpoint {root}/step-00000006: loop.json has 2 bytes, "
        f"complete.json says {size} (truncated?)",
        f"ddpimg: resuming from {root}/step-00000004 (epoch 1, step 4)",
    ]


def test_auto_with_only_invalid_checkpoints_starts_over(
    ctx: DistContext, config: TrainConfig
) -> None:
    truncate_marker(save_record(config, 2))
    stream = io.StringIO()
    assert resolve(config, ctx, stream) is None
    assert "skipping checkpoint" in stream.getvalue()


def test_path_takes_that_checkpoint_even_if_older(ctx: DistContext, config: TrainConfig) -> None:
    older = save_record(config, 2)
    save_record(config, 4)
    resume = resolve(replace(config, resume=str(older)), ctx, io.StringIO())
    assert resume is not None
    assert (resume.path, resume.in_out) == (older, True)


def test_path_outside_out_does_not_keep_metrics(
    ctx: DistContext, config: TrainConfig, tmp_path: Path
) -> None:
    foreign = save_record(config, 2, root=tmp_path / "other")
    resume = resolve(replace(config, resume=str(foreign)), ctx, io.StringIO())
    assert resume is not None
    assert not resume.in_out


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("absent", r"does not exist"),
        ("empty", r"has no complete.json \(the save did not finish, or this is not a checkpoint"),
        ("damaged marker", r"complete.json is unreadable"),
    ],
)
def test_invalid_path_is_an_error_naming_it(
    ctx: DistContext, config: TrainConfig, state: str, reason: str
) -> None:
    path = config.out / CHECKPOINTS / "step-00000002"
    if state == "empty":
        path.mkdir(parents=True)
    if state == "damaged marker":
        truncate_marker(save_record(config, 2))
    with pytest.raises(DdpimgError, match=rf"--resume {path}: the checkpoint ") as err:
        resolve(replace(config, resume=str(path)), ctx, io.StringIO())
    assert err.match(reason)
    assert err.match(r"hint: give a checkpoint directory written by train")


def test_checkpoint_of_another_configuration_is_an_error(
    ctx: DistContext, config: TrainConfig
) -> None:
    save_record(config, 2)
    with pytest.raises(DdpimgError, match=r"belongs to another configuration; --lr: None in"):
        resolve(replace(config, lr=0.5), ctx, io.StringIO())


def test_none_removes_the_checkpoints_of_an_earlier_run(
    ctx: DistContext, config: TrainConfig
) -> None:
    save_record(config, 2)
    save_record(config, 4)
    stream = io.StringIO()
    assert resolve(replace(config, resume="none"), ctx, stream) is None
    root = config.out / CHECKPOINTS
    assert stream.getvalue() == (
        f"ddpimg: warning: --resume none: removing 2 checkpoint(s) of an earlier run in {root}\n"
    )
    assert list(root.iterdir()) == []


def write_manifest(config: TrainConfig, status: str, **changed: object) -> Path:
    """An earlier run of ``config`` with ``changed`` options, on one process as the tests'."""
    config.out.mkdir(parents=True, exist_ok=True)
    earlier = replace(config, **changed) if changed else config
    manifest = {
        "status": status,
        "arguments": arguments_json(earlier),
        "global_batch": BatchLayout.of(earlier, 1).global_size,
    }
    path = config.out / "manifest.json"
    path.write_text(json.dumps(manifest))
    (config.out / "metrics.jsonl").write_text('{"kind": "train"}\n')
    return path


@pytest.mark.parametrize(
    ("status", "changed", "described"),
    [
        ("completed", {}, "a completed run"),
        ("failed", {"lr": 0.5}, "a failed run of other options"),
        ("running", {"trainer": "toy"}, "a running run of other options"),
        # The batch options are free to change on resume, the global batch they make is not.
        ("failed", {"batch_size": 16}, "a failed run of other options"),
    ],
)
def test_an_earlier_run_without_checkpoints_is_not_replaced(
    ctx: DistContext,
    config: TrainConfig,
    status: str,
    changed: dict[str, object],
    described: str,
) -> None:
    manifest = write_manifest(config, status, **changed)
    before = manifest.read_text()
    with pytest.raises(DdpimgError, match=rf"--out .* holds {described} \(") as caught:
        resolve(config, ctx, io.StringIO())
    assert "--resume none" in str(caught.value.hint)
    assert manifest.read_text() == before


def test_the_same_options_that_ended_before_a_checkpoint_start_over(
    ctx: DistContext, config: TrainConfig
) -> None:
    """A job requeued before its first checkpoint: same options (only free ones differ)."""
    write_manifest(config, "failed", epochs=config.epochs + 3, log_every=7)
    stream = io.StringIO()
    assert resolve(config, ctx, stream) is None
    assert "ended (failed) before its first checkpoint; starting it over" in stream.getvalue()
    # --resume none says so explicitly.
    write_manifest(config, "completed")
    assert resolve(replace(config, resume="none"), ctx, io.StringIO()) is None


@pytest.mark.parametrize(
    ("marker", "reason"),
    [
        ('{"format": 1, "files": ' + "[" * 100_000, r"JSON nested more than 64 levels deep"),
        ('{"format": 1, "step": ' + "9" * 5000 + "}", r"a number of 5,000 digits"),
        (
            '{"format": 1, "step": 8, "files": {"../../../etc/passwd": {"size": 1, "sha256": ""}}}',
            r"lists '../../../etc/passwd', a file outside the checkpoint",
        ),
    ],
)
def test_auto_skips_a_marker_beyond_bounds(
    ctx: DistContext, config: TrainConfig, marker: str, reason: str
) -> None:
    """A complete.json nested 100,000 deep or with a 5,000-digit number crashed --resume
    auto (a RecursionError, a ValueError) instead of skipping that checkpoint."""
    for step in (4, 8):
        save_record(config, step)
    newest = config.out / CHECKPOINTS / "step-00000008"
    (newest / "complete.json").write_text(marker)
    stream = io.StringIO()
    resume = resolve(config, ctx, stream)
    assert resume is not None
    assert resume.path.name == "step-00000004"
    assert re.search(rf"skipping checkpoint {newest}: .*{reason}", stream.getvalue())


def test_a_loop_json_beyond_bounds_is_named(ctx: DistContext, config: TrainConfig) -> None:
    path = save_record(config, 4)
    (path / "loop.json").write_text('{"loop": {"step": ' + "9" * 5000 + "}}")
    write_marker(path, 4)
    with pytest.raises(DdpimgError, match=r"cannot read loop.json \(a number of 5,000 digits"):
        resolve(config, ctx, io.StringIO())


@pytest.mark.parametrize("name", ["checkpoints", "tensorboard", "metrics.jsonl"])
def test_a_run_entry_linked_out_of_out_is_refused(
    ctx: DistContext, config: TrainConfig, tmp_path: Path, name: str
) -> None:
    """A run directory handed over with ``checkpoints -> ~/elsewhere``: every rank would
    write its checkpoint files there (and --resume none remove them). Refused on every
    rank (rank 0 decides and tells the others), nothing written there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config.out.mkdir(parents=True)
    (config.out / name).symlink_to(elsewhere)
    with pytest.raises(DdpimgError, match=rf"run/{name} is a link to .*elsewhere, outside"):
        resolve(config, ctx, io.StringIO())
    assert list(elsewhere.iterdir()) == []
