"""What pip says, turned into what the user reads (ddpimg.addon.pipcalls): the outputs are
pip 23's own, as recorded from the image's pip."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.addon.errors import AddonError
from ddpimg.addon.packageset import PackageSet
from ddpimg.addon.pipcalls import parse_report, resolution_error
from ddpimg.addon.requirements import read_requirements

IMAGE = PackageSet(
    "a" * 64,
    {"python": "3.11", "implementation": "cpython-311", "platform": "linux-x86_64"},
    {"torch": "2.13.0+cpu", "numpy": "2.4.6"},
    {},
)
CONFLICT = """\
Looking in links: /opt/wheels, index
Processing ./index/addon_probe_pins-1.0-py3-none-any.whl (from -r pins.txt (line 1))
INFO: pip is looking at multiple versions of addon-probe-pins to determine which version is compatible with other requirements. This could take a while.
ERROR: Cannot install -r /tmp/ddpimg-addon-x/requirements.txt (line 1) because these package versions have conflicting dependencies.

The conflict is caused by:
    addon-probe-pins 1.0 depends on torch==2.5.1
    deep-thing 2.0 depends on numpy<2; python_version >= "3.8"
    The user requested (constraint) torch==2.13.0+cpu

To fix this you could try to:
1. loosen the range of package versions you've specified
2. remove package versions to allow pip attempt to solve the dependency conflict

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts
"""  # noqa: E501


def test_a_dependency_on_another_image_version_names_requirement_package_and_image(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pins.txt"
    path.write_text("addon-probe-pins\nother-top\n")
    error = resolution_error(CONFLICT, IMAGE, read_requirements(path))
    assert error.message.splitlines()[1:] == [
        "  - (needed by your requirements) deep-thing 2.0 requires numpy<2; "
        'python_version >= "3.8", but the image has numpy 2.4.6',
        f"  - {path} line 1: addon-probe-pins: addon-probe-pins 1.0 requires torch==2.5.1, but "
        "the image has torch 2.13.0+cpu",
    ]
    assert "never replaces, upgrades or shadows" in error.message


def test_a_missing_distribution_says_where_pip_looks(tmp_path: Path) -> None:
    output = (
        "ERROR: Could not find a version that satisfies the requirement timm (from versions: "
        "none)\nERROR: No matching distribution found for timm\n"
    )
    error = resolution_error(output, IMAGE, [])
    assert error.message.startswith("pip found no distribution of timm for this image")
    assert "--image IMAGE" in (error.hint or "")


def test_anything_else_is_pips_own_words(tmp_path: Path) -> None:
    error = resolution_error("ERROR: something \x1b[31m odd\n", IMAGE, [])
    assert "  | ERROR: something \\x1b[31m odd" in error.message


def test_the_report_lists_what_is_added_and_refuses_an_image_package() -> None:
    report = {
        "version": "1",
        "install": [
            {
                "metadata": {"name": "Timm", "version": "1.0.31"},
                "download_info": {
                    "url": "https://files/timm-1.0.31-py3-none-any.whl",
                    "archive_info": {"hashes": {"sha256": "5" * 64}},
                },
            },
            {"metadata": {"name": "einops", "version": "0.8.2"}, "download_info": {}},
        ],
    }
    found = parse_report(report, IMAGE)
    assert [(item.name, item.version, item.sha256) for item in found] == [
        ("einops", "0.8.2", None),
        ("timm", "1.0.31", "5" * 64),
    ]
    report["install"].append({"metadata": {"name": "torch", "version": "2.5.1"}})  # type: ignore[attr-defined]
    with pytest.raises(AddonError, match=r"would install torch 2\.5\.1 over the image's torch"):
        parse_report(report, IMAGE)
    with pytest.raises(AddonError, match="no 'install' list"):
        parse_report({"version": "1"}, IMAGE)


def test_a_build_backend_the_image_lacks_is_named() -> None:
    output = (
        "Preparing metadata (pyproject.toml): finished with status 'error'\n"
        "  ModuleNotFoundError: No module named 'hatchling'\n"
        "error: metadata-generation-failed\n"
    )
    error = resolution_error(output, IMAGE, [])
    assert error.message == (
        "a source distribution among the requirements is built by hatchling, which the image "
        "does not have"
    )


def test_image_packages_that_disagree_are_named_as_the_images_own() -> None:
    image = PackageSet(IMAGE.identity, IMAGE.interpreter,
                       {**IMAGE.packages, "setuptools": "66.1.1"}, {})  # fmt: skip
    output = (
        "The conflict is caused by:\n"
        "    torch 2.13.0+cpu depends on setuptools>=77.0.3\n"
        "    The user requested (constraint) setuptools==66.1.1\n"
    )
    error = resolution_error(output, image, [])
    assert error.message.splitlines() == [
        "the image's own packages disagree, so nothing can be resolved against them (pip check "
        "says the same):",
        "  - torch 2.13.0+cpu requires setuptools>=77.0.3, but the setuptools found first is "
        "66.1.1",
    ]
    assert "DIR/bin/pip uninstall setuptools" in (error.hint or "")
