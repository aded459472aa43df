"""Job resolution: precedence cell by cell, derived values, and value checks naming the layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpimg.jobs import JobError, JobFile, resolve_job
from ddpimg.jobs.resolve import flag_values, select_job_profile
from ddpimg.site import load_profile
from tests.jobs.conftest import TRAIN, shipped, spec_for


def job_file(values: dict[str, Any], path: str = "job.toml") -> JobFile:
    return JobFile(path, values)


# ---------------------------------------------------------------- precedence, cell by cell


@pytest.mark.parametrize(
    ("flags", "file", "expected", "source"),
    [
        ({}, {}, "gpu", "site puhti"),  # the profile's [job] partition
        ({}, {"partition": "gputest"}, "gputest", "job.toml"),  # file > profile
        ({"partition": "gpusmall"}, {"partition": "gputest"}, "gpusmall", "flag"),  # flag > file
        ({"partition": "gpusmall"}, {}, "gpusmall", "flag"),  # flag > profile
    ],
)
def test_partition_precedence(
    flags: dict[str, Any], file: dict[str, Any], expected: str, source: str
) -> None:
    spec = resolve_job(shipped("puhti"), {"nodes": 1, "command": TRAIN} | flags, job_file(file))
    assert spec.partition == expected
    assert spec.source("partition") == source


@pytest.mark.parametrize(
    ("flags", "file", "expected", "source"),
    [
        ({}, {}, 300, "default"),  # built-in default: no profile has it
        ({}, {"signal_seconds": 600}, 600, "job.toml"),
        ({"signal_seconds": 120}, {"signal_seconds": 600}, 120, "flag"),
    ],
)
def test_default_precedence(
    flags: dict[str, Any], file: dict[str, Any], expected: int, source: str
) -> None:
    spec = resolve_job(shipped("puhti"), {"nodes": 1} | flags, job_file(file))
    assert spec.signal_seconds == expected
    assert spec.source("signal_seconds") == source


def test_profile_value_equal_to_the_builtin_default_counts_as_default() -> None:
    # generic.toml has no [job]: cpus_per_task 1 is ddpimg's default, not the site's.
    spec = resolve_job(shipped("generic"), {"nodes": 1})
    assert (spec.cpus_per_task, spec.source("cpus_per_task")) == (1, "default")


def test_binds_add_up_over_every_layer_without_duplicates() -> None:
    spec = resolve_job(
        shipped("puhti"),
        {"nodes": 1, "binds": ("/data", "/scratch")},
        job_file({"binds": ["/models"]}),
    )
    assert spec.binds == ("/scratch", "/projappl", "/models", "/data")


def test_sbatch_options_add_up_file_then_flags() -> None:
    spec = resolve_job(
        shipped("puhti"),
        {"nodes": 1, "sbatch_options": ("--mail-type=END",)},
        job_file({"sbatch_options": ["--qos=normal"]}),
    )
    assert spec.sbatch_options == ("--qos=normal", "--mail-type=END")


def test_command_after_dashes_replaces_the_job_files() -> None:
    file = job_file({"command": ["train", "toy"]})
    assert resolve_job(shipped("puhti"), {"nodes": 1}, file).command == ("train", "toy")
    flags = {"nodes": 1, "command": ("train", "mnist")}
    assert resolve_job(shipped("puhti"), flags, file).command == ("train", "mnist")


@pytest.mark.parametrize(
    ("flag", "file", "env", "hostname", "expected"),
    [
        ("della", "puhti", {"DDPIMG_SITE": "mahti"}, "puhti-login1", ("della", "della")),
        (None, "puhti", {"DDPIMG_SITE": "mahti"}, "della-gpu", ("puhti", "puhti")),
        (None, None, {"DDPIMG_SITE": "mahti"}, "della-gpu", ("mahti", None)),
        (None, None, {}, "puhti-login1", ("puhti", None)),
        (None, None, {}, "laptop", ("generic", None)),
    ],
)
def test_site_precedence(
    flag: str | None,
    file: str | None,
    env: dict[str, str],
    hostname: str,
    expected: tuple[str, str | None],
) -> None:
    """--site > the job file's site > DDPIMG_SITE > auto-detection > generic; the site is
    passed on to train as the user named it, else as the profile's name."""
    jobs = job_file({"site": file}) if file else None
    chosen, site = select_job_profile(env, hostname, flag, jobs)
    assert (chosen.name, site) == expected


