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
        ("puhti", "/projappl/p/ddp.sif", False),  # no flavour tag in the name: no guess
        ("puhti", "/projappl/p/ddpimg-gpu.sif", True),  # the CUDA 13 image on V100s
        ("puhti", "ddp-gpu-cu128.sif", False),
        ("mahti", "ddp-gpu-cu128.sif", False),  # CUDA 12.8 runs A100s too
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


def test_fabric_binds_reach_apptainer_and_docker() -> None:
    apptainer = render_script(spec_for("perlmutter"), shipped("perlmutter"))
    assert (
        "--bind /pscratch,/global/cfs,/global/common/software/nersc9/nccl/2.19/plugin:"
        "/opt/nccl-ofi," in apptainer
    )
    docker = render_script(spec_for("perlmutter", runtime="docker"), shipped("perlmutter"))
    assert "--volume /global/common/software/nersc9/nccl/2.19/plugin:/opt/nccl-ofi" in docker
    assert "--volume /usr/lib64/libcxi.so.1:/usr/lib64/libcxi.so.1" in docker
