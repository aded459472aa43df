"""containers/scripts/build_info.py: the build-info file every run's manifest.json records."""

from __future__ import annotations

import importlib.util
import json
import platform
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ddpimg.train.outputs import BUILD_INFO_DEFAULT, read_build_info
from tests.containers.recipes import CONTAINERS, DOCKERFILE

SCRIPT = CONTAINERS / "scripts" / "build_info.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_info", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_info = _load()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"SOURCE_DATE_EPOCH": ""}, None),
        ({"SOURCE_DATE_EPOCH": "0"}, "1970-01-01T00:00:00Z"),
        ({"SOURCE_DATE_EPOCH": "1767225600"}, "2026-01-01T00:00:00Z"),
    ],
)
def test_build_date_comes_from_source_date_epoch(env: dict[str, str], expected: str | None) -> None:
    assert build_info.build_date(env) == expected


@pytest.mark.parametrize("value", ["yesterday", "-1", "1.5"])
def test_malformed_source_date_epoch_is_an_error(value: str) -> None:
    with pytest.raises(ValueError, match=rf"SOURCE_DATE_EPOCH='{value}': expected seconds"):
        build_info.build_date({"SOURCE_DATE_EPOCH": value})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mpirun (Open MPI) 4.1.4\n\nReport bugs to ...", "4.1.4"),
        ("mpirun (Open MPI) 5.0.3rc1\n", "5.0.3rc1"),
        ("HYDRA build details:\n    Version: 4.1\n", None),
        ("", None),
    ],
)
def test_open_mpi_version(text: str, expected: str | None) -> None:
    assert build_info.open_mpi_version(text) == expected


def test_describe_records_what_it_is_given() -> None:
    args = build_info.parse_args(
        ["--out", "x.json", "--flavour", "cpu", "--torch-source", "pypi", "--lock", "l.txt",
         "--revision", "abc123", "--base-image", "ddpimg-base:bookworm"]
    )  # fmt: skip
    versions = {"torch": "2.14.1", "ddpimg": "0.1.0"}
    info = build_info.describe(
        args,
        {"SOURCE_DATE_EPOCH": "0", "DS_BUILD_OPS": "0", "TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX"},
        versions.get,
        "f" * 64,
        "4.1.4",
    )
    assert info["flavour"] == "cpu"
    assert info["revision"] == "abc123"
    assert info["base_image"] == "ddpimg-base:bookworm"
    assert info["build_date"] == "1970-01-01T00:00:00Z"
    assert info["lock"] == {"name": "pypi", "sha256": "f" * 64}
    assert info["packages"]["torch"] == "2.14.1"
    assert info["packages"]["deepspeed"] is None
    assert info["open_mpi"] == "4.1.4"
    assert info["deepspeed_build_ops"] is False
    assert info["torch_cuda_arch_list"] == "8.0;9.0+PTX"


def test_the_written_file_is_what_manifest_json_reads(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("torch==2.14.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    out = tmp_path / "etc" / "build-info.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--flavour", "gpu",
         "--torch-source", "pypi", "--lock", str(lock), "--revision", "r1"],
        env={"SOURCE_DATE_EPOCH": "86400", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    info = read_build_info({"DDPIMG_BUILD_INFO": str(out)})
    assert info == json.loads(out.read_text())
    assert info is not None
    assert info["build_date"] == "1970-01-02T00:00:00Z"
    assert info["revision"] == "r1"
    assert len(info["lock"]["sha256"]) == 64
    assert info["machine"] == platform.machine()


def test_the_image_puts_the_file_where_manifest_json_looks() -> None:
    assert f"--out {BUILD_INFO_DEFAULT}" in DOCKERFILE.read_text(encoding="utf-8")
