"""A full disk during a checkpoint keeps the contract: one ``ddpimg: error:``, the temporary
folder removed, the last good checkpoint intact, manifest.json finalised with the exit
status the process returns; once there is room, the same command continues from that
checkpoint and ends where an uninterrupted run ends.

The disk is a tmpfs of 2,200 KiB mounted for the test (root only): a checkpoint of this
tiny GPT takes 1.5 MB, so the first (step 2) fits and the second (step 4) does not.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpimg.train.checkpoint.files import CHECKPOINTS, verify
from tests.integration.runs import command, run, train_losses

GPT = [
    "gpt", "--size", "tiny", "--seq-len", "16", "--global-batch-size", "8",
    "--train-samples", "256", "--eval-samples", "8", "--epochs", "1", "--data", "synthetic",
    "--seed", "5", "--deterministic", "--log-every", "1", "--max-steps", "6",
    "--checkpoint-every", "2",
]  # fmt: skip
SMALL = "2200k"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.torchrun
def test_a_full_disk_at_a_checkpoint_keeps_the_last_one_and_says_so(
    small_disk: Path, tmp_path: Path, run_env: dict[str, str]
) -> None:
    out = small_disk / "run"
    cmd = [command("train"), *GPT, "--out", str(out)]
    failed = run(cmd, run_env, check=False)
    errors = [line for line in failed.stderr.splitlines() if line.startswith("ddpimg: error:")]
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert len(errors) == 1, failed.stderr[-3000:]
    assert f"checkpoint {out / CHECKPOINTS}/step-00000004 could not be written" in errors[0]
    # torch.save reports no errno; the message says how much room there was.
    assert "bytes free on its file system" in errors[0]
    assert "Traceback" not in failed.stderr
    # The removed temporary folder gave its room back: the manifest could be finalised.
    assert "could not be finalised" not in failed.stderr
    assert sorted(path.name for path in (out / CHECKPOINTS).iterdir()) == ["step-00000002"]
    assert verify(out / CHECKPOINTS / "step-00000002") is None
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_status"]) == ("failed", 2)

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = run(cmd, run_env)
    assert f"resuming from {out / CHECKPOINTS}/step-00000002" in resumed.stderr
    reference = tmp_path / "reference"
    run([command("train"), *GPT, "--out", str(reference)], run_env)
    # --deterministic on the CPU: a resumed run repeats the uninterrupted one bitwise.
    assert train_losses(out) == train_losses(reference)
    final = json.loads((out / "manifest.json").read_text())
    assert (final["status"], final["exit_status"]) == ("completed", 0)
