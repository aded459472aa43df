"""Which profile applies: --site > DDPIMG_SITE > auto-detection > generic."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ddpimg.errors import ProfileError
from ddpimg.site.load import load_profile
from ddpimg.site.select import (
    known_profiles,
    match_reason,
    profile_dirs,
    select_profile,
    shipped_profile_dir,
)
from tests.hangguard import hang_guard

from .conftest import WriteProfile

REPO_PROFILES = Path(__file__).resolve().parents[2] / "site-profiles"

ALPHA = '[site]\nname = "alpha"\n[match]\nhostnames = ["alpha-*"]\n'
BETA = '[site]\nname = "beta"\n[match]\nslurm_cluster_names = ["betacluster"]\n'
GAMMA = '[site]\nname = "gamma"\n[match]\nenv = { GAMMA_MARK = "yes*" }\n'


@pytest.fixture
def site_dir(tmp_path: Path, write_profile: WriteProfile) -> Path:
    """A DDPIMG_SITE_PATH directory with three auto-detectable profiles."""
    directory = tmp_path / "profiles"
    write_profile("alpha", ALPHA, directory)
    write_profile("beta", BETA, directory)
    write_profile("gamma", GAMMA, directory)
    return directory


@pytest.mark.parametrize(
    ("explicit", "site_var", "hostname", "expected"),
    [
        # --site beats DDPIMG_SITE and auto-detection.
        ("beta", "gamma", "alpha-1", ("beta", "--site")),
        ("beta", None, "alpha-1", ("beta", "--site")),
        ("generic", None, "alpha-1", ("generic", "--site")),
        # DDPIMG_SITE beats auto-detection.
        (None, "gamma", "alpha-1", ("gamma", "DDPIMG_SITE")),
        (None, "generic", "alpha-1", ("generic", "DDPIMG_SITE")),
        # Auto-detection beats the default.
        (None, None, "alpha-1", ("alpha", "auto: hostname 'alpha-1' matched 'alpha-*'")),
        # Nothing matches: the default.
        (None, None, "laptop", ("generic", "default")),
    ],
)
def test_precedence(
    site_dir: Path,
    explicit: str | None,
    site_var: str | None,
    hostname: str,
    expected: tuple[str, str],
) -> None:
    env = {"DDPIMG_SITE_PATH": str(site_dir)}
    if site_var is not None:
        env["DDPIMG_SITE"] = site_var
    selection = select_profile(env, hostname, explicit)
    assert (selection.profile.name, selection.reason) == expected


@pytest.mark.parametrize("source", ["--site", "DDPIMG_SITE"])
def test_a_value_with_a_slash_is_a_path(
    site_dir: Path, tmp_path: Path, write_profile: WriteProfile, source: str
) -> None:
    path = write_profile("elsewhere", directory=tmp_path / "not-on-the-search-path")
    env = {"DDPIMG_SITE_PATH": str(site_dir)}
    explicit = None
    if source == "--site":
        explicit = str(path)
    else:
        env["DDPIMG_SITE"] = str(path)
    selection = select_profile(env, "alpha-1", explicit)
    assert selection.profile.path == str(path)
    assert selection.reason == source


def test_relative_toml_name_is_a_path_not_a_profile_name(
    write_profile: WriteProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile("mine", directory=tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    assert select_profile({}, "host", "mine.toml").profile.name == "mine"
    with pytest.raises(ProfileError, match="unknown site profile 'mine'"):
        select_profile({}, "host", "mine")


@pytest.mark.parametrize(
    ("env", "hostname", "expected", "reason"),
    [
        ({}, "alpha-7.cluster.example.org", "alpha", "auto: hostname 'alpha-7' matched 'alpha-*'"),
        ({}, "ALPHA-7", "alpha", "auto: hostname 'alpha-7' matched 'alpha-*'"),
        (
            {"SLURM_CLUSTER_NAME": "betacluster"},
            "c001",
            "beta",
            "auto: SLURM_CLUSTER_NAME 'betacluster' matched",
        ),
        (
            {"GAMMA_MARK": "yes-please"},
            "c001",
            "gamma",
            "auto: GAMMA_MARK 'yes-please' matched 'yes*'",
        ),
        ({"GAMMA_MARK": "no"}, "c001", "generic", "default"),
        ({"SLURM_CLUSTER_NAME": "other"}, "c001", "generic", "default"),
        ({}, "", "generic", "default"),
    ],
)
def test_auto_detection_rules(
    site_dir: Path, env: dict[str, str], hostname: str, expected: str, reason: str
) -> None:
    selection = select_profile({"DDPIMG_SITE_PATH": str(site_dir), **env}, hostname)
    assert (selection.profile.name, selection.reason) == (expected, reason)


def test_two_matching_profiles_are_an_error_naming_both(
    site_dir: Path, write_profile: WriteProfile
) -> None:
    write_profile("twin", '[site]\nname = "twin"\n[match]\nhostnames = ["alpha-1"]\n', site_dir)
    env = {"DDPIMG_SITE_PATH": str(site_dir)}
    with pytest.raises(ProfileError, match="more than one site profile matches") as caught:
        select_profile(env, "alpha-1")
    message = caught.value.message
    assert "'alpha' (hostname 'alpha-1' matched 'alpha-*')" in message
    assert "'twin' (hostname 'alpha-1' matched 'alpha-1')" in message
    assert caught.value.hint == "choose one with --site NAME or DDPIMG_SITE=NAME"
    # Naming one resolves the ambiguity.
    assert select_profile(env, "alpha-1", "twin").profile.name == "twin"
    assert select_profile({**env, "DDPIMG_SITE": "alpha"}, "alpha-1").profile.name == "alpha"


@pytest.mark.parametrize("source", ["--site", "DDPIMG_SITE"])
def test_unknown_name_lists_the_known_ones(site_dir: Path, source: str) -> None:
    env = {"DDPIMG_SITE_PATH": str(site_dir)}
    explicit = None
    if source == "--site":
        explicit = "alfa"
    else:
        env["DDPIMG_SITE"] = "alfa"
    with pytest.raises(ProfileError, match=f"unknown site profile 'alfa' \\(from {source}\\)") as c:
        select_profile(env, "host", explicit)
    assert c.value.hint is not None
    assert re.search(r"known profiles: alpha, .*beta, .*gamma, generic, .*puhti", c.value.hint)
    assert str(site_dir) in c.value.hint


@pytest.mark.parametrize("source", ["--site", "DDPIMG_SITE"])
def test_missing_path_is_named(tmp_path: Path, source: str) -> None:
    missing = str(tmp_path / "nope.toml")
    env = {"DDPIMG_SITE": missing} if source == "DDPIMG_SITE" else {}
    explicit = missing if source == "--site" else None
    with pytest.raises(
        ProfileError, match=f"site profile file '{re.escape(missing)}' \\(from {source}\\) does not"
    ):
        select_profile(env, "host", explicit)


@pytest.mark.parametrize(
    ("env", "explicit", "message"),
    [({"DDPIMG_SITE": ""}, None, "DDPIMG_SITE is empty"), ({}, "", "--site is empty")],
)
def test_empty_choice_is_an_error(env: dict[str, str], explicit: str | None, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        select_profile(env, "host", explicit)


def test_a_broken_profile_on_the_search_path_fails_auto_detection(
    site_dir: Path, write_profile: WriteProfile
) -> None:
    broken = write_profile("broken", "[site\n", site_dir)
    with pytest.raises(ProfileError, match=f"{re.escape(str(broken))}: not valid TOML"):
        select_profile({"DDPIMG_SITE_PATH": str(site_dir)}, "host")


def test_site_path_shadows_a_shipped_profile(write_profile: WriteProfile, tmp_path: Path) -> None:
    mine = write_profile("generic", '[site]\nname = "generic"\ndescription = "mine"\n')
    selection = select_profile({"DDPIMG_SITE_PATH": str(tmp_path)}, "laptop")
    assert (selection.profile.path, selection.reason) == (str(mine), "default")
    assert known_profiles({"DDPIMG_SITE_PATH": str(tmp_path)})["generic"] == mine


def test_profile_dirs_order_and_empty_entries(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    shipped = shipped_profile_dir()
    assert shipped is not None
    assert profile_dirs({"DDPIMG_SITE_PATH": f":{first}::{second}:"}) == [first, second, shipped]
    assert profile_dirs({}) == [shipped]


def test_site_path_entry_that_is_not_a_directory_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(ProfileError, match=f"DDPIMG_SITE_PATH names '{re.escape(str(missing))}'"):
        profile_dirs({"DDPIMG_SITE_PATH": str(missing)})


def test_shipped_profiles_are_found() -> None:
    # A source checkout finds the repository's directory; an installed ddpimg the copy under
    # <prefix>/share/ddpimg/site-profiles. Either way, the same files.
    shipped = shipped_profile_dir()
    assert shipped is not None
    assert sorted(p.name for p in shipped.glob("*.toml")) == sorted(
        p.name for p in REPO_PROFILES.glob("*.toml")
    )
    assert known_profiles({})["puhti"] == shipped / "puhti.toml"


def test_match_reason_tries_cluster_then_hostname_then_marker(
    write_profile: WriteProfile,
) -> None:
    profile = load_profile(
        write_profile(
            "all",
            """\
            [site]
            name = "all"
            [match]
            hostnames = ["gpu*"]
            slurm_cluster_names = ["allc"]
            env = { MARK = "on" }
            """,
        )
    )
    everything = {"SLURM_CLUSTER_NAME": "allc", "MARK": "on"}
    assert match_reason(profile, everything, "gpu1") == "auto: SLURM_CLUSTER_NAME 'allc' matched"
    assert match_reason(profile, {"MARK": "off"}, "gpu1") == "auto: hostname 'gpu1' matched 'gpu*'"
    assert match_reason(profile, {"MARK": "on"}, "cpu1") == "auto: MARK 'on' matched 'on'"
    assert match_reason(profile, {"MARK": "off"}, "cpu1") is None


def test_inside_another_cluster_no_rule_of_a_profile_naming_its_clusters_matches(
    write_profile: WriteProfile,
) -> None:
    """A job on cluster "other" whose node happens to look like this site's, with this
    site's marker variable set: the cluster name settles it."""
    profile = load_profile(
        write_profile(
            "mine",
            """\
            [site]
            name = "mine"
            [match]
            hostnames = ["node[0-9][0-9][0-9][0-9]"]
            slurm_cluster_names = ["mine"]
            env = { MARK = "on" }
            """,
        )
    )
    assert match_reason(profile, {"SLURM_CLUSTER_NAME": "other", "MARK": "on"}, "node0401") is None
    assert match_reason(profile, {}, "node0401") == (
        "auto: hostname 'node0401' matched 'node[0-9][0-9][0-9][0-9]'"
    )


def test_a_profile_without_cluster_names_still_matches_by_host_inside_slurm(
    write_profile: WriteProfile,
) -> None:
    profile = load_profile(
        write_profile("hosts", '[site]\nname = "hosts"\n[match]\nhostnames = ["gpu*"]\n')
    )
    assert match_reason(profile, {"SLURM_CLUSTER_NAME": "any"}, "gpu7") == (
        "auto: hostname 'gpu7' matched 'gpu*'"
    )


def test_a_fifo_among_the_profiles_is_named_not_opened(tmp_path: Path) -> None:
    """A FIFO named *.toml in DDPIMG_SITE_PATH stopped every command that detects the site
    (ddpimg env, train): opening it waits for a writer that never comes."""
    os.mkfifo(tmp_path / "trap.toml")
    env = {"DDPIMG_SITE_PATH": str(tmp_path)}
    with (
        hang_guard("detecting the site beside a FIFO", 60),
        pytest.raises(ProfileError, match=r"trap.toml: it is a FIFO \(named pipe\), not a"),
    ):
        select_profile(env, "somehost")
