"""`ddpimg sbatch` as a user runs it: a subprocess with a real environment (no Slurm needed;
submitting to a real cluster is in tests/integration/test_sbatch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BASE = {
    k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "DDPIMG_"))
}
JOB = ["--nodes", "2", "--time", "60"]


def ddpimg(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddpimg", "sbatch", *args],
        env=BASE | (env or {}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_renders_to_stdout() -> None:
    proc = ddpimg("--site", "della", *JOB, "--", "train", "mnist")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash\n")
    assert "#SBATCH --ntasks-per-node=2\n" in proc.stdout
    assert "train mnist --site della" in proc.stdout
    assert proc.stderr == ""


def test_writes_the_script_file_and_prints_warnings(tmp_path: Path) -> None:
    out = tmp_path / "job.sh"
    proc = ddpimg("--site", "della", "--nodes", "2", "-o", str(out), "--", "train")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert out.read_text().startswith("#!/bin/bash\n")
    assert proc.stderr.startswith("ddpimg: warning: no time limit given")
    assert "\n  hint: pass --time" in proc.stderr


def test_job_file_with_flags_over_it(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text(
        'site = "puhti"\nnodes = 2\ntime = "01:00:00"\npartition = "gputest"\n'
        'command = ["train", "toy"]\n'
    )
    proc = ddpimg("--config", str(config), "--partition", "gpu", "--allow-retired")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --partition=gpu\n" in proc.stdout
    assert "#SBATCH --gres=gpu:v100:4\n" in proc.stdout  # from the site the file names
    assert "train toy --site puhti" in proc.stdout


def test_site_from_ddpimg_site() -> None:
    proc = ddpimg(*JOB, "--", "train", env={"DDPIMG_SITE": "roihu"})
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --gres=gpu:gh200:4\n" in proc.stdout


def test_a_retired_site_exits_2_naming_its_successor() -> None:
    proc = ddpimg(*JOB, "--", "train", env={"DDPIMG_SITE": "mahti"})
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("ddpimg: error: site mahti is retired: ")
    assert "hint: use --site roihu; --allow-retired renders it anyway" in proc.stderr
    proc = ddpimg(*JOB, "--allow-retired", "--", "train", env={"DDPIMG_SITE": "mahti"})
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --gres=gpu:a100:4\n" in proc.stdout
    assert "ddpimg: warning: site mahti is retired" in proc.stderr


def test_errors_exit_2_and_render_nothing() -> None:
    proc = ddpimg("--site", "hdfml", *JOB, "--ntasks-per-node", "1", "--", "torchrun", "x.py")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("ddpimg: error: 2 problems with this job:\n")


def test_submit_refuses_a_missing_image(tmp_path: Path) -> None:
    proc = ddpimg("--site", "hdfml", *JOB, "--submit", "--", "train", cwd=tmp_path)
    assert proc.returncode == 2
    assert (
        f"ddpimg: error: image file ddp-cu128.sif does not exist (from {tmp_path})" in proc.stderr
    )


def test_submit_without_sbatch_on_path(tmp_path: Path) -> None:
    proc = ddpimg(
        "--site", "local", "--nodes", "1", "--time", "60", "--runtime", "none",
        "--gpu-request", "none", "--submit",
        "--", "train", env={"PATH": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 2
    assert "ddpimg: error: --submit: sbatch is not on PATH" in proc.stderr


def test_help_lists_every_job_flag() -> None:
    proc = ddpimg("--help")
    assert proc.returncode == 0
    flags = ["--gpus-per-node", "--gpu-request", "--launch", "--runtime", "--bind",
             "--signal-seconds", "--max-restarts", "--sbatch-option", "--script-file"]  # fmt: skip
    assert [flag for flag in flags if flag not in proc.stdout] == []


def test_an_existing_script_file_is_replaced_only_with_force(tmp_path: Path) -> None:
    out = tmp_path / "job.sh"
    out.write_text("my own job\n")
    proc = ddpimg("--site", "della", *JOB, "-o", str(out), "--", "train")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"ddpimg: error: -o {out}: a file is there already")
    assert out.read_text() == "my own job\n"
    proc = ddpimg("--site", "della", *JOB, "-o", str(out), "--force", "--", "train")
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("#!/bin/bash\n")
