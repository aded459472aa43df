"""ddpimg sbatch and the site's image flavour and fabric: default image, the mismatch warning
(a heuristic on the image's name), and the fabric's binds in both runtimes."""

from __future__ import annotations

from typing import Any

import pytest

from ddpimg.jobs import WARNING, check_job, render_script
from ddpimg.jobs.flavour import flavour_mismatch
from ddpimg.site.model import Hardware
from tests.jobs.conftest import shipped, spec_for


def flavour_warnings(site: str, **flags: Any) -> list[str]:
    findings = check_job(spec_for(site, **flags), shipped(site))
    return [f.message for f in findings if f.level == WARNING and "flavour" in f.message]


@pytest.mark.parametrize(
    ("site", "image", "warned"),
    [
        ("puhti", "/projappl/p/ddp.sif", True),  # ddp.sif is the CUDA 13 image's name
        ("puhti", "/projappl/p/my-image.sif", False),  # no flavour's name or tag: no guess
        ("puhti", "/projappl/p/ddpimg-gpu.sif", True),  # the CUDA 13 image on V100s
        ("puhti", "ddp-cu128.sif", False),
        ("puhti", "ddp-gpu-cu128.sif", False),
        ("mahti", "ddp-cu128.sif", False),  # CUDA 12.8 runs A100s too
        ("roihu", "ddp-arm64.sif", False),
        ("roihu", "ddp.sif", True),  # an x86_64 image on aarch64 nodes
        ("alps", "ddpimg+gpu.sqsh", True),
        ("lumi", "ddpimg-gpu.sif", True),  # a CUDA image on AMD GPUs
        ("generic", "ddpimg-gpu.sif", False),  # the site names no flavour
    ],
)
def test_image_of_another_flavour_warns(site: str, image: str, warned: bool) -> None:
    flags: dict[str, Any] = {"image": image}
    if site == "generic":
        flags["gpus_per_node"] = 4
    assert bool(flavour_warnings(site, **flags)) == warned


def test_warning_names_gpu_and_flavour() -> None:
    mismatch = flavour_mismatch("x/ddpimg-gpu.sif", Hardware("V100", "sm_70", "cuda12"))
    assert mismatch is not None
    message, hint = mismatch
    assert message == (
        "--image x/ddpimg-gpu.sif looks like the cuda13 flavour (ddpimg:gpu, by its name), "
        "which cannot drive this site's V100 (sm_70)"
    )
    assert hint.startswith("use the cuda12 flavour (ddpimg:gpu-cu128); the name test is a")


def test_fabric_binds_reach_every_runtime() -> None:
    plugin = "/global/common/software/nersc9/nccl/2.24.3/plugin:/opt/nccl-ofi"
    rendered = {
        runtime: render_script(spec_for("perlmutter", runtime=runtime), shipped("perlmutter"))
        for runtime in ("apptainer", "docker", "podman-hpc", "pyxis", "edf")
    }
    assert f"--bind /pscratch,/global/cfs,{plugin},/dev/cxi0," in rendered["apptainer"]
    assert f"--volume {plugin}" in rendered["docker"]
    assert f"--volume {plugin}" in rendered["podman-hpc"]
    assert "--volume /dev/cxi3:/dev/cxi3" in rendered["podman-hpc"]
    assert f",{plugin}," in rendered["pyxis"]
    assert f'"{plugin}"' in rendered["edf"]


def test_an_image_of_another_cpu_says_so() -> None:
    mismatch = flavour_mismatch("/scratch/ddp.sif", Hardware("GH200", "sm_90", "cuda13-arm64"))
    assert mismatch is not None
    assert mismatch[0] == (
        "--image /scratch/ddp.sif looks like the cuda13 flavour (ddpimg:gpu, by its name), "
        "which is built for x86_64 CPUs, not this site's aarch64"
    )
