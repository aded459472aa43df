"""A job of ``ddpimg sbatch`` running a user's Hugging Face Trainer script (in the shape of
run_clm.py) on two nodes of the namespace cluster: USR2 to the batch shell, as Slurm sends it
before the time limit (``--signal=B:USR2@...``), reaches the step, the Trainer writes a
checkpoint, both ranks exit 75, the job script requeues the job once, and the requeued job
resumes from that checkpoint and completes with the losses of a run never stopped (the same
script under ``train --nproc-per-node 2`` on this machine: the same global batch and
reduction order). Measured: every logged loss equal to the last bit, the sums of the final
weights 7.7e-9 apart (relative; Gloo over the namespaces' network against loopback), under
one float32 rounding step; both are compared within 10 of them (tests.noise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.hf_model import tiny_gpt2, write_text
from tests.integration.runs import command, run
from tests.integration.scripts_runtime import LAUNCHERS, MARKER, SCRIPTS, STEPS
from tests.integration.test_sbatch import job_info, release_requeued, wait_for_end, wait_until
from tests.multinode.conftest import SHORT_NAME_PROFILE, TIMEOUT_S
from tests.noise import FLOAT32_STEP, Tolerance, assert_within

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun]


def test_a_preempted_hf_trainer_job_requeues_itself_once_and_finishes(
    cluster_env: dict[str, str], run_env: dict[str, str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_text(data / "valid.txt", 40, seed=1)
    tiny_gpt2(data / "model", write_text(data / "train.txt", 400, seed=0))
    script = SCRIPTS["hf"]
    reference = tmp_path / "reference"
    reference.mkdir()
    cmd = [*LAUNCHERS["torchrun"].prefix(tmp_path), "--out", str(tmp_path / "reference-run")]
    run([*cmd, "--script", *script.args(data, reference, False)], run_env, timeout=300)

    output, out = tmp_path / "output", tmp_path / "run"
    output.mkdir()
    sbatch = [
        command("ddpimg"), "sbatch", "--site", str(SHORT_NAME_PROFILE), "--runtime", "none",
        "--gpu-request", "none", "--nodes", "2", "--gpus-per-node", "1", "--time", "10",
        "--submit", "--", "train", "--timeout", str(TIMEOUT_S), "--out", str(out),
        "--preempt-check-every", "2", "--script", *script.args(data, output, True),
    ]  # fmt: skip
    job_id = run(sbatch, cluster_env, cwd=tmp_path, timeout=60).stdout.strip()
    log = tmp_path / f"ddpimg-{job_id}.out"
    wait_until(f"{output}/step-{MARKER} exists", (output / f"step-{MARKER}").exists, 240)
    run(["scancel", "--signal=USR2", "--batch", job_id], cluster_env, timeout=30)
    release_requeued(job_id, cluster_env, restarts=1)
    info = wait_for_end(job_id, cluster_env, log)
    text = log.read_text()
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), text[-4000:]
    assert f"ddpimg: requeueing job {job_id} (restart 1 of 3)" in text
    assert "the same command continues the run" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["continues"]["status"] == "preempted"
    checkpoint = manifest["resumed_from"]["path"]
    assert checkpoint == manifest["continues"]["last_checkpoint"]["path"]
    assert Path(checkpoint).parent == output
    losses, wanted = script.losses(output), script.losses(reference)
    assert max(losses) == STEPS
    steps = sorted(losses)
    tolerance = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=STEPS)
    assert_within([losses[s] for s in steps], [wanted[s] for s in steps], tolerance, "losses")
    checksums = [script.checksum(output, rank) for rank in (0, 1)]
    expected = [script.checksum(reference, rank) for rank in (0, 1)]
    assert_within(checksums, expected, tolerance, "the final weights' sums")
    assert job_info(job_id, cluster_env)["Restarts"] == "1"
