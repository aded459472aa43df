"""The lock files: made from one input list, complete with hashes, in step with the venvs'."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.containers.recipes import CONTAINERS, ROOT

LOCKS = sorted((CONTAINERS / "lock").glob("*.txt"))
TRAIN = ROOT / "requirements" / "train.txt"
# containers/overrides/NAME.txt: pins that replace train.txt's in lock/NAME.txt (uv --override).
OVERRIDES = CONTAINERS / "overrides"
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
# install-python.sh builds these without build isolation: their build tools must be locked.
BUILD_TOOLS = ("setuptools", "wheel", "cython", "build")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(path: Path) -> dict[str, list[tuple[str, int]]]:
    """name -> [(version, number of hashes)], one item per marker variant."""
    found: dict[str, list[tuple[str, int]]] = {}
    current: list[tuple[str, int]] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        match = ENTRY.match(line)
        if match:
            current = found.setdefault(_normal(match.group(1)), [])
            current.append((match.group(2), 0))
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            version, hashes = current[-1]
            current[-1] = (version, hashes + 1)
    return found


def pins(path: Path) -> dict[str, str | None]:
    """The requirements of a requirements file: name -> pinned version (None: unpinned)."""
    result: dict[str, str | None] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        result[_normal(name)] = version.strip() or None
    return result


def test_there_is_a_lock_for_each_gpu_flavour() -> None:
    assert CONTAINERS / "lock" / "pypi.txt" in LOCKS
    assert CONTAINERS / "lock" / "pypi-cu128.txt" in LOCKS
    assert CONTAINERS / "lock" / "pypi-arm64.txt" in LOCKS


def test_the_input_list_is_the_training_stack_plus_build_tools() -> None:
    text = (CONTAINERS / "requirements.in").read_text(encoding="utf-8")
    assert "-r ../requirements/train.txt" in text.splitlines()
    assert set(pins(CONTAINERS / "requirements.in")) == set(BUILD_TOOLS)


def wanted(lock: Path) -> dict[str, str | None]:
    """What ``lock`` must pin: train.txt's pins, replaced by the lock's override file's."""
    override = OVERRIDES / lock.name
    return pins(TRAIN) | (pins(override) if override.is_file() else {})


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_lock_pins_what_train_txt_pins(lock: Path) -> None:
    locked = entries(lock)
    for name, version in wanted(lock).items():
        assert name in locked, f"{lock.name} lacks {name}: run `nox -s lock`"
        if version is not None:
            # A pin with a local label (2.13.0+cpu) names that build; one without, any.
            versions = {v if "+" in version else v.split("+")[0] for v, _ in locked[name]}
            assert versions == {version}, f"{lock.name}: {name} {versions} != {version}"
    for tool in BUILD_TOOLS:
        assert tool in locked, f"{lock.name} lacks the build tool {tool}"


@pytest.mark.parametrize("override", sorted(OVERRIDES.glob("*.txt")), ids=lambda p: p.name)
def test_an_override_file_replaces_pins_of_its_lock(override: Path) -> None:
    lock = CONTAINERS / "lock" / override.name
    assert lock.is_file(), f"{override.name} overrides no lock: run `nox -s lock -- {lock.stem}`"
    replaced = pins(override)
    assert replaced
    assert set(replaced) <= set(pins(TRAIN))
    assert all(replaced.values()), f"{override.name}: every override pins a version"
    assert f"--override containers/overrides/{override.name}" in lock.read_text("utf-8")


def test_wanted_takes_the_override_pins() -> None:
    assert wanted(CONTAINERS / "lock" / "pypi-cu128.txt")["torch"] == "2.10.0"
    assert wanted(CONTAINERS / "lock" / "pypi.txt")["torch"] == pins(TRAIN)["torch"]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_every_locked_package_has_hashes(lock: Path) -> None:
    unhashed = [
        f"{name}=={version}"
        for name, variants in entries(lock).items()
        for version, hashes in variants
        if hashes == 0
    ]
    assert entries(lock)
    assert not unhashed


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_lock_says_how_it_was_made(lock: Path) -> None:
    assert f"nox -s lock -- {lock.stem}" in lock.read_text(encoding="utf-8")


def test_entries_reads_markers_and_hashes(tmp_path: Path) -> None:
    lock = tmp_path / "l.txt"
    lock.write_text(
        "numpy==2.4.6 ; python_full_version < '3.12' \\\n"
        "    --hash=sha256:aa \\\n    --hash=sha256:bb\n"
        "    # via deepspeed\n"
        "numpy==2.5.5 ; python_full_version >= '3.12' \\\n    --hash=sha256:cc\n"
        "Typing_Extensions==4.16.0\n"
    )
    assert entries(lock) == {
        "numpy": [("2.4.6", 2), ("2.5.5", 1)],
        "typing-extensions": [("4.16.0", 0)],
    }


def test_the_cpu_lock_has_torchs_cpu_build_and_no_cuda_package() -> None:
    lock = CONTAINERS / "lock" / "cpu.txt"
    locked = entries(lock)
    assert locked["torch"] == [("2.13.0+cpu", 1)]  # the one x86-64 file, hashed
    assert [version for version, _ in locked["torchvision"]] == ["0.28.0"]
    cuda = sorted(name for name in locked if name.startswith(("nvidia-", "cuda-", "triton")))
    assert not cuda, f"cpu.txt locks CUDA packages: {cuda}"
    # The same DeepSpeed and mpi4py as the GPU flavours'.
    gpu = entries(CONTAINERS / "lock" / "pypi.txt")
    for name in ("deepspeed", "mpi4py"):
        assert locked[name][0][0] == gpu[name][0][0], name
