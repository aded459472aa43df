"""The checks before rendering: each error and warning, with its message and hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpimg.jobs import ERROR, WARNING, Finding, JobError, check_job, raise_for_errors
from tests.jobs.conftest import shipped, spec_for


def findings(
    site: str = "hdfml", submit: bool = False, allow_retired: bool = True, **flags: Any
) -> list[Finding]:
    """The findings of a job; a retired site's (puhti, mahti) as rendered for an archive
    unless ``allow_retired`` is False."""
    return check_job(
        spec_for(site, **flags), shipped(site), submit=submit, allow_retired=allow_retired
    )


def only(found: list[Finding]) -> Finding:
    assert len(found) == 1, [str(f) for f in found]
    return found[0]


@pytest.mark.parametrize(
    ("site", "flags"),
    [
        ("hdfml", {}),
        ("hdfml", {"launch": "torchrun"}),
        ("perlmutter", {"nodes": 4}),
        ("della", {"nodes": 1, "gpus_per_node": 1}),  # one GPU on one node is fine
        ("local", {"gpu_request": "none", "gpus_per_node": 2, "runtime": "none", "nodes": 1}),
        # The site does not say: no upper bound on GPUs; the CPUs of a rank must be given.
        ("generic", {"gpus_per_node": 8, "cpus_per_task": 8}),
    ],
)
def test_sound_jobs_have_no_findings(site: str, flags: dict[str, Any]) -> None:
    assert findings(site, **flags) == []


@pytest.mark.parametrize(
    ("site", "flags", "level", "message", "hint"),
    [
        ("hdfml", {"command": None}, ERROR, "no training command given", "put it after --"),
        (
            "hdfml",
            {"command": ("torchrun", "--nproc-per-node", "4", "train.py")},
            ERROR,
            "the command starts torchrun, a launcher of its own: srun already starts 4 tasks "
            "per node",
            "--launch torchrun",
        ),
        (
            "hdfml",
            {"command": ("deepspeed", "--num_gpus", "4", "train.py")},
            ERROR,
            "the command starts deepspeed, a launcher of its own",
            "`train --strategy deepspeed`",
        ),
        (
            "hdfml",
            {"command": ("python", "my.py")},
            WARNING,
            "the command 'python' is not ddpimg's train",
            "`train --script FILE ARGS`",
        ),
        (
            "hdfml",
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
            "hdfml",
            {"gpus_per_node": 8},
            ERROR,
            "--gpus-per-node 8: more GPUs per node than the nodes of site hdfml have (4)",
            "--nodes 4 --gpus-per-node 4",
        ),
        (
            "hdfml",
            {"nodes": 4, "gpus_per_node": 1},
            WARNING,
            "one GPU per node on a multi-node job (4 nodes x 1)",
            "use whole nodes first: --nodes 1 --gpus-per-node 4 (4 GPUs;",
        ),
        (
            "hdfml",
            {"nodes": 3, "gpus_per_node": 2},
            WARNING,
            "2 of 4 GPUs per node on a multi-node job (3 nodes x 2)",
            "--nodes 2 --gpus-per-node 4 (8 GPUs;",
        ),
        (
            "hdfml",
            {"ntasks_per_node": 2},
            ERROR,
            "--ntasks-per-node 2: tasks per node != GPUs per node (4)",
            "--ntasks-per-node 4 (or leave it out)",
        ),
        (
            "hdfml",
            {"launch": "torchrun", "ntasks_per_node": 4},
            ERROR,
            "--ntasks-per-node 4: with --launch torchrun each node runs one launcher task",
            "--ntasks-per-node 1",
        ),
        (
            "hdfml",
            {"launch": "torchrun", "command": ("train", "--nproc-per-node", "2")},
            ERROR,
            "the command's --nproc-per-node 2 does not match site hdfml: job.gpus_per_node = 4",
            "ddpimg adds --nproc-per-node 4",
        ),
        (
            "local",
            {"gpu_request": "none", "gpus_per_node": 2, "nodes": 1,
             "command": ("train", "--nproc-per-node", "2")},
            ERROR,
            "the command has --nproc-per-node 2 while srun starts 2 tasks per node",
            "use --launch torchrun",
        ),
        (
            "hdfml",
            {"time": None},
            WARNING,
            "no time limit given: the partition's default applies",
            "--time 12:00:00",
        ),
        (
            "hdfml",
            {"time": "10", "signal_seconds": 600},
            ERROR,
            "--signal-seconds 600 is not less than the time limit --time 10 (600 s)",
            "--signal-seconds below 600",
        ),
        (
            "hdfml",
            {"runtime": "none", "image": "ddp.sif"},
            WARNING,
            "--image ddp.sif is not used with --runtime none",
            "--runtime apptainer (or the site's runtime)",
        ),
        (
            "hdfml",
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
    assert findings("generic", nodes=4, gpus_per_node=1, cpus_per_task=8) == []


def test_missing_image_is_an_error_only_when_submitting(tmp_path: Path) -> None:
    missing = str(tmp_path / "ddp-cu128.sif")
    assert findings(image=missing) == []
    found = only(findings(image=missing, submit=True))
    assert found.level == ERROR
    assert found.message.startswith(f"image file {missing} does not exist")
    assert "apptainer build" in found.hint


def test_existing_image_and_docker_tags_pass_when_submitting(tmp_path: Path) -> None:
    image = tmp_path / "ddp-cu128.sif"
    image.write_bytes(b"")
    assert findings(image=str(image), submit=True) == []
    assert findings(runtime="docker", submit=True) == []
    assert findings(runtime="podman-hpc", submit=True) == []  # a tag in podman's store


def test_enroot_images_are_files_checked_when_submitting(tmp_path: Path) -> None:
    found = only(findings(runtime="pyxis", submit=True))
    assert found.message.startswith("image file ./ddpimg+gpu-cu128.sqsh does not exist")
    assert "enroot import dockerd://ddpimg:gpu" in found.hint


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


# ------------------------------------------------------------- site facts the checks enforce


@pytest.mark.parametrize("site", ["puhti", "mahti"])
def test_a_retired_site_refuses_to_render_naming_its_successor(site: str) -> None:
    found = [f for f in findings(site, allow_retired=False) if "retired" in f.message]
    assert [f.level for f in found] == [ERROR]
    assert found[0].message.startswith(f"site {site} is retired: CSC shut ")
    assert found[0].message.endswith(": its nodes take no jobs, a job would pend forever")
    assert found[0].hint.startswith("use --site roihu; --allow-retired renders it anyway")
    with pytest.raises(JobError, match=f"site {site} is retired"):
        raise_for_errors(findings(site, allow_retired=False))


def test_a_retired_site_renders_for_an_archive_with_a_warning() -> None:
    found = [f for f in findings("puhti", allow_retired=True) if "retired" in f.message]
    assert [f.level for f in found] == [WARNING]
    assert found[0].message == (
        "site puhti is retired: CSC shut Puhti's computing services down on 31 July 2026; "
        "Roihu replaces it (--site roihu)"
    )
    assert "use --site roihu" in found[0].hint


def test_local_refuses_more_than_one_node() -> None:
    flags = {"gpu_request": "none", "gpus_per_node": 2, "runtime": "none"}
    found = only(findings("local", **flags))
    assert found.level == ERROR
    assert found.message.startswith("--nodes 2: site local runs jobs on at most 1 node (")
    assert found.hint.startswith("--nodes 1, or the profile of the cluster")
    assert findings("local", nodes=1, **flags) == []


@pytest.mark.parametrize(
    ("flags", "asked"),
    [({"gpus_per_node": 4}, True), ({"gpus_per_node": 4, "cpus_per_task": 8}, False),
     ({"gpus_per_node": 2, "gpu_request": "none"}, False)],
)  # fmt: skip
def test_generic_asks_for_the_cpus_of_a_gpu_rank(flags: dict[str, Any], asked: bool) -> None:
    found = [f for f in findings("generic", **flags) if "CPUs a rank gets" in f.message]
    assert len(found) == int(asked)
    if asked:
        assert found[0].level == ERROR
        assert "--cpus-per-task C with C = CPUs per node / GPUs per node" in found[0].hint
        assert "ddpimg site probe" in found[0].hint


@pytest.mark.parametrize(
    ("gpu_type", "hint"),
    [
        ("V100", "--gpu-type v100: Slurm's GPU type names are case-sensitive"),
        ("h100", "one of a100, v100 (--gpu-type; Slurm's names are case-sensitive)"),
    ],
)
def test_gpu_type_must_be_one_the_site_knows(gpu_type: str, hint: str) -> None:
    found = only(findings("palmetto", gpu_type=gpu_type, launch="torchrun"))
    assert found.level == ERROR
    assert found.message == (
        f"--gpu-type {gpu_type}: site palmetto's Slurm knows no GPU type '{gpu_type}' "
        "(its types: a100, v100)"
    )
    assert found.hint == hint
    assert findings("palmetto", gpu_type="v100", launch="torchrun") == []


def test_time_over_a_documented_partition_limit_is_an_error_naming_both() -> None:
    found = only(findings("roihu", time="2-00:00:00"))
    assert found.level == ERROR
    assert found.message == (
        "--time 2-00:00:00 is longer than partition gpularge of site roihu allows (1-12:00:00)"
    )
    assert found.hint == (
        "--time 1-12:00:00 at most, or another partition or QOS "
        "(source: https://docs.csc.fi/computing/running/batch-job-partitions/)"
    )
    assert findings("roihu", time="1-12:00:00") == []
    assert only(findings("roihu", time="UNLIMITED")).level == ERROR


def test_an_unverified_limit_only_warns() -> None:
    found = only(findings("perlmutter", time="3-00:00:00"))
    assert found.level == WARNING
    assert found.message == (
        "--time 3-00:00:00 is longer than QOS regular of site perlmutter allows (2-00:00:00)"
    )
    assert found.hint.startswith(
        "--time 2-00:00:00 at most, or another partition or QOS (unverified:"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"nodes": 11}, "--nodes 11: partition gpularge of site roihu allows at most 10 nodes"),
        (
            {"partition": "gpumedium"},
            "2 nodes x 4 GPUs = 8: partition gpumedium of site roihu allows at most 4 GPUs a job",
        ),
        (
            {"nodes": 1, "gpus_per_node": 2},
            "--gpus-per-node 2: partition gpularge of site roihu takes 4 GPUs per node or more",
        ),
    ],
)
def test_node_and_gpu_limits_of_the_partition(flags: dict[str, Any], message: str) -> None:
    found = only(findings("roihu", **flags))
    assert (found.level, found.message) == (ERROR, message)


def test_memory_over_the_partition_limit() -> None:
    found = [f for f in findings("puhti", mem="400G") if f.level == ERROR]
    assert [f.message for f in found] == [
        "--mem 400G per node is more than partition gpu of site puhti allows (373G)"
    ]


def test_an_amd_site_runs_its_own_container_with_ddpimg_from_or_a_named_image() -> None:
    found = only(findings("lumi"))
    assert found.level == ERROR
    assert found.message.startswith("the site's image /appl/local/laifs/containers/")
    assert found.message.endswith("is the site's own PyTorch container, which does not carry "
                                  "ddpimg")  # fmt: skip
    assert findings("lumi", ddpimg_from="/project/p/ddpimg") == []
    assert findings("lumi", image="/project/p/my-rocm.sif") == []


def test_ddpimgs_own_rocm_flavour_cannot_be_built() -> None:
    found = only(findings("lumi", image=None, runtime="apptainer"))
    assert found.level == ERROR
    assert found.message == (
        "site lumi's MI250X need the rocm image (ddp-rocm.sif), which this project cannot build "
        "yet (no lock: its torch wheels come from an index the build machines cannot reach)"
    )
    assert found.hint.endswith("--gpu-request none --image ddp-cpu.sif")


def test_a_per_task_cpu_binding_that_does_not_fit_the_tasks_is_not_rendered() -> None:
    found = only(findings("lumi", image="x.sif", launch="torchrun"))
    assert found.level == WARNING
    assert found.message.startswith(
        "site lumi: job.cpu_bind = 'mask_cpu:fe000000000000,fe00000000000000,fe0000,fe000000,"
        "fe,fe00,fe00000000,fe0000000000' binds 8 tasks per node one by one, this job runs 1:"
    )
    assert not spec_for("lumi", image="x.sif", launch="torchrun").cpu_bind_applies
    assert spec_for("lumi", image="x.sif").cpu_bind_applies


def test_the_largest_nodes_of_a_site_are_allowed_and_get_their_constraint() -> None:
    assert findings("della", gpus_per_node=4) == []
    assert spec_for("della", gpus_per_node=4).constraint == "gpu80"
    assert spec_for("della").constraint == ""
    assert spec_for("della", gpus_per_node=4, constraint="mine").constraint == "mine"
    found = only(findings("della", gpus_per_node=8))
    assert (
        found.message
        == "--gpus-per-node 8: more GPUs per node than the nodes of site della have (4)"
    )