def test_site_named_by_path_is_passed_on_as_given(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[site]\nname = "mine"\n[job]\ngpus_per_node = 8\n')
    profile, site = select_job_profile({}, "laptop", str(path), None)
    spec = resolve_job(profile, {"nodes": 1}, site=site)
    assert (spec.site, spec.gpus_per_node) == (str(path), 8)


def test_unnamed_site_passes_on_the_profile_name() -> None:
    assert spec_for("della").site == "della"


# ---------------------------------------------------------------- derived values


@pytest.mark.parametrize(
    ("site", "flags", "tasks", "ranks", "cpus"),
    [
        ("puhti", {}, 4, 4, 10),  # one task per GPU
        ("puhti", {"launch": "torchrun"}, 1, 4, 40),  # one launcher task for 4 workers
        ("local", {"gpu_request": "none", "gpus_per_node": 2}, 2, 2, 1),  # G counts tasks
        ("local", {"gpu_request": "none"}, 1, 1, 1),  # nothing said: one task
        ("puhti", {"ntasks_per_node": 2}, 2, 2, 10),  # explicit (a check rejects it)
    ],
)
def test_task_layout(site: str, flags: dict[str, Any], tasks: int, ranks: int, cpus: int) -> None:
    spec = spec_for(site, **flags)
    assert (spec.ntasks_per_node, spec.ranks_per_node, spec.cpus_per_slurm_task) == (
        tasks,
        ranks,
        cpus,
    )


@pytest.mark.parametrize(
    ("flags", "output"),
    [({}, "%x-%j.out"), ({"array": "0-3"}, "%x-%A_%a.out"), ({"output": "logs/%j"}, "logs/%j")],
)
def test_output_pattern(flags: dict[str, Any], output: str) -> None:
    assert spec_for(**flags).output == output


@pytest.mark.parametrize(
    ("site", "flags", "image"),
    [
        # the site's [hardware] build picks the flavour: Puhti's V100s need CUDA 12.8
        ("puhti", {"runtime": "apptainer"}, "ddp-cu128.sif"),
        ("puhti", {"runtime": "docker"}, "ddpimg:gpu-cu128"),
        ("mahti", {"runtime": "apptainer"}, "ddp.sif"),
        ("mahti", {"runtime": "docker"}, "ddpimg:gpu"),
        ("puhti", {"runtime": "docker", "gpu_request": "none"}, "ddpimg:cpu"),
        ("generic", {"runtime": "apptainer", "gpus_per_node": 4}, "ddp.sif"),
        ("puhti", {"runtime": "none"}, ""),
    ],
)
def test_default_image_follows_the_runtime_and_flavour(
    site: str, flags: dict[str, Any], image: str
) -> None:
    assert spec_for(site, **flags).image == image


def test_flag_values_keeps_only_given_flags() -> None:
    given = {"nodes": 2, "partition": None, "binds": None, "command": [], "site": "x", "submit": 1}
    assert flag_values(given) == {"nodes": 2}


# ---------------------------------------------------------------- value checks


@pytest.mark.parametrize(
    ("flags", "file", "message"),
    [
        ({"nodes": 0}, {}, r"--nodes: must be at least 1, found 0"),
        ({}, {"nodes": 0}, r"job\.toml: nodes: must be at least 1, found 0"),
        ({"signal_seconds": 70000}, {}, r"--signal-seconds: must be at most 65535"),
        (
            {"runtime": "podman"},
            {},
            r"--runtime: 'podman' is not one of apptainer, singularity, podman-hpc, pyxis, edf, "
            "docker, none",
        ),
        ({}, {"launch": "mpirun"}, r"job\.toml: launch: 'mpirun' is not one of srun, torchrun"),
        ({}, {"partition": "gpu small"}, r"job\.toml: partition: 'gpu small' contains whitesp"),
        ({"account": "proj\n#SBATCH --x"}, {}, r"--account: .* contains whitespace or a control"),
        ({"time": "1h"}, {}, r"--time: '1h' is not a Slurm time limit"),
        ({"binds": ("/a,/b",)}, {}, r"--bind: '/a,/b' contains ','"),
        ({"sbatch_options": ("qos=x",)}, {}, r"--sbatch-option: 'qos=x' is not an sbatch option"),
        ({"command": ("train", "a\nb")}, {}, r"--command: 'a\\nb' contains a control character"),
    ],
)
def test_bad_values_name_where_they_came_from(
    flags: dict[str, Any], file: dict[str, Any], message: str
) -> None:
    with pytest.raises(JobError, match=message):
        resolve_job(shipped("puhti"), {"nodes": 1} | flags, job_file(file))


def test_nodes_missing() -> None:
    with pytest.raises(JobError, match="the number of nodes is not given") as caught:
        resolve_job(shipped("puhti"), {})
    assert caught.value.hint == "pass --nodes N, or nodes = N in the job file"


# ------------------------------------------------------- the site's runtime, image, QOS, memory


@pytest.mark.parametrize(
    ("site", "flags", "runtime", "image"),
    [
        # NERSC's runtime, the flavour's tag; --runtime wins.
        ("perlmutter", {}, "podman-hpc", "ddpimg:gpu-cu128"),
        ("perlmutter", {"runtime": "apptainer"}, "apptainer", "ddp-cu128.sif"),
        ("lumi", {"image": "r.sif"}, "singularity", "r.sif"),
        ("alps", {}, "edf", "ddpimg+gpu-arm64.sqsh"),
        ("roihu", {}, "apptainer", "ddp-arm64.sif"),
        ("generic", {"gpus_per_node": 4, "runtime": "pyxis"}, "pyxis", "./ddpimg+gpu.sqsh"),
        ("local", {"gpu_request": "none", "gpus_per_node": 2}, "docker", "ddpimg:cpu"),
        ("generic", {"gpus_per_node": 4, "runtime": "none"}, "none", ""),
    ],
)
def test_runtime_and_image_come_from_the_site_unless_given(
    site: str, flags: dict[str, Any], runtime: str, image: str
) -> None:
    spec = spec_for(site, **flags)
    assert (spec.runtime, spec.image) == (runtime, image)


def test_a_sites_own_image_is_not_used_with_another_runtime(tmp_path: Path) -> None:
    profile_path = tmp_path / "own.toml"
    profile_path.write_text(
        '[site]\nname = "own"\n[container]\nruntime = "podman-hpc"\nimage = "nersc/ddp:1"\n'
        "[job]\ngpus_per_node = 4\n"
    )
    profile = load_profile(profile_path)
    assert resolve_job(profile, {"nodes": 1}).image == "nersc/ddp:1"
    other = resolve_job(profile, {"nodes": 1, "runtime": "apptainer"})
    assert (other.image, other.source("image")) == ("ddp.sif", "default")


@pytest.mark.parametrize(
    ("flags", "mem", "source"),
    [
        ({}, "320G", "site puhti"),  # 4 GPUs x 80G, CSC's --mem=320G
        ({"gpus_per_node": 2}, "160G", "site puhti"),  # the per-GPU share
        ({"mem": "0"}, "0", "flag"),  # all of the node's memory
        ({"gpu_request": "none"}, "", "default"),  # no GPUs, no GPU share
    ],
)
def test_memory_follows_the_gpus(flags: dict[str, Any], mem: str, source: str) -> None:
    spec = spec_for("puhti", **flags)
    assert (spec.mem, spec.source("mem")) == (mem, source)


def test_qos_comes_from_the_site_unless_given() -> None:
    assert spec_for("perlmutter").qos == "regular"
    assert spec_for("perlmutter", qos="debug").qos == "debug"
    assert spec_for("roihu").qos == ""
