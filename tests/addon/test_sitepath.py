"""The start-up hook and the package set's identity (ddpimg.addon.sitepath): the pure parts
by table, the hook in real interpreters (a venv, and a venv over a system Python's site
packages) with add-ons under a root of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpimg.addon import sitepath


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("PyYAML", "pyyaml"),
        ("huggingface_hub", "huggingface-hub"),
        ("zope.interface", "zope-interface"),
        ("a--b__c..d", "a-b-c-d"),
        ("_private", "-private"),
        ("torch", "torch"),
    ],
)
def test_canonical_name_is_pep_503(given: str, expected: str) -> None:
    assert sitepath.canonical_name(given) == expected


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("timm", True),
        ("lab-utils_2.0", True),
        ("", False),
        ("-x", False),
        (".hidden", False),
        ("a/b", False),
        ("a b", False),
        ("é", False),
        ("x" * 64, True),
        ("x" * 65, False),
    ],
)
def test_valid_name(name: str, valid: bool) -> None:
    assert sitepath.valid_name(name) is valid


def test_distributions_from_metadata_directory_names(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "site-packages", tmp_path / "b" / "site-packages"
    for folder, names in (
        (first, ["torch-2.13.0+cpu.dist-info", "PyYAML-6.0.egg-info", "ddpimg-0.1.0.dist-info",
                 "numpy", "README.txt"]),
        (second, ["torch-2.5.1.dist-info", "six-1.16.0-py3.11.egg-info"]),
    ):  # fmt: skip
        folder.mkdir(parents=True)
        for name in names:
            (folder / name).mkdir()
    found = sitepath.distributions([str(first), str(second)])
    # The first of a name wins, as an import would; ddpimg itself is not part of the set.
    assert found == {"torch": "2.13.0+cpu", "pyyaml": "6.0", "six": "1.16.0"}


def test_identity_follows_every_version_and_the_interpreter() -> None:
    facts = {"python": "3.11", "implementation": "cpython-311", "platform": "linux-x86_64"}
    packages = {"torch": "2.13.0+cpu", "numpy": "2.4.6"}
    identity = sitepath.package_set_id(facts, packages)
    assert identity == sitepath.package_set_id(dict(reversed(facts.items())), packages)
    assert identity != sitepath.package_set_id(facts, packages | {"torch": "2.14.1"})
    assert identity != sitepath.package_set_id(facts | {"python": "3.12"}, packages)
    assert len(identity) == 64


def _venv(path: Path, system_site_packages: bool = False) -> Path:
    """A venv of this interpreter without pip (fast), with the hook installed."""
    options = ["--without-pip"] + (["--system-site-packages"] if system_site_packages else [])
    subprocess.run([sys.executable, "-m", "venv", *options, str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    sitepath.install_hook(site)
    return python


PROBE = (
    "import json, sys, _ddpimg_addons as hook\n"
    "try:\n"
    "    import addon_probe_mod\n"
    "    found = addon_probe_mod.__file__\n"
    "except ImportError:\n"
    "    found = None\n"
    "print(json.dumps({'path': sys.path, 'found': found, 'identity':\n"
    "    hook.current_package_set()[0], 'added': hook.added}))\n"
)


def _run(python: Path, root: Path) -> tuple[dict[str, object], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run(
        [str(python), "-c", PROBE], capture_output=True, text=True, timeout=60, check=True,
        env=env | {sitepath.ROOT_VARIABLE: str(root)},
    )  # fmt: skip
    return json.loads(proc.stdout), proc.stderr


def _addon(root: Path, name: str, identity: str) -> Path:
    site = root / name / sitepath.SITE_DIR
    site.mkdir(parents=True)
    (site / "addon_probe_mod.py").write_text("VALUE = 1\n")
    (root / name / sitepath.PACKAGE_SET_FILE).write_text(identity + "\n")
    return site


@pytest.mark.parametrize("system_site_packages", [False, True], ids=["venv", "system-site"])
def test_the_hook_appends_an_addon_after_every_site_directory(
    tmp_path: Path, system_site_packages: bool
) -> None:
    python = _venv(tmp_path / "venv", system_site_packages)
    root = tmp_path / "addons"
    root.mkdir()
    identity = str(_run(python, root)[0]["identity"])
    site = _addon(root, "probe", identity)
    seen, stderr = _run(python, root)
    assert seen["found"] == str(site / "addon_probe_mod.py"), stderr
    assert seen["added"] == ["probe"]
    path = [str(entry) for entry in seen["path"]]  # type: ignore[attr-defined]
    last_site = max(
        i for i, entry in enumerate(path) if entry.endswith(("site-packages", "dist-packages"))
        and not entry.startswith(str(root))
    )  # fmt: skip
    assert path.index(str(site)) > last_site, path
    assert stderr == ""


def test_an_addon_for_another_package_set_stays_off_the_path(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    root = tmp_path / "addons"
    _addon(root, "other", "0" * 64)
    seen, stderr = _run(python, root)
    assert seen["found"] is None
    assert seen["added"] == []
    assert stderr.startswith("ddpimg: warning: add-on other (")
    assert "made for package set 000000000000, this environment's is " in stderr
    assert stderr.count("\n") == 1
