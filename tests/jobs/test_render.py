"""The rendered script: directives, the step command line, quoting, preemption handling."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ddpimg.jobs import render_script
from tests.jobs.conftest import shipped, spec_for

PER_TASK = ("SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID")


def script_for(site: str = "puhti", **flags: Any) -> str:
    return render_script(spec_for(site, **flags), shipped(site))


def directives(script: str) -> list[str]:
    return [
        line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")
    ]


def step_words(script: str) -> list[str]:
    """The srun command line as bash splits it (continuations joined, `&` dropped)."""
    joined = script.replace("\\\n", " ")
    line = next(line for line in joined.splitlines() if line.startswith("srun "))
    words = shlex.split(line)
    assert words[-1] == "&"
    return words[:-1]


def after(words: list[str], marker: str) -> list[str]:
    return words[words.index(marker) + 1 :]


@pytest.mark.parametrize(
    ("site", "flags", "gpu_lines"),
    [
        ("puhti", {}, ["--gres=gpu:v100:4"]),
        ("juwels-booster", {}, ["--gres=gpu:4"]),
        ("perlmutter", {}, ["--gpus-per-node=4"]),
        ("perlmutter", {"gpu_type": "a100"}, ["--gpus-per-node=a100:4"]),
        ("puhti", {"gpu_request": "gpus-per-node", "gpus_per_node": 2}, ["--gpus-per-node=v100:2"]),
        ("local", {"gpu_request": "none", "gpus_per_node": 2}, []),
    ],
)
def test_gpus_are_requested_one_way_only(
    site: str, flags: dict[str, Any], gpu_lines: list[str]
) -> None:
    lines = directives(script_for(site, **flags))
    assert [line for line in lines if line.startswith(("--gres", "--gpus"))] == gpu_lines


@pytest.mark.parametrize(
    ("flags", "tasks", "cpus"),
    [({}, "4", "10"), ({"launch": "torchrun"}, "1", "40")],
)
def test_tasks_and_cpus_in_directives_and_step(
    flags: dict[str, Any], tasks: str, cpus: str
) -> None:
    script = script_for(**flags)
    lines = directives(script)
    assert f"--ntasks-per-node={tasks}" in lines
    assert f"--cpus-per-task={cpus}" in lines
    # srun is told again: since Slurm 22.05 it does not inherit --cpus-per-task.
    assert step_words(script)[:4] == ["srun", "--nodes=2", f"--ntasks-per-node={tasks}",
                                      f"--cpus-per-task={cpus}"]  # fmt: skip


def test_preemption_directives() -> None:
    lines = directives(script_for(signal_seconds=600, time="02:00:00"))
    for expected in ("--requeue", "--open-mode=append", "--signal=B:USR2@600",
                     "--output=%x-%j.out", "--time=02:00:00", "--partition=gpu"):  # fmt: skip
        assert expected in lines


def test_optional_directives_appear_only_when_set() -> None:
    plain = directives(script_for("perlmutter", time=None))
    assert not [line for line in plain if line.startswith(("--time", "--account", "--array",
                                                           "--partition"))]  # fmt: skip
    assert "--constraint=gpu" in plain
    full = directives(
        script_for(account="project_2001", array="0-3", sbatch_options=("--qos=high",))
    )
    assert {"--account=project_2001", "--array=0-3", "--output=%x-%A_%a.out", "--qos=high"} <= set(
        full
    )


def test_directives_come_before_any_command() -> None:
    # sbatch stops reading #SBATCH lines at the first command.
    lines = script_for().splitlines()
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    assert all(not line or line.startswith("#") for line in lines[: last_directive + 1])


def test_per_task_variables_are_expanded_only_in_the_tasks() -> None:
    script = script_for()
    outside_single_quotes = re.sub(r"'[^']*'", "''", script)
    for name in PER_TASK:
        assert name in script
        assert name not in outside_single_quotes, f"{name} would expand in the batch shell"
    words = step_words(script)
    prelude = after(words, "-c")[0]
    assert "${SLURM_NODEID}" in prelude  # literal: bash -c expands it inside each task
    assert prelude.endswith('exec "$@"')


def test_no_rendezvous_port_or_address_is_hard_coded() -> None:
    script = script_for()
    assert not re.search(r"MASTER_(ADDR|PORT)|rdzv|--master", script)


@pytest.mark.parametrize(
    ("flags", "runtime_words"),
    [
        # Puhti's V100s need the CUDA 12.8 flavour: its image by default
        ({}, ["apptainer", "exec", "--nv", "--bind", "/scratch,/projappl", "ddp-cu128.sif"]),
        ({"gpu_vendor": "amd", "image": "rocm.sif"},
         ["apptainer", "exec", "--rocm", "--bind", "/scratch,/projappl", "rocm.sif"]),
        ({"gpu_request": "none", "gpus_per_node": 4, "image": "a b.sif"},
         ["apptainer", "exec", "--bind", "/scratch,/projappl", "a b.sif"]),
        ({"runtime": "none"}, []),
    ],
)  # fmt: skip
def test_runtime_words(flags: dict[str, Any], runtime_words: list[str]) -> None:
    words = after(step_words(script_for(**flags)), "ddpimg-task")
    assert words[: words.index("train")] == runtime_words


def test_docker_passes_the_slurm_variables_and_the_working_directory() -> None:
    words = after(step_words(script_for(runtime="docker", image="ddpimg:gpu")), "ddpimg-task")
    head = words[: words.index("train")]
    assert head[:2] == ["docker", "run"]
    assert "--gpus=all" in head
    envs = {head[i + 1] for i, word in enumerate(head) if word == "--env"}
    assert {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_ID", "SLURM_JOB_ID",
            "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"} <= envs  # fmt: skip
    assert "--volume" in head
    assert "/scratch:/scratch" in head
    assert head[-1] == "ddpimg:gpu"
    cpu = after(
        step_words(script_for("local", runtime="docker", gpu_request="none")), "ddpimg-task"
    )
    assert "--gpus=all" not in cpu


def test_train_gets_site_run_directory_and_resume() -> None:
    words = after(step_words(script_for(command=("train", "mnist", "--out", "my runs/$HOME"))),
                  "ddp-cu128.sif")  # fmt: skip
    assert words == ["train", "mnist", "--out", "my runs/$HOME", "--site", "puhti",
                     "--resume", "auto"]  # fmt: skip
    default_out = after(step_words(script_for()), "--out")[0]
    assert default_out == "runs/${SLURM_JOB_ID}"  # job-level: expanded by the batch shell


def test_torchrun_launch_adds_the_workers_per_node() -> None:
    words = step_words(script_for(launch="torchrun"))
    assert after(words, "--nproc-per-node")[:1] == ["4"]


def test_requeue_is_array_aware_and_capped() -> None:
    script = script_for(max_restarts=5)
    assert "MAX_RESTARTS=5\n" in script
    assert "PREEMPTED=75\n" in script
    assert 'job="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' in script
    assert 'scontrol requeue "$job" && exit 0' in script
    assert 'if [ "$restarts" -ge "$MAX_RESTARTS" ]' in script
    assert "trap forward_usr2 USR2" in script
    assert 'kill -USR2 "$step_pid"' in script


def test_rendering_is_deterministic() -> None:
    assert script_for(binds=("/b", "/a")) == script_for(binds=("/b", "/a"))


@pytest.mark.parametrize("runtime", ["apptainer", "docker", "none"])
@pytest.mark.parametrize("launch", ["srun", "torchrun"])
def test_every_variant_is_valid_bash(tmp_path: Path, runtime: str, launch: str) -> None:
    path = tmp_path / "job.sh"
    path.write_text(script_for(runtime=runtime, launch=launch, array="0-1"))
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_a_sites_variables_are_unset_before_any_srun() -> None:
    """Palmetto's SLURM_MEM_PER_CPU / SLURM_MEM_PER_GPU (job.unset_env) would stop srun."""
    script = script_for("palmetto", launch="torchrun")
    unset = "\nunset SLURM_MEM_PER_CPU SLURM_MEM_PER_GPU\n"
    assert unset in script
    assert script.index(unset) < script.index("\nsrun ")
    assert "\nunset " not in script_for("roihu")


def test_a_partitions_note_is_written_above_its_line() -> None:
    lines = script_for("roihu").splitlines()
    at = lines.index("#SBATCH --partition=gpularge")
    assert lines[at - 2].startswith("# gpularge: needs the project's access to gpularge")
    assert "#SBATCH --partition=gpumedium" in script_for("roihu", partition="gpumedium", nodes=1)
    assert "# gpumedium" not in script_for("roihu", partition="gpumedium", nodes=1)
