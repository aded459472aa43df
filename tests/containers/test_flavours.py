"""Each image's torch build is the one ``ddpimg.hardware.builds`` says (`nox -s flavours`).

Asked inside the images, without a GPU: ``torch._C._cuda_getArchFlags()`` lists the
architectures torch's kernels were compiled for. The CUDA 12.8 image must cover the V100
(sm 7.0) and the CUDA 13 image must not (the reason the CUDA 12.8 flavour exists); the arm64
image must be an aarch64 image whose torch covers the GH200 (sm 9.0). The GPU images must
train on the CPU like the others, the arm64 one under qemu (containers/engine.sh emulator).
``DDPIMG_FLAVOUR_IMAGES`` names the images (conftest.py); each one's build-info file says
which lock it was built from.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ddpimg.hardware.builds import BUILDS, TorchBuild, build_for_torch
from ddpimg.hardware.compat import parse_arch_flags
from tests.containers.test_smoke import OUT, READ_ONLY, docker_env, docker_run, mounted
from tests.integration.runs import QUICK_TRAIN, read_metrics, run, summary

pytestmark = pytest.mark.docker

V100 = (7, 0)
GH200 = (9, 0)
# Emulated, torch takes ~30 s to import and every step runs under qemu: QUICK_TRAIN's
# mnist run (the default trainer, synthetic data), shortened to 2 small steps and a small
# evaluation (what the check needs: steps logged, an evaluation, a completed manifest).
EMULATED_TRAIN = [
    "mnist", "--data", "synthetic", "--epochs", "1", "--max-steps", "2", "--log-every", "1",
    "--global-batch-size", "8", "--train-samples", "16", "--eval-samples", "8", "--seed", "7",
]  # fmt: skip
# What each GPU image trains on the CPU, by its lock: the arguments and the steps logged.
TRAINING = {"pypi-cu128": (QUICK_TRAIN, 8), "pypi-arm64": (EMULATED_TRAIN, 2)}
PROBE = (
    "import json, platform, torch\n"
    "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,\n"
    "                  'hip': torch.version.hip, 'flags': torch._C._cuda_getArchFlags(),\n"
    "                  'machine': platform.machine()}))\n"
)


@pytest.fixture(scope="module")
def facts(flavour_images: list[str]) -> dict[str, dict[str, Any]]:
    """Image -> its build-info file, its torch's versions and arch flags, its flavour."""
    found: dict[str, dict[str, Any]] = {}
    for image in flavour_images:
        info = json.loads(docker_run(image, ["cat", "/etc/ddpimg/build-info.json"]).stdout)
        torch = json.loads(docker_run(image, ["python3", "-c", PROBE], timeout=300).stdout)
        inspect = run(["docker", "image", "inspect", image], docker_env(), timeout=60)
        config = json.loads(inspect.stdout)[0]
        found[image] = {"info": info, "torch": torch, "architecture": config["Architecture"]}
    return found


def image_of(facts: dict[str, dict[str, Any]], lock: str) -> str:
    images = [image for image, fact in facts.items() if fact["info"]["lock"]["name"] == lock]
    assert len(images) == 1, f"expected one image built from lock {lock!r}: {sorted(facts)}"
    return images[0]


def build_of(fact: dict[str, Any]) -> TorchBuild:
    lock = fact["info"]["lock"]["name"]
    builds = [build for build in BUILDS.values() if build.lock == lock]
    assert len(builds) == 1, f"ddpimg.hardware.builds has no flavour for lock {lock!r}"
    return builds[0]


def test_every_flavour_with_a_lock_has_an_image(facts: dict[str, dict[str, Any]]) -> None:
    built = {fact["info"]["lock"]["name"] for fact in facts.values()}
    assert {build.lock for build in BUILDS.values() if build.lock is not None} <= built


def test_each_image_has_the_build_the_table_says(facts: dict[str, dict[str, Any]]) -> None:
    for image, fact in facts.items():
        build, torch = build_of(fact), fact["torch"]
        assert torch["torch"].split("+")[0] == build.torch_version, image
        assert torch["cuda"] == build.cuda_version, image
        sass, ptx = parse_arch_flags(torch["flags"].split())
        assert (tuple(sorted(sass)), max(ptx, default=None)) == (build.archs, build.ptx_arch), (
            f"{image}: torch._C._cuda_getArchFlags() = {torch['flags']!r}"
        )
        assert torch["machine"] == build.machine, image
        found = build_for_torch(torch["torch"], torch["cuda"], torch["hip"], torch["machine"])
        assert found == build, image
        # Each GPU image carries its flavour's tag (noxfile.py's LOCKS).
        assert fact["info"]["flavour"] == "gpu", image
        assert image == build.image_tag


def test_only_the_cuda12_image_runs_on_a_v100(facts: dict[str, dict[str, Any]]) -> None:
    cuda12 = facts[image_of(facts, "pypi-cu128")]["torch"]["flags"]
    cuda13 = facts[image_of(facts, "pypi")]["torch"]["flags"]
    assert "sm_70" in cuda12.split()
    # Neither native sm 7.0 kernels nor PTX old enough for a V100's driver to compile.
    archs, ptx = parse_arch_flags(cuda13.split())
    assert V100 not in archs
    assert all(arch > V100 for arch in ptx)


def test_the_arm64_image_is_an_aarch64_image_for_the_gh200(
    facts: dict[str, dict[str, Any]],
) -> None:
    fact = facts[image_of(facts, "pypi-arm64")]
    assert fact["architecture"] == "arm64"  # what docker and apptainer pull and run it as
    assert fact["torch"]["machine"] == fact["info"]["machine"] == "aarch64"
    assert "sm_90" in fact["torch"]["flags"].split()
    archs, _ = parse_arch_flags(fact["torch"]["flags"].split())
    assert GH200 in archs


@pytest.mark.parametrize("lock", sorted(TRAINING))
def test_each_gpu_image_trains_on_the_cpu(
    facts: dict[str, dict[str, Any]], tmp_path: Path, lock: str
) -> None:
    image = image_of(facts, lock)
    arguments, steps = TRAINING[lock]
    tmp_path.chmod(0o777)  # the image's user (uid 1000) writes there
    options = [*READ_ONLY, *mounted(tmp_path)]
    docker_run(image, ["train", "--site", "local", *arguments, "--out", f"{OUT}/run"],
               options=options, timeout=900)  # fmt: skip
    metrics = read_metrics(tmp_path / "run")
    losses = [m["loss"] for m in metrics if m["kind"] == "train"]
    assert len(losses) == steps
    assert all(math.isfinite(loss) for loss in losses)
    assert any(m["kind"] == "eval" for m in metrics)
    assert summary(tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    build = build_of(facts[image])
    assert manifest["status"] == "completed"
    assert manifest["versions"]["torch"].split("+")[0] == build.torch_version
    assert manifest["versions"]["cuda"] == build.cuda_version
    assert manifest["versions"]["image"]["lock"]["name"] == lock
    assert manifest["versions"]["image"]["machine"] == build.machine
