"""``ddpimg addon build`` in this test environment (its packages are the "image"), against a
local index of packages made by tests/addon/packages.py: nothing is downloaded. The same
build runs inside the cpu image in tests/containers/test_smoke.py."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from ddpimg.addon.build import BuildRequest, build
from ddpimg.addon.errors import AddonError
from ddpimg.addon.lockfile import Locked, read_lock
from ddpimg.addon.packageset import current
from ddpimg.addon.sources import Toolchain, check_buildable
from ddpimg.cli import main
from tests.addon.packages import EXTENSION, NEEDS_TORCH, PINS_TORCH, PURE, make_index


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_index(tmp_path_factory.mktemp("index"), version("torch"), extension=True)


def _request(requirements: Path, index: Path) -> BuildRequest:
    return BuildRequest(
        requirements=requirements,
        lock=None,
        name=None,
        output=requirements.with_name("probe.addon.sqsh"),
        find_links=(str(index),),
        no_index=True,
    )


def _listing(path: Path) -> list[str]:
    proc = subprocess.run(
        ["unsquashfs", "-lls", str(path)], capture_output=True, text=True, check=True, timeout=60
    )
    return proc.stdout.splitlines()


def test_a_build_adds_only_what_the_image_lacks_and_builds_sources_against_its_torch(
    tmp_path: Path, index: Path
) -> None:
    """One build of three kinds: a wheel requiring the image's torch (and a pure wheel in
    turn), a C++ extension compiled against torch's headers, and torch itself, which the
    image satisfies. (A pure-Python source distribution is built in the cpu image:
    tests/containers/test_smoke.py.)"""
    requirements = tmp_path / "probe.txt"
    requirements.write_text(f"{NEEDS_TORCH}\n{EXTENSION}\ntorch\n")
    lines: list[str] = []
    built = build(_request(requirements, index), say=lines.append)
    assert built.info.packages == {PURE: "1.0", NEEDS_TORCH: "1.0", EXTENSION: "1.0"}
    assert [(item.requirement.name, item.version) for item in built.from_image] == [
        ("torch", current().packages["torch"])
    ]
    steps = [line.split("] ", 1)[1] for line in lines]
    assert steps[1].startswith("resolving 3 requirements against the image's")
    assert f"building {EXTENSION} 1.0 from its source distribution" in steps
    assert steps[-2].startswith("packing ")
    lock = read_lock(tmp_path / "probe.lock")
    assert lock.package_set == current().identity
    assert [item.name for item in lock.packages] == [EXTENSION, PURE, NEEDS_TORCH]
    listing = _listing(built.path)
    for entry in ("addon.json", "package-set", "probe.lock", "site-packages/addon_probe_torch.py",
                  "site-packages/__pycache__/addon_probe_torch.cpython-311.pyc"):  # fmt: skip
        assert any(line.endswith(f"squashfs-root/{entry}") for line in listing), entry
    # Owned by root, one time for everything: the same tree packs to the same bytes.
    assert all(" root/root " in line and " 1980-01-01 00:00 " in line for line in listing)
    _check_extension(built.path, tmp_path / "unpacked")


def _check_extension(addon: Path, unpacked: Path) -> None:
    """The add-on's C++ extension loads and was compiled against the headers of the torch
    this environment has (no isolated build's torch)."""
    subprocess.run(["unsquashfs", "-no-progress", "-dest", str(unpacked), str(addon)],
                   capture_output=True, check=True, timeout=120)  # fmt: skip
    probe = (
        "import sys\n"
        f"sys.path.append({str(unpacked / 'site-packages')!r})\n"
        "import addon_probe_ext\n"
        "print(*addon_probe_ext.built_for(), addon_probe_ext.__file__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env=env, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    *headers, where = proc.stdout.split()
    assert headers == version("torch").split("+")[0].split(".")
    assert where.startswith(str(unpacked / "site-packages" / "addon_probe_ext."))


def test_refusals_exit_2_naming_requirement_image_package_and_version(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch_version = current().packages["torch"]
    pinned = f"{PINS_TORCH} 1.0 requires torch==2.5.1, but the image has torch {torch_version}"
    direct = f"line 2: torch==2.5.1 would replace the image's torch {torch_version}"
    cases = [
        (f"{PINS_TORCH}\n", pinned),
        (f"{PURE}\ntorch==2.5.1\n", direct),
        ("torch\n", "nothing to add: the image satisfies every requirement of "),
    ]
    for text, message in cases:
        requirements = tmp_path / "probe.txt"
        requirements.write_text(text)
        status = main(["addon", "build", "-r", str(requirements), "--find-links", str(index),
                       "--no-index"])  # fmt: skip
        err = capsys.readouterr().err
        assert status == 2, err
        assert message in err
        assert not (tmp_path / "probe.addon.sqsh").exists()


def test_a_lock_for_another_package_set_is_refused_naming_both(tmp_path: Path) -> None:
    lock = tmp_path / "timm.lock"
    lock.write_text(
        "# name: timm\n# package-set: " + "e" * 64 + "\n# interpreter: python 3.9, cpython-39, "
        "linux-aarch64\n# image: image ddpimg gpu, lock pypi-arm64 0123\ntimm==1.0.31 \\\n"
        "    --hash=sha256:" + "1" * 64 + "\n    # timm-1.0.31-py3-none-any.whl\n"
    )
    with pytest.raises(AddonError) as caught:
        build(BuildRequest(None, lock, None, None))
    assert caught.value.message.startswith(
        "the lock of add-on timm was made for package set eeeeeeeeeeee (python 3.9, "
        "cpython-39, linux-aarch64; image ddpimg gpu, lock pypi-arm64 0123), and this image's "
        f"is {current().short}"
    )


def test_compiled_code_without_a_compiler_is_refused_naming_the_package(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "csrc").mkdir(parents=True)
    (project / "csrc" / "op.cpp").write_text("int f() { return 1; }\n")
    item = Locked(EXTENSION, "1.0", "0" * 64, "addon_probe_ext-1.0.tar.gz")
    image = current()
    check_buildable(item, project, image, Toolchain("/usr/bin/g++"))
    with pytest.raises(AddonError) as caught:
        check_buildable(item, project, image, Toolchain(None))
    assert caught.value.message == (
        f"{EXTENSION} 1.0 is a source distribution with compiled code (csrc/op.cpp), and this "
        "image has no C/C++ compiler (the cpu image compiles nothing)"
    )
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["hatchling"]\n')
    with pytest.raises(AddonError, match="built by hatchling, which the image does not have"):
        check_buildable(item, project, image, Toolchain("/usr/bin/g++"))
