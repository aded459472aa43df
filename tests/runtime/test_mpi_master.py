from __future__ import annotations

import dataclasses

import pytest

from ddpimg.errors import LauncherError
from ddpimg.runtime.interfaces import interface_names, ipv4_address, missing_interfaces
from ddpimg.runtime.mpi_master import own_master_address
from ddpimg.site import load_profile
from ddpimg.site.model import SiteProfile
from ddpimg.site.select import shipped_profile_dir


def profile_with_rule(rule: str) -> SiteProfile:
    directory = shipped_profile_dir()
    assert directory is not None
    return dataclasses.replace(load_profile(directory / "generic.toml"), master_addr=rule)


def test_loopback_is_seen_with_its_address() -> None:
    assert "lo" in interface_names()
    assert ipv4_address("lo") == "127.0.0.1"
    assert ipv4_address("nosuch0") is None
    assert missing_interfaces(("lo", "nosuch0")) == ["nosuch0"]


@pytest.mark.parametrize(
    ("rule", "host", "expected"),
    [
        ("{node}", "r01g03", "r01g03"),
        ("{node}i", "jwb0001", "jwb0001i"),
        ("interface:lo", "h", "127.0.0.1"),
    ],
)
def test_rank_0_names_itself_by_the_profile_rule(rule: str, host: str, expected: str) -> None:
    assert own_master_address(profile_with_rule(rule), host) == expected


def test_an_interface_rule_for_a_missing_interface_names_it_and_what_exists() -> None:
    with pytest.raises(
        LauncherError, match=r"interface 'ib9' has no IPv4 address on h \(interfaces here: .*lo"
    ):
        own_master_address(profile_with_rule("interface:ib9"), "h")
