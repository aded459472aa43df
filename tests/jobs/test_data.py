"""Where a job's data comes from: a squashfs image mounted in the container, or a directory
staged to every node (ddpimg.jobs.data), for every runtime."""

from __future__ import annotations

import pytest

from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import prepare
from ddpimg.errors import JobError
from ddpimg.jobs import raise_for_errors
from ddpimg.jobs.command import TrainCommand, shell_words
from ddpimg.jobs.directives import SINGLE_QUOTED

COMMON = ["--nodes", "2", "--time", "1:00:00", "--gpus-per-node", "4", "--cpus-per-task", "8"]


def script(*args: str, command: tuple[str, ...] = ("train", "resnet")) -> str:
    parsed = build_parser().parse_args(
        ["sbatch", "--site", "generic", *COMMON, *args, "--", *command]
    )
    prepared = prepare(parsed, {}, "example-host")
    raise_for_errors(prepared.findings)
    return prepared.script()


@pytest.mark.parametrize(
    ("runtime", "bind"),
    [
        ("apptainer", '--bind "${DDPIMG_DATA}" '),
        ("singularity", '--bind "${DDPIMG_DATA}" '),
        ("docker", '--volume "${DDPIMG_DATA}:${DDPIMG_DATA}"'),
        ("podman-hpc", '--volume "${DDPIMG_DATA}:${DDPIMG_DATA}"'),
        ("pyxis", ',${DDPIMG_DATA}:${DDPIMG_DATA}"'),
        ("edf", 'mounts = ["${PWD}", "${DDPIMG_DATA}"]'),
        ("none", ""),
    ],
)
def test_staged_data_is_copied_per_node_bound_and_removed(runtime: str, bind: str) -> None:
    text = script("--runtime", runtime, "--stage-data", "/scratch/shards/")
    copy = (
        'export DDPIMG_DATA="${TMPDIR:-/tmp}/ddpimg-data-${SLURM_JOB_ID}"\n'
        f"{SINGLE_QUOTED}\n"
        "srun --nodes=2 --ntasks-per-node=1 --ntasks=2 bash -c "
        """'mkdir -p -- "$1" && cp -rp -- "$0"/. "$1"/' /scratch/shards "${DDPIMG_DATA}" || {"""
    )
    assert copy in text
    assert bind in text
    assert '--data "${DDPIMG_DATA}"' in text
    cleanup = 'srun --nodes=2 --ntasks-per-node=1 --ntasks=2 rm -rf -- "${DDPIMG_DATA}"'
    # Staging before the step, removal after it and before a requeue.
    assert text.index(copy) < text.index("step_pid=$!") < text.index(cleanup)
    assert text.index(cleanup) < text.index("scontrol requeue")


def test_the_node_local_directory_comes_from_the_flag() -> None:
    text = script("--stage-data", "/s", "--local-dir", "$LOCAL_SCRATCH")
    assert 'export DDPIMG_DATA="$LOCAL_SCRATCH/ddpimg-data-${SLURM_JOB_ID}"' in text


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_a_squashfs_image_is_mounted_at_data(runtime: str) -> None:
    text = script("--runtime", runtime, "--data-image", "/p/imagenet.sqsh")
    assert f"{runtime} exec --nv --bind /p/imagenet.sqsh:/data:image-src=/ " in text
    assert "--data /data " in text
    assert "DDPIMG_DATA" not in text


@pytest.mark.parametrize(
    ("image", "mount"),
    [("/p/imagenet.sqsh", "/p/imagenet.sqsh:/data:sqsh"),
     ("imagenet.sqsh", "${PWD}/imagenet.sqsh:/data:sqsh")],
)  # fmt: skip
def test_the_container_engine_mounts_a_squashfs_image_at_data(image: str, mount: str) -> None:
    """The EDF's own squashfs mount (FILE:/data:sqsh, CSCS's run page), relative paths from
    the job's directory as for the image."""
    text = script("--runtime", "edf", "--data-image", image)
    assert f'mounts = ["${{PWD}}", "{mount}"]\n' in text
    assert "--data /data " in text


def test_staging_into_memory_is_warned_about() -> None:
    parsed = build_parser().parse_args(
        ["sbatch", "--site", "alps", "--nodes", "2", "--time", "1:00:00",
         "--stage-data", "/capstor/shards", "--", "train", "resnet"]
    )  # fmt: skip
    found = [f for f in prepare(parsed, {}, "h").findings if "memory on site alps" in f.message]
    assert [f.message for f in found] == [
        "--stage-data copies into /dev/shm, which is memory on site alps: the copy counts "
        "against the job's memory"
    ]


def test_the_users_data_option_is_replaced_when_it_names_the_same_place() -> None:
    text = script(
        "--stage-data", "/s", command=("train", "resnet", "--data", "/s/", "--epochs", "2")
    )
    assert 'train resnet --epochs 2 --data "${DDPIMG_DATA}" ' in text
    assert "--data /s" not in text


@pytest.mark.parametrize(
    ("args", "command", "message", "hint"),
    [
        (
            ["--runtime", "docker", "--data-image", "/i.sqsh"],
            ("train", "resnet"),
            r"--data-image needs apptainer, singularity or the CSCS Container Engine \(edf\) to "
            r"mount the image, but the job's runtime is docker",
            r"--stage-data DIR \(the unpacked shards\), or --runtime apptainer",
        ),
        (
            ["--data-image", "/i.sqsh", "--stage-data", "/s"],
            ("train", "resnet"),
            r"--data-image and --stage-data both given",
            r"give one",
        ),
        (
            ["--stage-data", "/s"],
            ("train", "resnet", "--data", "/elsewhere"),
            r"the command's --data /elsewhere is not where --stage-data puts the data \(the "
            r"node-local copy\)",
            r"drop --data from the command \(ddpimg sbatch sets it\), or give --data /s",
        ),
        (
            ["--data-image", "/i.sqsh"],
            ("train", "--script", "mine.py"),
            r"--data-image sets train's --data, but the job's command is not a bundled trainer "
            r"\(train --script mine.py ...\)",
            r"drop --data-image and bind or copy the data in your own script",
        ),
    ],
)
def test_data_placement_errors(
    args: list[str], command: tuple[str, ...], message: str, hint: str
) -> None:
    with pytest.raises(JobError, match=rf"^{message}\n  hint: .*{hint}"):
        script(*args, command=command)


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (("train", "--data", "/a", "--epochs", "1"), ["train", "--epochs", "1"]),
        (("train", "--data=/a", "--epochs", "1"), ["train", "--epochs", "1"]),
        (("train", "--epochs", "1"), ["train", "--epochs", "1"]),
    ],
)
def test_shell_words_set_data(words: tuple[str, ...], expected: list[str]) -> None:
    quoted = shell_words(TrainCommand(words), "s", "srun", 1, data="/data")
    assert quoted[: len(expected) + 2] == [*expected, "--data", "/data"]
