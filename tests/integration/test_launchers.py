"""`train` under every real launcher gives the per-step losses of one process.

Topology invariance is the product's promise: with the same seed and global batch the loss
trajectory does not depend on how many processes there are or who started them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.runs import (
    QUICK_TRAIN,
    check_run,
    command,
    run,
)


@pytest.mark.torchrun
def test_nproc_per_node_matches_one_process(
    tmp_path: Path, run_env: dict[str, str], reference: list[float]
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [command("train"), *QUICK_TRAIN, "--nproc-per-node", "2", "--out", str(tmp_path / "run")]
    run(cmd, run_env | {"TMPDIR": str(tmp)})
    check_run(tmp_path / "run", reference, world_size=2)
    # The launcher's log directories are gone (torch's own default leaves one per launch).
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith(("torchelastic_", "ddpimg-")))
    assert left == []


@pytest.mark.torchrun
def test_torchrun_cli_matches_one_process(
    tmp_path: Path, run_env: dict[str, str], reference: list[float]
) -> None:
    cmd = [command("torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "ddpimg", "train"]
    run([*cmd, *QUICK_TRAIN, "--out", str(tmp_path)], run_env)
    check_run(tmp_path, reference, world_size=2)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["run_info"]["source"] == "torchrun"


@pytest.mark.slurm
def test_srun_matches_one_process(
    tmp_path: Path, slurm_env: dict[str, str], reference: list[float]
) -> None:
    run(["srun", "-n", "2", command("train"), *QUICK_TRAIN, "--out", str(tmp_path)], slurm_env)
    check_run(tmp_path, reference, world_size=2)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["run_info"]["source"] == "slurm"


@pytest.mark.mpi
def test_mpirun_matches_one_process(
    tmp_path: Path, run_env: dict[str, str], reference: list[float]
) -> None:
    cmd = ["mpirun", "-np", "2", command("train"), *QUICK_TRAIN, "--out", str(tmp_path)]
    run(cmd, run_env)
    check_run(tmp_path, reference, world_size=2)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["run_info"]["source"] == "openmpi"
    assert manifest["run_info"]["master_addr"], "rank 0 should have published its address"


@pytest.mark.slurm
@pytest.mark.mpi
def test_srun_pmix_resolves_ranks(
    tmp_path: Path, slurm_env: dict[str, str], slurm_cluster: object
) -> None:
    if "pmix" not in getattr(slurm_cluster, "mpi_plugins", ()):
        pytest.skip("this Slurm has no pmix plugin (srun --mpi=list)")
    out = tmp_path / "env-%t.json"
    cmd = ["srun", "--mpi=pmix", "-n", "2", f"--output={out}", command("ddpimg"), "env", "--json"]
    run(cmd, slurm_env)
    docs = [json.loads((tmp_path / f"env-{t}.json").read_text()) for t in (0, 1)]
    assert [d["source"] for d in docs] == ["pmix", "pmix"]
    assert [d["rank"] for d in docs] == [0, 1]


@pytest.mark.mpi
@pytest.mark.deepspeed
def test_deepspeed_under_mpirun_matches_ddp(
    tmp_path: Path, run_env: dict[str, str], reference: list[float]
) -> None:
    cmd = [
        "mpirun", "-np", "2", command("train"), *QUICK_TRAIN, "--strategy", "deepspeed",
        "--zero-stage", "1", "--out", str(tmp_path),
    ]  # fmt: skip
    run(cmd, run_env, timeout=600)
    check_run(tmp_path, reference, world_size=2)
