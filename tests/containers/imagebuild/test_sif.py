"""containers/imagebuild/sif.py: what `nox -s sif` builds, from which recipe, named how."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.imagebuild import locks, sif
from tests.containers.imagebuild.fakes import FakeSession
from tests.containers.recipes import DEFS

FACTS = {"REVISION": "abc", "SOURCE_DATE_EPOCH": "7", "CREATED": "x", "VERSION": "0.1.0"}


@pytest.mark.parametrize(
    ("posargs", "output", "build_args"),
    [
        ([], "ddp.sif", ("IMAGE=ddpimg:gpu",)),
        (["gpu", "--torch", "pypi-cu128"], "ddp-cu128.sif", ("IMAGE=ddpimg:gpu-cu128",)),
        (["cpu"], "ddp-cpu.sif", ("IMAGE=ddpimg:cpu",)),
        (["standalone"], "ddp-standalone.sif", ("REVISION=abc", "SOURCE_DATE_EPOCH=7")),
        (
            ["standalone", "--torch", "pypi-cu128"],
            "ddp-standalone-cu128.sif",
            (
                "REVISION=abc",
                "SOURCE_DATE_EPOCH=7",
                "TORCH_SOURCE=pypi-cu128",
                f"GPU_BASE={locks.CUDA_12_8_BASE}",
            ),
        ),
    ],
)
def test_parse_sif_options(posargs: list[str], output: str, build_args: tuple[str, ...]) -> None:
    build = sif.parse_sif_options(posargs, FACTS)
    assert (build.output, build.build_args) == (output, build_args)
    recipe = "ddp-standalone.def" if "standalone" in posargs else "ddp.def"
    assert build.recipe == Path("containers") / recipe
    assert build.cpu_title == ("cpu" in posargs)


def test_build_sif_retitles_ddp_def_for_the_cpu_image(session: FakeSession) -> None:
    assert "ddpimg (gpu)" in DEFS["ddp.def"].read_text(encoding="utf-8")
    sif.build_sif(session, "apptainer", sif.parse_sif_options(["cpu"], FACTS))
    build, test = session.runs
    assert build[:5] == ["apptainer", "build", "--force", "--build-arg", "IMAGE=ddpimg:cpu"]
    assert build[5] == "ddp-cpu.sif"
    assert Path(build[6]).name == "ddp.def"
    assert build[6] != "containers/ddp.def"  # the retitled copy
    assert test == ["apptainer", "test", "ddp-cpu.sif"]


def test_a_sif_is_built_at_the_last_commits_date_in_utc(session: FakeSession) -> None:
    for kind in ("gpu", "standalone"):
        sif.build_sif(session, "apptainer", sif.parse_sif_options([kind], FACTS))
    build_envs = session.envs[0::2]  # each build, then its test
    assert build_envs == [{"SOURCE_DATE_EPOCH": "7", "TZ": "UTC"}] * 2
