"""The master-address rule: templates over {node}, and interface:NAME."""

from __future__ import annotations

import pytest

from ddpimg.site.master import apply_master_rule, check_master_template, master_interface
from ddpimg.site.model import SiteProfile


def profile_with(master_addr: str) -> SiteProfile:
    return SiteProfile(
        name="t", description="", path="t.toml", content_hash="0", master_addr=master_addr
    )


@pytest.mark.parametrize(
    ("rule", "node", "expected"),
    [
        # {node}: the node name as it is (CSC: the short name resolves to InfiniBand).
        ("{node}", "r01g05", "r01g05"),
        ("{node}", "r01g05.bullx", "r01g05"),
        # {node}i: JSC's InfiniBand names, also from a FQDN node list.
        ("{node}i", "jwb0001", "jwb0001i"),
        ("{node}i", "jwb0001.juwels", "jwb0001i"),
        # FQDN templates: the domain is not doubled when the launcher already gives a FQDN.
        ("{node}.palmetto.clemson.edu", "node0401", "node0401.palmetto.clemson.edu"),
        (
            "{node}.palmetto.clemson.edu",
            "node0401.palmetto.clemson.edu",
            "node0401.palmetto.clemson.edu",
        ),
        ("ib-{node}", "gpu12", "ib-gpu12"),
        # interface:NAME is resolved by rank 0 at run time.
        ("interface:ib0", "node0401", ""),
        ("interface:hsn0", "nid001234", ""),
        # No known node: nothing to apply the rule to.
        ("{node}", "", ""),
        ("{node}i", "", ""),
        # An address is not a name: no suffix or domain can apply to it.
        ("{node}i", "10.1.2.3", "10.1.2.3"),
        ("{node}.palmetto.clemson.edu", "10.1.2.3", "10.1.2.3"),
        ("{node}i", "fd00::5", "fd00::5"),
    ],
)
def test_apply_master_rule(rule: str, node: str, expected: str) -> None:
    assert apply_master_rule(profile_with(rule), node) == expected


@pytest.mark.parametrize(
    ("rule", "interface"),
    [("interface:ib0", "ib0"), ("interface:hsn3", "hsn3"), ("{node}", ""), ("{node}i", "")],
)
def test_master_interface(rule: str, interface: str) -> None:
    assert master_interface(profile_with(rule)) == interface


@pytest.mark.parametrize(
    "template", ["{node}", "{node}i", "{node}.palmetto.clemson.edu", "interface:ib0", "x{node}y"]
)
def test_valid_templates(template: str) -> None:
    assert check_master_template(template) is None


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("node01", "must contain '{node}'"),
        ("", "must contain '{node}'"),
        ("{host}", "unknown placeholder '{host}'"),
        ("{node}.{domain}", "unknown placeholder '{domain}'"),
        ("{0}", "unknown placeholder '{0}'"),
        ("{node.name}", "unknown placeholder '{node.name}'"),
        ("{node!r}", "takes no format spec or conversion"),
        ("{node", "not a valid template"),
        ("interface:", "needs an interface name"),
        ("interface:eth0,eth1", "'eth0,eth1' is not a network interface name"),
        ("interface:averyveryverylongname", "is not a network interface name"),
    ],
)
def test_invalid_templates(template: str, problem: str) -> None:
    found = check_master_template(template)
    assert found is not None
    assert problem in found
