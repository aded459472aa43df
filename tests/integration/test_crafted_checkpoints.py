"""A checkpoint someone hands a user cannot run code on the user's account.

Each test takes a real ``train gpt`` checkpoint, plants a pickle that would create a marker
file when unpickled into one of the files ddpimg (or DeepSpeed, or torch.distributed.
checkpoint, on ddpimg's behalf) reads, and rewrites ``complete.json`` to match, as an
attacker would: the checksums vouch for the files, not for their author. Then the user's
command runs: ``train`` resuming (``--resume auto``, the default) under DeepSpeed and FSDP,
and ``ddpimg export`` of every checkpoint kind. The command must stop with exit status 2
and "not a checkpoint ddpimg can load safely" naming the file, and the marker must never
appear. ``test_the_planted_files_would_run_code`` is the control: the same planted files,
loaded as the libraries load them, do create their marker.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, step_of, write_marker
from ddpimg.train.checkpoint.safeload import REFUSED
from tests.integration.runs import command, run
from tests.train.checkpoint.planted import (
    plant_pickle,
    plant_torch_file,
    unrestricted_load_runs_code,
)

GPT = [
    "gpt", "--size", "tiny", "--seq-len", "16", "--global-batch-size", "8",
    "--train-samples", "64", "--eval-samples", "8", "--epochs", "1", "--max-steps", "2",
    "--data", "synthetic", "--seed", "5",
]  # fmt: skip
STRATEGIES = {
    "ddp": ["--strategy", "ddp"],
    "fsdp": ["--strategy", "fsdp"],
    "zero1": ["--strategy", "deepspeed", "--zero-stage", "1"],
}
# The file of each checkpoint kind that gets the planted pickle: the one the loader opens
# first (FSDP's metadata) or the one only DeepSpeed's own code would unpickle (ZeRO's
# optimizer states, read by zero_to_fp32 on export and by the checkpoint engine on resume).
# No ZeRO-0 cell (run here until 2026-11-27): its one file, the model states, goes through
# the same two gates as ZeRO-1's files, on resume the checkpoint engine ddpimg puts in
# DeepSpeed's place (which reads ZeRO-1's model states first, then the planted optimizer
# states) and on export deepspeed_files.check_files (every file of the checkpoint, before
# any is read); ZeRO-0's checkpoint is exported by test_trainers.py's gpt-zero0 cell.
PLANTED = {
    "ddp": "ddp/model.pt",
    "fsdp": "fsdp/.metadata",
    "zero1": "deepspeed/engine/zero_pp_rank_0_mp_rank_00_optim_states.pt",
}


class Runs:
    """One finished 2-step run per strategy, made on first use and copied for each test."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.made: dict[str, Path] = {}

    def fresh(self, strategy: str, tmp: Path) -> Path:
        if strategy not in self.made:
            out = self.root / strategy
            run([command("train"), *GPT, *STRATEGIES[strategy], "--out", str(out)], self.env)
            self.made[strategy] = out
        copy = tmp / "run"
        shutil.copytree(self.made[strategy], copy)
        return copy


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, deepspeed_env: dict[str, str]) -> Runs:
    return Runs(tmp_path_factory.mktemp("crafted"), deepspeed_env)


def plant(out: Path, strategy: str, marker: Path) -> Path:
    """Plant the pickle into the newest checkpoint of ``out`` and re-sign its marker file;
    returns the planted file."""
    (checkpoint,) = candidates(out / CHECKPOINTS)
    target = checkpoint / PLANTED[strategy]
    assert target.is_file(), f"{target} is not in the checkpoint: {sorted(checkpoint.rglob('*'))}"
    if target.name == ".metadata":
        plant_pickle(target, marker)
    else:
        plant_torch_file(target, marker)
    write_marker(checkpoint, step_of(checkpoint) or 0)
    return target


def assert_refused(proc_returncode: int, stderr: str, planted: Path, marker: Path) -> None:
    assert not marker.exists(), f"the planted pickle ran: {marker} exists\n{stderr[-3000:]}"
    assert proc_returncode == 2, stderr[-3000:]
    assert f"ddpimg: error: {planted}: {REFUSED}" in stderr, stderr[-3000:]


@pytest.mark.parametrize("torch_format", [True, False], ids=["torch-save", "pickle"])
def test_the_planted_files_would_run_code(tmp_path: Path, torch_format: bool) -> None:
    assert unrestricted_load_runs_code(tmp_path, torch_format)


@pytest.mark.torchrun
@pytest.mark.parametrize(
    "strategy",
    [
        "ddp",
        "fsdp",
        pytest.param("zero1", marks=pytest.mark.deepspeed),
    ],
)
def test_resume_refuses_a_planted_checkpoint(runs: Runs, tmp_path: Path, strategy: str) -> None:
    out = runs.fresh(strategy, tmp_path)
    marker = tmp_path / "marker"
    planted = plant(out, strategy, marker)
    # One more step than the run made: --resume auto (the default) picks the checkpoint.
    proc = run(
        [command("train"), *GPT, "--max-steps", "3", *STRATEGIES[strategy], "--out", str(out)],
        runs.env,
        check=False,
    )
    assert_refused(proc.returncode, proc.stderr, planted, marker)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_status"]) == ("failed", 2)


@pytest.mark.torchrun
@pytest.mark.parametrize(
    "strategy",
    [
        "ddp",
        "fsdp",
        pytest.param("zero1", marks=pytest.mark.deepspeed),
    ],
)
def test_export_refuses_a_planted_checkpoint(runs: Runs, tmp_path: Path, strategy: str) -> None:
    out = runs.fresh(strategy, tmp_path)
    marker = tmp_path / "marker"
    planted = plant(out, strategy, marker)
    target = tmp_path / "hf"
    proc = run([command("ddpimg"), "export", str(out), str(target)], runs.env, check=False)
    assert_refused(proc.returncode, proc.stderr, planted, marker)
    assert not target.exists()
