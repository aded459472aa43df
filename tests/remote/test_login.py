"""The login node checked before anything is staged: each thing missing there is named."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote.login import check_login, parse_facts, site_on_login_node
from tests.remote.fakes import LocalLogin

REPO = Path(__file__).resolve().parents[2]


def test_a_site_by_name_or_file_is_what_the_login_nodes_ddpimg_resolves(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path)
    found = check_login(login, None, "local")
    assert (found.site, found.site_arg, found.ddpimg) == ("local", "local", ("ddpimg",))
    assert found.where.startswith("ddpimg /")
    assert found.where.endswith("/bin/ddpimg")
    profile = login.home / "sites" / "mine.toml"
    profile.parent.mkdir()
    text = (REPO / "site-profiles" / "local.toml").read_text()
    profile.write_text(text.replace('name = "local"', 'name = "mine"', 1))
    found = check_login(login, None, "sites/mine.toml")
    assert (found.site, found.site_arg) == ("mine", str(profile))


def test_auto_on_a_login_node_no_profile_matches_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match="login: the login node matches no site profile") as found:
        check_login(LocalLogin(tmp_path), None, "auto")
    assert "ddpimg site probe --out ~/mycluster.toml" in str(found.value)


def test_an_unknown_site_says_what_the_login_nodes_ddpimg_said(tmp_path: Path) -> None:
    with pytest.raises(
        DdpimgError, match=r"cannot resolve the site \(--site nosuch\): ddpimg: error: "
    ):
        check_login(LocalLogin(tmp_path), None, "nosuch")


def test_no_ddpimg_and_no_slurm_are_named_with_the_path(tmp_path: Path) -> None:
    bare = LocalLogin(tmp_path, path=f"{tmp_path / 'bin'}:/usr/bin:/bin")
    message = f"login: ddpimg is not on the login node's PATH for ssh commands (PATH={bare.path})"
    with pytest.raises(DdpimgError, match=re.escape(message)):
        check_login(bare, None, "local")
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("base64", "head", "tar", "sha256sum"):
        (tools / name).symlink_to(shutil.which(name) or name)
    no_slurm = LocalLogin(tmp_path / "other", path=str(tools))
    with pytest.raises(
        DdpimgError, match=r"login: sbatch, scontrol, scancel not found on the login node \(PATH="
    ):
        check_login(no_slurm, None, "local")


def test_remote_ddpimg_that_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(
        DdpimgError, match=r"login: ~/venv/bin/ddpimg cannot be run on the login node"
    ):
        check_login(LocalLogin(tmp_path), ("~/venv/bin/ddpimg",), "local")


def test_a_site_name_the_login_node_answers_out_of_bounds_is_refused(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path)
    login.install("ddpimg", "#!/bin/sh\nprintf '%s' '" + json.dumps({"site": "\x1b[2J"}) + "'\n")
    with pytest.raises(
        DdpimgError, match="ddpimg env --json on the login node did not name a site"
    ):
        check_login(login, None, "x")


def test_facts_are_the_first_printable_bounded_value_of_each_name() -> None:
    text = "home /h\nhome /other\npath \x1b[2J\nwhich-x " + "a" * 5000 + "\nnoval\n"
    assert parse_facts(text) == {"home": "/h", "noval": ""}


@pytest.mark.parametrize(
    ("site", "home", "given"),
    [
        ("puhti", "/h", "puhti"),
        ("x.toml", "/h/", "/h/x.toml"),
        ("~/d/x.toml", "/h", "/h/d/x.toml"),
        ("/abs/x.toml", "/h", "/abs/x.toml"),
        ("d/x", "/h", "/h/d/x"),
        ("x.toml", "", "x.toml"),
    ],
)
def test_site_on_login_node(site: str, home: str, given: str) -> None:
    assert site_on_login_node(site, home) == given
