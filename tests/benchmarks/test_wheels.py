"""The device's wheel list (benchmarks/runbook/wheels.py): which requirements travel, and the
proof, a real pip resolution with no index over local folders of made-up wheels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from runbook import wheels


def test_the_stack_takes_the_devices_version_of_what_it_has() -> None:
    device = wheels.read_device_packages()
    wanted = {
        Requirement(text).name: Requirement(text) for text in wheels.stack_requirements(device)
    }
    # On the device: its own version, whatever requirements/train.txt pins.
    assert "torch" in device
    assert str(wanted["torch"].specifier) == ""
    # Not on the device: the pin travels with it.
    assert "deepspeed" not in device
    assert str(wanted["deepspeed"].specifier) == f"=={wheels.read_lock()['deepspeed']}"
    version, extras = wheels.ddpimg_metadata()
    assert wanted["ddpimg"].extras == set(extras)
    assert str(wanted["ddpimg"].specifier) == f"=={version}"


@pytest.mark.parametrize(
    ("requirement", "version", "lock_version", "satisfied"),
    [
        ("torch>=2.4", "2.11.0", "2.14.1", True),
        ("torch>=2.12", "2.11.0", "2.14.1", False),
        # Unread: a bound far below the lock's version is taken as met...
        ("packaging>=20.0", None, "26.3", True),
        # ...one as recent as the lock's own version is not: that wheel travels too.
        ("typing-extensions>=4.16.0", None, "4.16.0", False),
        ("typing-extensions>=4.15.0", None, "4.16.0", True),
        ("pytest", None, "9.2.0", True),
        ("pytest>=8", None, None, True),
    ],
)
def test_whether_the_device_satisfies_a_requirement(
    requirement: str, version: str | None, lock_version: str | None, satisfied: bool
) -> None:
    assert wheels.device_satisfies(Requirement(requirement), version, lock_version) is satisfied


@pytest.mark.parametrize(
    ("requirement", "extras", "applies"),
    [
        ("numpy", (), True),
        ('tomli>=2.0; python_version < "3.11"', (), False),
        ('torch>=2.4; extra == "train"', ("train",), True),
        ('torch>=2.4; extra == "train"', (), False),
        ('pywin32; sys_platform == "win32"', (), False),
    ],
)
def test_markers_are_judged_for_the_devices_python(
    requirement: str, extras: tuple[str, ...], applies: bool
) -> None:
    assert wheels.applies(Requirement(requirement), extras) is applies


def make_folders(tmp_path: Path, carried: dict[str, list[str]]) -> Path:
    folder = tmp_path / "whl"
    folder.mkdir()
    for name, requires in carried.items():
        wheels.stub_wheel(folder, name, "1.0", requires)
    return folder


DEVICE = {"gamma": None, "torch": "2.11.0"}


def test_the_proof_names_a_missing_wheel(tmp_path: Path) -> None:
    folder = make_folders(tmp_path, {"alpha": ["beta>=1.0", "gamma"]})
    with pytest.raises(wheels.WheelError, match=r"No matching distribution found for beta>=1\.0"):
        wheels.prove(["alpha", "torch"], folder, DEVICE, tmp_path / "work", wheels.pip_command())


def test_the_proof_resolves_from_the_folder_and_the_device(tmp_path: Path) -> None:
    folder = make_folders(
        tmp_path, {"alpha": ["beta>=1.0", "gamma>=2", "torch>=2.4"], "beta": [], "delta": []}
    )
    proof = wheels.prove(["alpha"], folder, DEVICE, tmp_path / "work", wheels.pip_command())
    assert proof.carried == {"alpha": "1.0", "beta": "1.0"}
    assert proof.device == {"gamma": "version not read", "torch": "2.11.0"}
    assert proof.unused == ["delta-1.0-py3-none-any.whl"]
    assert not proof.ok
    assert proof.assumptions == ["gamma>=2 (alpha)"]


def test_the_proof_refuses_a_device_version_below_a_requirement(tmp_path: Path) -> None:
    folder = make_folders(tmp_path, {"alpha": ["torch>=2.12"]})
    with pytest.raises(wheels.WheelError, match=r"torch>=2\.12"):
        wheels.prove(["alpha"], folder, DEVICE, tmp_path / "work", wheels.pip_command())


def test_an_unread_device_version_stands_at_the_locks_for_an_upper_bound(tmp_path: Path) -> None:
    # wandb 0.31 asks protobuf<8: a stub at 9999 fails it; the lock's version meets it.
    folder = make_folders(tmp_path, {"alpha": ["gamma>=5,<8"]})
    with pytest.raises(wheels.WheelError, match=r"gamma"):
        wheels.prove(["alpha"], folder, DEVICE, tmp_path / "work", wheels.pip_command())
    proof = wheels.prove(
        ["alpha"], folder, DEVICE, tmp_path / "lock", wheels.pip_command(), lock={"gamma": "7.1"}
    )
    assert proof.device == {"gamma": "version not read"}
    assert proof.assumptions == ["gamma<8,>=5 (alpha)"]
