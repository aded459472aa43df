"""ddpimg.imagenames: one function names every image, and every document uses its names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from containers.imagebuild import locks, sif
from ddpimg.hardware.builds import BUILDS
from ddpimg.imagenames import ImageNames, image_names, names_of_tag

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "containers" / "ddp.def",
]
KINDS = ("gpu", "cpu", "standalone")


@pytest.mark.parametrize(
    ("kind", "variant", "names"),
    [
        ("gpu", "", ImageNames("ddpimg:gpu", "ddp.sif", "ddpimg+gpu.sqsh")),
        ("gpu", "cu128", ImageNames("ddpimg:gpu-cu128", "ddp-cu128.sif", "ddpimg+gpu-cu128.sqsh")),
        ("gpu", "arm64", ImageNames("ddpimg:gpu-arm64", "ddp-arm64.sif", "ddpimg+gpu-arm64.sqsh")),
        ("cpu", "", ImageNames("ddpimg:cpu", "ddp-cpu.sif", "ddpimg+cpu.sqsh")),
        ("standalone", "cu128", ImageNames("ddpimg:standalone-cu128", "ddp-standalone-cu128.sif",
                                           "ddpimg+standalone-cu128.sqsh")),
    ],
)  # fmt: skip
def test_image_names(kind: str, variant: str, names: ImageNames) -> None:
    assert image_names(kind, variant) == names
    assert names_of_tag(names.tag) == names


@pytest.mark.parametrize("tag", ["ddp:gpu", "ddpimg", "ddpimg:GPU", "ddpimg:gpu-", "x/ddpimg:gpu"])
def test_names_of_tag_refuses_other_tags(tag: str) -> None:
    with pytest.raises(ValueError, match="is not a ddpimg image tag"):
        names_of_tag(tag)


@pytest.mark.parametrize("build", [b for b in BUILDS.values() if b.lock in locks.LOCKS])
def test_the_builder_tags_each_flavour_as_the_build_table_says(build: object) -> None:
    assert locks.default_tag("gpu", build.lock) == build.image_tag  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("posargs", "output"),
    [
        ([], "ddp.sif"),
        (["gpu", "--torch", "pypi-cu128"], "ddp-cu128.sif"),
        (["cpu"], "ddp-cpu.sif"),
    ],
)
def test_nox_sif_writes_the_named_file(posargs: list[str], output: str) -> None:
    build = sif.parse_sif_options(posargs, {"REVISION": "r", "SOURCE_DATE_EPOCH": "1"})
    tag = build.build_args[0].removeprefix("IMAGE=")
    assert build.output == names_of_tag(tag).sif == output


def known_names() -> set[str]:
    variants = {""} | {lock.tag_suffix.removeprefix("-") for lock in locks.LOCKS.values()}
    variants |= {names_of_tag(build.image_tag).tag.partition("-")[2] for build in BUILDS.values()}
    names: set[str] = set()
    for kind in KINDS:
        for variant in variants:
            names.update(vars(image_names(kind, variant)).values())
    return names


# Our images' names as documents write them: ddp*.sif, ddpimg:TAG, ddpimg+TAG.sqsh.
DOCUMENTED = re.compile(r"(?<![\w.-])(ddp[\w.-]*\.sif|ddpimg:[a-z0-9-]+|ddpimg\+[\w.-]+\.sqsh)")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_documents_name_images_as_imagenames_does(document: Path) -> None:
    found = set(DOCUMENTED.findall(document.read_text(encoding="utf-8")))
    assert sorted(found - known_names()) == []


def test_the_documents_name_the_v100_image_at_all() -> None:
    """The bug this guards against: sbatch expected ddp-gpu-cu128.sif, the docs built
    ddp-cu128.sif."""
    text = "".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
    assert "ddp-cu128.sif" in text
    assert "ddp-gpu-cu128.sif" not in text
