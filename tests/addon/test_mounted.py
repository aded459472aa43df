"""Add-ons at run time (ddpimg.addon.mounted): checked before any rendezvous, listed, and
recorded. The add-ons are directories under a root of the test's own (DDPIMG_ADDON_ROOT),
as a mount shows them."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from ddpimg.addon import sitepath
from ddpimg.addon.errors import AddonError
from ddpimg.addon.lockfile import Locked, new_lock
from ddpimg.addon.metadata import AddonInfo, write_info
from ddpimg.addon.mounted import addon_records, check_addons, digests, explain_lines
from ddpimg.addon.packageset import PackageSet
from ddpimg.cli import main
from ddpimg.runtime.reexec import REEXEC_MARK


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch) -> None:
    """This interpreter as if the start-up hook had run (an image's Python)."""
    monkeypatch.setitem(sys.modules, sitepath.HOOK_MODULE, types.ModuleType(sitepath.HOOK_MODULE))


def _addon(root: Path, name: str, identity: str, packages: dict[str, str]) -> Path:
    image = PackageSet(identity, sitepath.interpreter(), {}, {})
    lock = new_lock(
        name, image, [], [Locked(p, v, "0" * 64, f"{p}-{v}.tar.gz") for p, v in packages.items()]
    )
    directory = root / name
    (directory / sitepath.SITE_DIR).mkdir(parents=True)
    write_info(directory, AddonInfo.from_lock(lock, "9" * 64), lock.text())
    return directory


def _env(root: Path, told: str = "") -> dict[str, str]:
    return {sitepath.ROOT_VARIABLE: str(root), "DDPIMG_ADDONS": told}


def _here() -> str:
    return sitepath.current_package_set()[0]


def test_nothing_mounted_is_nothing_to_check(tmp_path: Path) -> None:
    assert check_addons(_env(tmp_path / "none")) == []
    assert explain_lines(_env(tmp_path / "none")) == []
    assert explain_lines(_env(tmp_path)) == [f"add-ons: none mounted at {tmp_path}"]


def test_addons_for_this_environment_pass_and_are_recorded(tmp_path: Path, hooked: None) -> None:
    _addon(tmp_path, "timm", _here(), {"timm": "1.0.31"})
    _addon(tmp_path, "lab", _here(), {"lab-utils": "2.0"})
    env = _env(tmp_path, f"timm={'a' * 64},lab=junk,,x={'b' * 64}")
    assert [addon.name for addon in check_addons(env)] == ["lab", "timm"]
    records = addon_records(env)
    assert records[1] == {
        "name": "timm",
        "path": str(tmp_path / "timm"),
        "sha256": "a" * 64,
        "packages": {"timm": "1.0.31"},
        "package_set": _here(),
        "lock_sha256": "9" * 64,
    }
    assert records[0]["sha256"] is None  # what the mounting side did not tell
    lines = explain_lines(env)
    assert lines[1] == (
        f"add-on timm at {tmp_path / 'timm'}: timm 1.0.31; sha256 aaaaaaaaaaaaaaaa...; made for "
        "this image's package set"
    )


def test_an_addon_for_another_package_set_is_refused_naming_both(
    tmp_path: Path, hooked: None
) -> None:
    _addon(tmp_path, "timm", "c" * 64, {"timm": "1.0.31"})
    with pytest.raises(AddonError) as caught:
        check_addons(_env(tmp_path))
    message = str(caught.value)
    assert message.startswith(
        f"add-on timm ({tmp_path / 'timm'}) was made for package set cccccccccccc "
    )
    assert f"but this image's is {_here()[:12]} (python " in message
    assert "build it again in this image with ddpimg addon build --lock timm.lock" in message
    assert "\n" not in message  # one line on every rank
    assert "made for ANOTHER package set (cccccccccccc" in explain_lines(_env(tmp_path))[0]


def test_the_same_package_in_two_addons_and_an_unreadable_one_are_refused(
    tmp_path: Path, hooked: None
) -> None:
    _addon(tmp_path, "a", _here(), {"einops-x": "1"})
    _addon(tmp_path, "b", _here(), {"einops-x": "2"})
    with pytest.raises(AddonError, match=r"add-on b \(.*\) and add-on a both hold einops-x"):
        check_addons(_env(tmp_path))
    (tmp_path / "b" / "addon.json").write_text("{")
    with pytest.raises(AddonError, match=r"add-on b \(.*\) cannot be used: .* no add-on"):
        check_addons(_env(tmp_path))


def test_without_the_start_up_hook_the_environment_is_told_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, sitepath.HOOK_MODULE, raising=False)
    _addon(tmp_path, "timm", _here(), {"timm": "1.0.31"})
    with pytest.raises(AddonError, match="run ddpimg addon install-hook in it once"):
        check_addons(_env(tmp_path))


def test_train_refuses_before_anything_else_with_exit_2_and_one_line(
    tmp_path: Path,
    hooked: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _addon(tmp_path, "timm", "d" * 64, {"timm": "1.0.31"})
    monkeypatch.setenv(sitepath.ROOT_VARIABLE, str(tmp_path))
    monkeypatch.setenv(REEXEC_MARK, "1")  # as in the re-executed process: no exec here
    status = main(["train", "--site", "local", "--data", "synthetic", "--max-steps", "1"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("ddpimg: error: add-on timm (")
    assert err.count("\n") == 1


def test_digests_take_only_well_formed_entries() -> None:
    assert digests({"DDPIMG_ADDONS": f" a={'1' * 64} ,b=2,{'x' * 70}={'3' * 64}"}) == {
        "a": "1" * 64
    }


def test_env_explain_lists_the_addons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _addon(tmp_path, "timm", _here(), {"timm": "1.0.31"})
    monkeypatch.setenv(sitepath.ROOT_VARIABLE, str(tmp_path))
    assert main(["env", "--explain", "--json", "--site", "local"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [addon["name"] for addon in document["addons"]] == ["timm"]
    assert document["explain"][-1].startswith(f"add-on timm at {tmp_path / 'timm'}: timm 1.0.31")
