"""A requirements file read for an add-on, and checked against the image's packages
(ddpimg.addon.requirements)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.addon.errors import AddonError
from ddpimg.addon.packageset import PackageSet
from ddpimg.addon.requirements import check_against_image, included_files, read_requirements

IMAGE = PackageSet(
    "a" * 64,
    {"python": "3.11", "implementation": "cpython-311", "platform": "linux-x86_64"},
    {"torch": "2.13.0+cpu", "numpy": "2.4.6", "einops": "0.8.2", "pyyaml": "6.0.4"},
    {},
)


def _write(tmp_path: Path, text: str, name: str = "requirements.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_names_versions_extras_markers_comments_and_continuations(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "# my packages\n"
        "timm==1.0.31  # the models\n"
        "hydra-core[extra] >=1.3 ; python_version >= '3.10'\n"
        "einops \\\n    >=0.8\n"
        "sentencepiece --hash=sha256:" + "0" * 64 + "\n"
        "\n"
        "  # indented comment\n"
        "safetensors>=0.4\n",
    )
    found = read_requirements(path)
    assert [item.text for item in found] == [
        "timm==1.0.31",
        "hydra-core[extra] >=1.3 ; python_version >= '3.10'",
        "einops >=0.8",
        "sentencepiece",
        "safetensors>=0.4",
    ]
    assert [item.where for item in found] == [f"{path} line {number}" for number in (2, 3, 4, 6, 9)]
    assert found[1].name == "hydra-core"
    assert found[1].applies()


def test_includes_are_read_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "common").mkdir()
    _write(tmp_path / "common", "einops\n", "base.txt")
    path = _write(tmp_path, "-r common/base.txt\ntimm\n")
    assert [item.name for item in read_requirements(path)] == ["einops", "timm"]
    assert included_files(path) == [path, tmp_path / "common" / "base.txt"]


def test_an_include_circle_is_named(tmp_path: Path) -> None:
    _write(tmp_path, "-r a.txt\n", "b.txt")
    path = _write(tmp_path, "timm\n-r b.txt\n", "a.txt")
    with pytest.raises(
        AddonError, match=r"a\.txt includes itself \(-r\), through a\.txt -> b\.txt"
    ):
        read_requirements(path)


@pytest.mark.parametrize(
    ("line", "message", "hint"),
    [
        ("--index-url https://mirror/simple", "--index-url: not taken", "your pip's own settings"),
        ("-e ./mypkg", "-e: not taken", "pip wheel --no-deps DIR"),
        ("-c constraints.txt", "-c: not taken", "in the requirements themselves"),
        ("./dist/lab-1.0.whl", "a path or URL", "--find-links DIR"),
        ("https://host/lab-1.0.tar.gz", "a path or URL", "--find-links DIR"),
        ("lab @ git+https://host/lab", "a requirement by URL", "--find-links DIR"),
        ("timm===", "is not a requirement", "name==1.2"),
    ],
)
def test_what_an_addon_does_not_take_is_refused_with_the_way_to_say_it(
    tmp_path: Path, line: str, message: str, hint: str
) -> None:
    path = _write(tmp_path, f"timm\n{line}\n")
    with pytest.raises(AddonError, match=rf"requirements\.txt line 2: .*{message}") as caught:
        read_requirements(path)
    assert hint in (caught.value.hint or "")


def test_an_empty_file_and_a_missing_file_are_errors(tmp_path: Path) -> None:
    with pytest.raises(AddonError, match="no requirement in it"):
        read_requirements(_write(tmp_path, "# nothing\n\n"))
    with pytest.raises(AddonError, match="cannot be read: No such file or directory"):
        read_requirements(tmp_path / "missing.txt")


def test_requirements_the_image_satisfies_are_taken_from_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "timm\ntorch>=2.4\nEinops==0.8.2\nnumpy<2 ; python_version < '3'\n")
    satisfied = check_against_image(read_requirements(path), IMAGE)
    assert [(item.requirement.name, item.version) for item in satisfied] == [
        ("torch", "2.13.0+cpu"),
        ("einops", "0.8.2"),
    ]


def test_every_requirement_that_would_change_an_image_package_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "timm\ntorch==2.5.1\nnumpy<2\nPyYAML>=7\n")
    with pytest.raises(AddonError) as caught:
        check_against_image(read_requirements(path), IMAGE)
    message = caught.value.message
    assert message.startswith("3 requirements would change the image's packages")
    assert f"{path} line 2: torch==2.5.1 would replace the image's torch 2.13.0+cpu" in message
    assert f"{path} line 3: numpy<2 would replace the image's numpy 2.4.6" in message
    assert f"{path} line 4: PyYAML>=7 would replace the image's pyyaml 6.0.4" in message
    assert "loosen it to admit the image's version" in (caught.value.hint or "")
