"""What the training process inherits: ranks under srun, a module-free environment, the
batch-script guard, and a user's own script run with the resolved variables."""

from __future__ import annotations

import json
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from ddpimg import exitcodes
from tests.integration.runs import QUICK_TRAIN, command, run, summary


@pytest.mark.slurm
def test_env_under_srun_gives_each_task_its_rank(tmp_path: Path, slurm_env: dict[str, str]) -> None:
    out = tmp_path / "env-%t.json"
    run(["srun", "-n", "2", f"--output={out}", command("ddpimg"), "env", "--json"], slurm_env)
    docs = [json.loads((tmp_path / f"env-{t}.json").read_text()) for t in (0, 1)]
    assert [d["rank"] for d in docs] == [0, 1]
    assert {d["source"] for d in docs} == {"slurm"}
    assert {d["world_size"] for d in docs} == {2}
    assert [d["local_rank"] for d in docs] == [0, 1]
    # Every rank must agree on where to meet, without talking to each other.
    assert len({(d["master_addr"], d["master_port"]) for d in docs}) == 1
    assert docs[0]["master_addr"] == socket.gethostname().split(".")[0]
    assert docs[0]["env"]["RANK"] == "0"
    assert docs[1]["env"]["RANK"] == "1"


@pytest.mark.slurm
def test_train_started_once_in_multi_task_batch_script_says_use_srun(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    log = tmp_path / "job.log"
    wrap = f"{command('train')} {' '.join(QUICK_TRAIN)} --out {tmp_path / 'out'}"
    proc = run(
        ["sbatch", "--wait", "-n", "2", f"--output={log}", f"--wrap={wrap}"],
        slurm_env,
        check=False,
        timeout=180,
    )
    assert proc.returncode == exitcodes.USAGE, log.read_text()
    text = log.read_text()
    assert "ddpimg: error:" in text
    assert "SLURM_NTASKS=2" in text
    assert "srun" in text
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


@pytest.fixture
def polluted_env(tmp_path: Path, run_env: dict[str, str]) -> dict[str, str]:
    """A host shell after `module load` and `conda activate`: a PYTHONPATH whose `torch`
    raises on import and an LD_LIBRARY_PATH of junk."""
    fake = tmp_path / "hostpy" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ImportError('host torch from PYTHONPATH was imported')\n"
    )
    junk = tmp_path / "junklib"
    junk.mkdir()
    # Libraries torch links against but the Python interpreter does not: the first, torch-free
    # interpreter survives them, a training interpreter that kept them would not.
    for name in ("libstdc++.so.6", "libgomp.so.1"):
        (junk / name).write_text("not a library")
    return run_env | {
        "PYTHONPATH": str(fake.parent),
        "LD_LIBRARY_PATH": str(junk),
        "LOADEDMODULES": "gcc/12:cuda/11.8:python/3.9",
        "MODULEPATH": "/appl/modulefiles",
        "CONDA_PREFIX": "/home/user/miniconda3/envs/old",
        "CONDA_DEFAULT_ENV": "old",
    }


@pytest.mark.torchrun
def test_polluted_environment_really_breaks_torch(polluted_env: dict[str, str]) -> None:
    """The control: without ddpimg's cleaning, this environment cannot import torch."""
    proc = run([sys.executable, "-c", "import torch"], polluted_env, check=False)
    assert proc.returncode != 0
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        alone = run_env_without_others(polluted_env, name)
        assert run([sys.executable, "-c", "import torch"], alone, check=False).returncode != 0, name


def run_env_without_others(env: dict[str, str], keep: str) -> dict[str, str]:
    other = {"PYTHONPATH", "LD_LIBRARY_PATH"} - {keep}
    return {k: v for k, v in env.items() if k not in other}


@pytest.mark.torchrun
def test_host_modules_do_not_leak_into_training(
    tmp_path: Path, polluted_env: dict[str, str]
) -> None:
    proc = run([command("ddpimg"), "env", "--json"], polluted_env)
    removed = json.loads(proc.stdout)["removed"]
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "LOADEDMODULES", "MODULEPATH", "CONDA_PREFIX"):
        assert name in removed
    out = tmp_path / "out"
    run([command("train"), *QUICK_TRAIN, "--max-steps", "2", "--out", str(out)], polluted_env)
    assert summary(out)["steps"] == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert "PYTHONPATH" in manifest["run_info"]["removed"]


SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # env:// — the variables ddpimg exported
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    seen = {k: os.environ[k] for k in keys}
    seen["sum"] = t.item()
    seen["argv"] = sys.argv[1:]
    with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(seen, f)
    dist.destroy_process_group()
    """
)


@pytest.mark.slurm
def test_plain_ddp_script_runs_unchanged_under_srun(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    script = tmp_path / "plain_ddp.py"
    script.write_text(SCRIPT)
    run(
        ["srun", "-n", "2", command("train"), "--script", str(script), str(tmp_path), "--flag"],
        slurm_env,
    )
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["RANK"] for s in seen] == ["0", "1"]
    assert {s["WORLD_SIZE"] for s in seen} == {"2"}
    assert {s["sum"] for s in seen} == {3.0}
    assert seen[0]["argv"] == [str(tmp_path), "--flag"]
