"""[fabric] and [hardware]: validation, what the plan makes of them, --explain, and the
in-container path check."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.errors import ProfileError
from ddpimg.imagenames import image_names
from ddpimg.plan import build_plan
from ddpimg.runtime.fabric import check_fabric_paths
from ddpimg.site.fabric import explain_fabric, image_flavour, split_bind
from ddpimg.site.load import load_profile
from tests.site.conftest import WriteProfile

HEAD = '[site]\nname = "fab"\n'
FABRIC = (
    HEAD + "[fabric]\n"
    'transport = "ofi"\n'
    'binds = ["/opt/cray", "/sw/plugin:/opt/nccl-ofi"]\n'
    'library_paths = ["/opt/nccl-ofi/lib"]\n'
    "min_busbw_gbps = 6\n"
    "[fabric.env]\n"
    'NCCL_NET = "AWS Libfabric"\n'
    'FI_CXI_DISABLE_HOST_REGISTER = "1"\n'
    "[env]\n"
    'FI_CXI_DISABLE_HOST_REGISTER = "0"\n'
    "[hardware]\n"
    'gpus = "V100"\narch = "sm_70"\nbuild = "cuda12"\n'
)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '[fabric]\ntransport = "roce"\n',
            r"key 'fabric\.transport' is invalid: it must be one of",
        ),
        ('[fabric]\nbinds = ["opt/cray"]\n', r"'opt/cray' is not HOST or HOST:TARGET"),
        ('[fabric]\nbinds = ["/a,/b"]\n', r"'/a,/b' contains ','"),
        ('[fabric]\nlibrary_paths = ["lib"]\n', r"'lib' is not an absolute directory"),
        ("[fabric]\nmin_busbw_gbps = -1\n", r"fabric\.min_busbw_gbps' is invalid: it must be at"),
        ('[fabric]\nmin_busbw_gbps = "6"\n', r"fabric\.min_busbw_gbps' must be a number"),
        ('[hardware]\nbuild = "cuda11"\n', r"hardware\.build' is invalid: it must be one of "),
        ('[hardware]\narch = "volta"\n', r"hardware\.arch' is invalid: write the GPU arch"),
        ('[fabric.env]\n"1X" = "a"\n', r"'1X' is not an environment variable name"),
    ],
)
def test_invalid_values_name_the_key(write_profile: WriteProfile, body: str, message: str) -> None:
    path = write_profile("fab", HEAD + body)
    with pytest.raises(ProfileError, match=message) as caught:
        load_profile(path)
    assert str(path) in caught.value.message


def test_unknown_nccl_name_in_fabric_env_warns(write_profile: WriteProfile) -> None:
    path = write_profile("fab", HEAD + '[fabric.env]\nNCCL_NETT = "x"\n')
    with pytest.warns(UserWarning, match=r"\[fabric\.env\] exports 'NCCL_NETT'.*'NCCL_NET'"):
        load_profile(path)


# Rank 0 of a Slurm step over two nodes.
TWO_NODES = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "n[1-2]",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
}


def test_nccl_net_is_only_set_for_several_nodes(write_profile: WriteProfile) -> None:
    """HPE: NCCL_NET on one node forces the network between local GPUs (VNIs, slower)."""
    path = write_profile("fab", FABRIC)
    one = build_plan({}, "h", site=str(path))
    assert "NCCL_NET" not in dict(one.exports)
    assert "fabric: NCCL_NET not set on one node (fabric.env; multi-node only)" in one.notes
    two = build_plan(TWO_NODES, "h", site=str(path))
    assert dict(two.exports)["NCCL_NET"] == "AWS Libfabric"


def test_plan_exports_fabric_variables_below_env(
    write_profile: WriteProfile,
) -> None:
    path = write_profile("fab", FABRIC)
    plan = build_plan({"LD_LIBRARY_PATH": "/host/lib", **TWO_NODES}, "h", site=str(path))
    exports = dict(plan.exports)
    assert exports["NCCL_NET"] == "AWS Libfabric"
    assert exports["FI_CXI_DISABLE_HOST_REGISTER"] == "0"  # [env] wins over [fabric.env]
    # the host's entry goes, the plugin's directory comes first, through the re-exec
    assert dict(plan.clean.rewritten)["LD_LIBRARY_PATH"] == "/opt/nccl-ofi/lib"
    assert "LD_LIBRARY_PATH" in plan.removed


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "/opt/nccl-ofi/lib"),
        ("/.singularity.d/libs", "/opt/nccl-ofi/lib:/.singularity.d/libs"),
        ("/opt/nccl-ofi/lib:/.singularity.d/libs", None),  # already there: no re-exec
    ],
)
def test_library_paths_are_put_in_front(
    write_profile: WriteProfile, value: str | None, expected: str | None
) -> None:
    path = write_profile("fab", FABRIC)
    env = {} if value is None else {"LD_LIBRARY_PATH": value}
    plan = build_plan(env, "h", site=str(path))
    assert dict(plan.clean.rewritten).get("LD_LIBRARY_PATH") == expected
    assert "LD_LIBRARY_PATH" not in plan.removed


def test_explain_lists_the_fabric(write_profile: WriteProfile) -> None:
    profile = load_profile(write_profile("fab", FABRIC))
    lines = explain_fabric(profile)
    assert lines[0].startswith("fabric: transport ofi (libfabric through the aws-ofi-nccl")
    assert "fabric: bind /opt/nccl-ofi (from host /sw/plugin): must exist" in " ".join(lines)
    assert "fabric: NCCL_NET=AWS Libfabric (fabric.env)" in lines
    assert "fabric: LD_LIBRARY_PATH gets /opt/nccl-ofi/lib" in lines
    assert "hardware: V100 (sm_70) need the cuda12 image flavour" in lines


def test_missing_bind_target_stops_inside_a_container(write_profile: WriteProfile) -> None:
    profile = load_profile(write_profile("fab", FABRIC))
    present = {"/.singularity.d", "/opt/cray"}
    with pytest.raises(ProfileError, match=r"fabric\.binds names /opt/nccl-ofi \(bound from "):
        check_fabric_paths(profile, {}, present.__contains__)
    # outside a container the host's view says nothing about the container's
    check_fabric_paths(profile, {}, {"/opt/cray"}.__contains__)
    check_fabric_paths(profile, {}, {"/.dockerenv", "/opt/cray", "/opt/nccl-ofi"}.__contains__)


def test_split_bind() -> None:
    assert split_bind("/a") == ("/a", "/a")
    assert split_bind("/a:/b") == ("/a", "/b")


NAMES = {
    "cuda13": image_names("gpu"),
    "cuda12": image_names("gpu", "cu128"),
    "rocm": image_names("gpu", "rocm"),
}


@pytest.mark.parametrize(
    ("image", "flavour"),
    [
        ("ddpimg:gpu-cu128", "cuda12"),
        ("/proj/images/ddp-gpu-cu128.sif", "cuda12"),  # the tag in a name of one's own
        ("/proj/images/ddp-cu128.sif", "cuda12"),  # the flavour's own SIF name
        ("./ddpimg+gpu-cu128.sqsh", "cuda12"),
        ("ddpimg:gpu", "cuda13"),
        ("/scratch/ddp.sif", "cuda13"),  # ddp.sif is the CUDA 13 image's name
        ("/scratch/my-ddp.sif", None),  # no flavour's name, no tag: nothing assumed
        ("/x/ddpimg-gpu-rocm.sif", "rocm"),
    ],
)
def test_image_flavour_heuristic(image: str, flavour: str | None) -> None:
    assert image_flavour(image, NAMES) == flavour


def test_shipped_profiles_fabric() -> None:
    profiles = Path(__file__).resolve().parents[2] / "site-profiles"
    perlmutter = load_profile(profiles / "perlmutter.toml")
    assert perlmutter.fabric.transport == "ofi"
    assert dict(perlmutter.fabric.env)["NCCL_NET"] == "AWS Libfabric"
    lumi = load_profile(profiles / "lumi.toml")
    assert (lumi.fabric.transport, lumi.hardware.build) == ("ofi", "rocm")
    for name in ["puhti", "palmetto", "hdfml", "perlmutter"]:
        assert load_profile(profiles / f"{name}.toml").hardware.build == "cuda12"
    for name in ["mahti", "juwels-booster", "della"]:
        assert load_profile(profiles / f"{name}.toml").hardware.build == "cuda13"
