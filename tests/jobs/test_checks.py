"""The checks before rendering: each error and warning, with its message and hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpimg.jobs import ERROR, WARNING, Finding, JobError, check_job, raise_for_errors
from tests.jobs.conftest import shipped, spec_for


def findings(site: str = "puhti", submit: bool = False, **flags: Any) -> list[Finding]:
    return check_job(spec_for(site, **flags), shipped(site), submit=submit)


def only(found: list[Finding]) -> Finding:
    assert len(found) == 1, [str(f) for f in found]
    return found[0]


@pytest.mark.parametrize(
    ("site", "flags"),
    [
        ("puhti", {}),
        ("puhti", {"launch": "torchrun"}),
        ("perlmutter", {"nodes": 4}),
        ("della", {"nodes": 1, "gpus_per_node": 1}),  # one GPU on one node is fine
        ("local", {"gpu_request": "none", "gpus_per_node": 2, "runtime": "none"}),
        ("generic", {"gpus_per_node": 8}),  # the site does not say: no upper bound
    ],
)
def test_sound_jobs_have_no_findings(site: str, flags: dict[str, Any]) -> None:
    assert findings(site, **flags) == []


@pytest.mark.parametrize(
    ("site", "flags", "level", "message", "hint"),
    [
        ("puhti", {"command": None}, ERROR, "no training command given", "put it after --"),
        (
            "puhti",
            {"command": ("torchrun", "--nproc-per-node", "4", "train.py")},
            ERROR,
            "the command starts torchrun, a launcher of its own: srun already starts 4 tasks "
            "per node",
            "--launch torchrun",
        ),
        (
            "puhti",
            {"command": ("deepspeed", "--num_gpus", "4", "train.py")},
            ERROR,
            "the command starts deepspeed, a launcher of its own",
            "`train --strategy deepspeed`",
        ),
        (
            "puhti",
            {"command": ("python", "my.py")},
            WARNING,
            "the command 'python' is not ddpimg's train",
            "`train --script FILE ARGS`",
        ),
        (
            "puhti",
            {"command": ("ddpimg", "doctor"), "launch": "torchrun"},
            WARNING,
            "ddpimg doctor with --launch torchrun checks one process per node",
            "--launch srun",
        ),
        (
            "generic",
            {},
            ERROR,
            "site generic does not say how many GPUs a node has and no GPU count was given",
            "--gpu-request none for a CPU-only job",
        ),
        (
            "puhti",
            {"gpus_per_node": 8},
            ERROR,
            "--gpus-per-node 8: more GPUs per node than the nodes of site puhti have (4)",
            "--nodes 4 --gpus-per-node 4",
        ),
        (
            "puhti",
            {"nodes": 4, "gpus_per_node": 1},
            WARNING,
            "one GPU per node on a multi-node job (4 nodes x 1)",
            "use whole nodes first: --nodes 1 --gpus-per-node 4 (4 GPUs;",
        ),
        (
            "puhti",
            {"nodes": 3, "gpus_per_node": 2},
            WARNING,
            "2 of 4 GPUs per node on a multi-node job (3 nodes x 2)",
            "--nodes 2 --gpus-per-node 4 (8 GPUs;",
        ),
        (
            "puhti",
            {"ntasks_per_node": 2},
            ERROR,
            "--ntasks-per-node 2: tasks per node != GPUs per node (4)",
            "--ntasks-per-node 4 (or leave it out)",
        ),
        (
            "puhti",
            {"launch": "torchrun", "ntasks_per_node": 4},
            ERROR,
            "--ntasks-per-node 4: with --launch torchrun each node runs one launcher task",
            "--ntasks-per-node 1",
        ),
        (
            "puhti",
            {"launch": "torchrun", "command": ("train", "--nproc-per-node", "2")},
            ERROR,
            "the command's --nproc-per-node 2 does not match site puhti: job.gpus_per_node = 4",
            "ddpimg adds --nproc-per-node 4",
        ),
        (
            "local",
            {"gpu_request": "none", "gpus_per_node": 2, "command": ("train", "--nproc-per-node",
                                                                     "2")},
            ERROR,
            "the command has --nproc-per-node 2 while srun starts 2 tasks per node",
            "use --launch torchrun",
        ),
        (
            "puhti",
            {"time": None},
            WARNING,
            "no time limit given: the partition's default applies",
            "--time 12:00:00",
        ),
        (
            "puhti",
            {"time": "10", "signal_seconds": 600},
            ERROR,
            "--signal-seconds 600 is not less than the time limit --time 10 (600 s)",
            "--signal-seconds below 600",
        ),
        (
            "puhti",
            {"runtime": "none", "image": "ddp.sif"},
            WARNING,
            "--image ddp.sif is not used with --runtime none",
            "--runtime apptainer or docker",
        ),
        (
            "puhti",
            {"output": "train.log"},
            WARNING,
            "--output train.log has no job id",
            "keep %j",
        ),
    ],
)  # fmt: skip
def test_finding(site: str, flags: dict[str, Any], level: str, message: str, hint: str) -> None:
    found = only(findings(site, **flags))
    assert found.level == level
    assert message in found.message
    assert hint in found.hint


def test_single_gpu_node_job_spread_is_allowed_when_the_site_has_one_gpu_per_node() -> None:
    assert findings("generic", nodes=4, gpus_per_node=1) == []


def test_missing_image_is_an_error_only_when_submitting(tmp_path: Path) -> None:
    missing = str(tmp_path / "ddp.sif")
    assert findings(image=missing) == []
    found = only(findings(image=missing, submit=True))
    assert found.level == ERROR
    assert found.message.startswith(f"image file {missing} does not exist")
    assert "apptainer build" in found.hint


def test_existing_image_and_docker_tags_pass_when_submitting(tmp_path: Path) -> None:
    image = tmp_path / "ddp.sif"
    image.write_bytes(b"")
    assert findings(image=str(image), submit=True) == []
    assert findings(runtime="docker", submit=True) == []


def test_errors_come_before_warnings() -> None:
    found = findings(time=None, ntasks_per_node=2)
    assert [f.level for f in found] == [ERROR, WARNING]


def test_raise_for_errors_one() -> None:
    found = findings(ntasks_per_node=2)
    with pytest.raises(JobError, match=r"^--ntasks-per-node 2: tasks per node") as caught:
        raise_for_errors(found)
    assert caught.value.hint == found[0].hint


def test_raise_for_errors_several_lists_each_with_its_hint() -> None:
    found = findings(ntasks_per_node=2, command=("torchrun", "x.py"), time=None)
    with pytest.raises(JobError, match=r"^2 problems with this job:\n  1\. the command") as caught:
        raise_for_errors(found)
    assert "  2. --ntasks-per-node 2" in caught.value.message
    assert caught.value.message.count("hint:") == 2
    assert "time limit" not in caught.value.message  # warnings are not errors


def test_raise_for_errors_ignores_warnings() -> None:
    raise_for_errors(findings(time=None))
