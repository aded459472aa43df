"""The launch lines of the origin tutorials run ``train`` unchanged, each under the real
launcher, 2 ranks on the CPU, and give one process's losses (docs/launchers.md "Coming from a
tutorial"). The two-node helper-script pattern is in tests/multinode/test_tutorial_launchers.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.runs import (
    PYTHON,
    QUICK_TRAIN,
    check_run,
    command,
    free_port,
    run,
    run_info,
)

SCRIPTS = Path(__file__).parent / "scripts"


def torch_distributed_launch(port: int) -> list[str]:
    """The old launcher, as the Palmetto and Della tutorials write it (no --use-env)."""
    return [
        PYTHON, "-m", "torch.distributed.launch", "--nproc_per_node", "2", "--nnodes", "1",
        "--node_rank", "0", "--master_addr", "127.0.0.1", "--master_port", str(port),
    ]  # fmt: skip


@pytest.mark.torchrun
def test_torch_distributed_launch_passes_local_rank_and_matches_one_process(
    tmp_path: Path, run_env: dict[str, str], reference: list[float]
) -> None:
    cmd = [*torch_distributed_launch(free_port()), command("train"), *QUICK_TRAIN]
    run([*cmd, "--out", str(tmp_path)], run_env)
    check_run(tmp_path, reference, world_size=2)
    assert run_info(tmp_path)["source"] == "torchrun"


@pytest.mark.torchrun
def test_torch_distributed_launch_passes_local_rank_on_to_a_script(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    script = [command("train"), "--script", str(SCRIPTS / "legacy_local_rank.py")]
    run([*torch_distributed_launch(free_port()), *script, "--out", str(tmp_path)], run_env)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert reports == [{"local_rank": 0, "sum": 3.0}, {"local_rank": 1, "sum": 3.0}]


def deepspeed_launcher(port: int) -> list[str]:
    return [command("deepspeed"), "--num_gpus", "2", "--master_port", str(port)]


@pytest.mark.slurm
@pytest.mark.deepspeed
def test_deepspeed_launcher_inside_one_srun_task(
    tmp_path: Path,
    deepspeed_env: dict[str, str],
    slurm_env: dict[str, str],
    reference: list[float],
) -> None:
    """CSC's pattern, `srun ... deepspeed train.py --deepspeed`, in its documented form
    (docs/launchers.md): `--module ddpimg train`, no path of train for the host's shell to
    look up (a container's), and `--no_local_rank`, LOCAL_RANK from the environment. The step
    has 1 task, the launcher inside it 2 workers: the workers' variables win over the step's.
    DeepSpeed's launcher exports RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK,
    CROSS_SIZE, MASTER_ADDR, MASTER_PORT: the env:// source. (The `--local_rank=N` it passes
    without `--no_local_rank` reaches `train` in test_transformers.py's DeepSpeed launcher
    test; the same line in the image: tests/containers/test_documented_commands.py.)"""
    env = slurm_env | {"TORCH_EXTENSIONS_DIR": deepspeed_env["TORCH_EXTENSIONS_DIR"]}
    port = free_port()
    module = ["--no_local_rank", "--module", "ddpimg", "train", "--strategy", "deepspeed"]
    cmd = ["srun", "-N1", "-n1", *deepspeed_launcher(port), *module]
    run([*cmd, *QUICK_TRAIN, "--out", str(tmp_path)], env, timeout=600)
    check_run(tmp_path, reference, world_size=2)
    assert run_info(tmp_path)["source"] == "env"
    assert run_info(tmp_path)["local_world_size"] == 2
    # DeepSpeed's CPU all-reduce segments (69 MB a rank) do not outlive the run
    # (ddpimg.runtime.deepspeed_shm).
    left = sorted(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
    assert not left, f"left in /dev/shm: {[path.name for path in left]}"


@pytest.mark.slurm
@pytest.mark.deepspeed
def test_deepspeed_with_ranks_from_the_slurm_step(
    tmp_path: Path,
    deepspeed_env: dict[str, str],
    slurm_env: dict[str, str],
    reference: list[float],
) -> None:
    # CSC's other pattern: `srun --ntasks-per-node=4 python train.py --deepspeed`, ranks from
    # the step (the tutorial's DeepSpeed took its master from `hostname -I`; ddpimg's rule).
    env = slurm_env | {"TORCH_EXTENSIONS_DIR": deepspeed_env["TORCH_EXTENSIONS_DIR"]}
    cmd = ["srun", "-N1", "--ntasks-per-node=2", command("train"), "--strategy", "deepspeed"]
    run([*cmd, *QUICK_TRAIN, "--out", str(tmp_path)], env, timeout=600)
    check_run(tmp_path, reference, world_size=2)
    assert run_info(tmp_path)["source"] == "slurm"


@pytest.mark.slurm
@pytest.mark.torchrun
def test_torchrun_with_a_c10d_endpoint_inside_one_srun_task(
    tmp_path: Path, slurm_env: dict[str, str], reference: list[float]
) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    cmd = [
        "srun", "-N1", "-n1", command("torchrun"), "--nnodes", "1", "--nproc_per_node", "2",
        "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, command("train"),
    ]  # fmt: skip
    run([*cmd, *QUICK_TRAIN, "--out", str(tmp_path)], slurm_env)
    check_run(tmp_path, reference, world_size=2)
    assert run_info(tmp_path)["source"] == "torchrun"


@pytest.mark.slurm
def test_srun_after_a_batch_shell_exported_port_and_world_size(
    tmp_path: Path, slurm_env: dict[str, str], reference: list[float]
) -> None:
    # Della's batch script: export MASTER_PORT=... WORLD_SIZE=... then `srun python ...`.
    port = free_port()
    env = slurm_env | {"MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    run(["srun", "-n", "2", command("train"), *QUICK_TRAIN, "--out", str(tmp_path)], env)
    check_run(tmp_path, reference, world_size=2)
    info = run_info(tmp_path)
    assert (info["source"], info["master_port"]) == ("slurm", port)


@pytest.mark.mpi
def test_a_script_that_uses_mpi_itself_runs_under_mpirun(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    # No host list under mpirun: rank 0 publishes its address over MPI from the script's
    # own process, so the script's MPI_Init still finds its rank free.
    cmd = ["mpirun", "-np", "2", command("train"), "--script", str(SCRIPTS / "mpi_user.py")]
    run([*cmd, str(tmp_path)], run_env)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, report in enumerate(reports):
        assert (report["mpi_rank"], report["rank"]) == (rank, rank)
        assert (report["mpi_size"], report["world_size"]) == (2, 2)
        assert (report["sum"], report["mpi_sum"]) == (3.0, 3)
    assert reports[0]["master_addr"] == reports[1]["master_addr"] != ""


@pytest.mark.torchrun
def test_doctor_starts_local_workers_as_train_does(tmp_path: Path, run_env: dict[str, str]) -> None:
    cmd = [command("ddpimg"), "doctor", "--nproc-per-node", "2", "--json"]
    proc = run(cmd, run_env | {"TMPDIR": str(tmp_path)})
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert [row["rank"] for row in report["rows"]] == [0, 1]
    assert [row["local_world_size"] for row in report["rows"]] == [2, 2]
    assert "all-reduce: correct" in proc.stdout
