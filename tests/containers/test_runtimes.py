"""The step `ddpimg sbatch --runtime docker` renders, run for real with the image (`nox -s
smoke`): a 1-node job of two CPU ranks (``--site local --gpu-request none``) whose step's
command, from the task prelude on, runs once per rank with the variables `srun` gives each
task, in the job's working directory, the way srun would: the runtime's line, its
environment passing and its binds are the ones users get. The two ranks' losses must match
one process's (tests/integration/runs.py's QUICK_TOLERANCE).

The podman-hpc step runs as a real two-node job under sbatch with a site's own image
(tests/multinode/test_site_image.py), not here with ddpimg's: loading this 6.5 GB image into
podman's store (docker save, podman-hpc load) cost the test command about 2.5 CPU-minutes
for a line the same renderer writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.containers.test_smoke import docker_env, slurm_step
from tests.integration.runs import QUICK_TOLERANCE, QUICK_TRAIN, run, train_losses
from tests.noise import assert_within

pytestmark = pytest.mark.docker

RANKS = 2
STEP_TIMEOUT_S = 300


def render(runtime: str, image: str, workdir: Path) -> str:
    """The batch script of a 1-node job of RANKS CPU ranks under ``runtime``."""
    proc = run(
        [sys.executable, "-m", "ddpimg", "sbatch", "--site", "local", "--runtime", runtime,
         "--image", image, "--gpu-request", "none", "--nodes", "1", "--gpus-per-node",
         str(RANKS), "--time", "10", "--", "train", *QUICK_TRAIN],
        docker_env(),
        cwd=workdir,
    )  # fmt: skip
    return proc.stdout


def step_command(script: str) -> str:
    """The training step's command as the script writes it, from the task prelude on: what
    srun starts in each task (continuations joined, the trailing `&` dropped)."""
    joined = script.replace("\\\n", " ")
    line = next(line for line in joined.splitlines() if line.startswith("srun "))
    command = line[line.index("bash -c ") :].rstrip()
    assert command.endswith(" &"), line
    return command.removesuffix(" &")


def run_step(command: str, env: dict[str, str], workdir: Path, job_id: str) -> list[str]:
    """Start ``command`` once per rank with that task's Slurm variables; their outputs."""
    ranks = [
        subprocess.Popen(
            ["bash", "-c", command],
            cwd=workdir,
            env=env | slurm_step(rank, job_id),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(RANKS)
    ]
    outputs = [proc.communicate(timeout=STEP_TIMEOUT_S)[0] for proc in ranks]
    for rank, (proc, output) in enumerate(zip(ranks, outputs, strict=True)):
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}:\n{output[-4000:]}"
    return outputs


@pytest.fixture(scope="module")
def reference(image: str, tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """One process's losses (one plain docker container)."""
    out = tmp_path_factory.mktemp("reference")
    out.chmod(0o777)
    run(["docker", "run", "--rm", "--volume", f"{out}:/out", image, "train", "--site", "local",
         *QUICK_TRAIN, "--out", "/out/run"], docker_env(), timeout=STEP_TIMEOUT_S)  # fmt: skip
    return train_losses(out / "run")


def check_two_ranks(workdir: Path, job_id: str, reference: list[float]) -> None:
    run_dir = workdir / "runs" / job_id
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["distributed"]["world_size"] == RANKS
    assert manifest["run_info"]["source"] == "slurm"
    assert_within(train_losses(run_dir), reference, QUICK_TOLERANCE, "2 ranks vs 1 process")


def test_rendered_docker_step_runs_two_ranks(
    image: str, tmp_path: Path, reference: list[float]
) -> None:
    command = step_command(render("docker", image, tmp_path))
    assert " docker run --rm --network=host" in command
    job_id = str(41000 + os.getpid() % 10000)
    outputs = run_step(command, docker_env(), tmp_path, job_id)
    assert "ddpimg: task 1 (node 0, local 1) on " in outputs[1]
    check_two_ranks(tmp_path, job_id, reference)
