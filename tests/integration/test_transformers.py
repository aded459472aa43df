"""The CSC tutorial's third benchmark, Hugging Face Transformers fine-tuning a GPT-2
(``scripts/hf_clm.py``, run_clm.py's steps: a tokenizer, a text file grouped into blocks,
transformers' Trainer), under ``train --script`` with 2 ranks and the launchers the
tutorials use: torchrun's (``--nproc-per-node``) and DeepSpeed's own launcher with
``--deepspeed ds_config.json``. Every rank must see the launch's rank and world size, the
Trainer must train distributed (one process group, gradients averaged: the ranks end with
the same weights), and the losses must be those of the same run under the other launcher.
(A Trainer script under ``mpirun``: tests/integration/test_scripts.py's hf-mpirun cell, in
run_clm.py's shape, against torchrun's trajectory. Under ``srun`` a script gets the variables
torch's launcher gives, which is all the Trainer reads: test_environment.py's plain DDP script
under ``srun -n 2``; the Trainer under ``srun -n 2`` ran here too until 2026-11-27, with the
same losses as under torchrun, to the last bit.)

Tolerances (tests.noise): the same 2-rank run under another launcher, and ZeRO-1 against DDP,
sums in the same order; measured on this machine, every loss was equal to the last bit
(difference 0.0 under srun, mpirun and DeepSpeed's launcher), so the comparison allows 10
float32 rounding steps (QUICK_TOLERANCE's measure, over the 4 steps). The ranks' weights
after the run are compared bitwise: gradient averaging gives every rank the same update.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runs import command, free_port, run
from tests.noise import FLOAT32_STEP, Tolerance, assert_within

SCRIPT = Path(__file__).parent / "scripts" / "hf_clm.py"
WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "then", "dog", "ran", "to", "hall")
SAME_SUMS = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=4)
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "train_batch_size": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_optimization": {"stage": 1},
}


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import random

    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) for _ in range(400)]
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def reports(out: Path, deepspeed: bool = False) -> list[dict[str, Any]]:
    found = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [(r["rank"], r["world_size"]) for r in found] == [(0, 2), (1, 2)]
    assert [(r["process_index"], r["trainer_world_size"]) for r in found] == [(0, 2), (1, 2)]
    assert all(r["distributed"] for r in found)
    assert {r["deepspeed"] for r in found} == {deepspeed}
    assert found[0]["checksum"] == found[1]["checksum"], "ranks ended with different weights"
    assert len(found[0]["losses"]) == 4
    return found


def script(text: Path, out: Path) -> list[str]:
    return ["--script", str(SCRIPT), str(text), str(out)]


@pytest.fixture(scope="module")
def torchrun_losses(
    tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str], text: Path
) -> list[float]:
    out = tmp_path_factory.mktemp("torchrun")
    run([command("train"), "--nproc-per-node", "2", *script(text, out)], run_env)
    return list(reports(out)[0]["losses"])


@pytest.mark.torchrun
def test_nproc_per_node(torchrun_losses: list[float]) -> None:
    assert torchrun_losses[-1] < torchrun_losses[0]


@pytest.mark.deepspeed
def test_deepspeed_launcher_with_a_deepspeed_config(
    tmp_path: Path, deepspeed_env: dict[str, str], text: Path, torchrun_losses: list[float]
) -> None:
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps(DS_CONFIG))
    port = free_port()
    launcher = [command("deepspeed"), "--num_gpus", "2", "--master_port", str(port)]
    cmd = [*launcher, command("train"), *script(text, tmp_path / "out")]
    run([*cmd, "--deepspeed", str(config), "--save-steps", "4"], deepspeed_env, timeout=600)
    found = reports(tmp_path / "out", deepspeed=True)
    # ZeRO-1 over the same global batch: DDP's trajectory.
    assert_within(found[0]["losses"], torchrun_losses, SAME_SUMS, "ZeRO-1 vs DDP")
    # DeepSpeed's CPU all-reduce segments (69 MB a rank) do not outlive the script
    # (ddpimg.runtime.deepspeed_shm, released as the script ends).
    left = sorted(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
    assert not left, f"left in /dev/shm: {[path.name for path in left]}"

    # The Trainer's ZeRO-1 checkpoint of 2 ranks, resumed on 1: DeepSpeed refuses it, and
    # the script stops with ddpimg's one line naming both world sizes, not DeepSpeed's
    # traceback (ddpimg.script.library_errors).
    checkpoint = tmp_path / "out" / "trainer" / "checkpoint-4"
    resume = [*script(text, tmp_path / "resumed"), "--deepspeed", str(config), "--steps", "6"]
    again = run(
        [command("train"), *resume, "--resume", str(checkpoint)],
        deepspeed_env, timeout=600, check=False,
    )  # fmt: skip
    assert again.returncode == 2, again.stderr[-3000:]
    errors = [line for line in again.stderr.splitlines() if line.startswith("ddpimg: error:")]
    assert errors == [
        "ddpimg: error: the DeepSpeed checkpoint this script resumes was written by 2 ranks "
        "and this run has 1: DeepSpeed does not repartition a ZeRO checkpoint's optimizer "
        "state on load"
    ]
    assert "hint: resume on 2 ranks, as many as wrote it" in again.stderr
    assert "Traceback" not in again.stderr
    assert "ZeRORuntimeException" not in again.stderr
