"""The profiles shipped in site-profiles/: they load cleanly and say what their sites need."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from ddpimg.site.load import load_profile
from ddpimg.site.master import apply_master_rule
from ddpimg.site.model import SiteProfile
from ddpimg.site.schema import SCHEMA
from ddpimg.site.select import select_profile

PROFILES = Path(__file__).resolve().parents[2] / "site-profiles"
SHIPPED = sorted(path.stem for path in PROFILES.glob("*.toml"))
LINUX_EPHEMERAL_START = 32768
HSN = ("hsn0", "hsn1", "hsn2", "hsn3")


def shipped(name: str) -> SiteProfile:
    return load_profile(PROFILES / f"{name}.toml")


def test_the_documented_profiles_are_shipped() -> None:
    assert SHIPPED == [
        "della",
        "generic",
        "hdfml",
        "juwels-booster",
        "local",
        "lumi",
        "mahti",
        "palmetto",
        "perlmutter",
        "puhti",
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_loads_without_warnings(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profile = shipped(name)
    assert profile.name == name
    assert profile.description


@pytest.mark.parametrize("name", SHIPPED)
def test_port_range_is_below_the_ephemeral_range(name: str) -> None:
    low, high = shipped(name).port_range
    assert 1024 <= low <= high < LINUX_EPHEMERAL_START


@pytest.mark.parametrize(
    ("name", "properties"),
    [
        ("generic", {"master_addr": "{node}", "interfaces": (), "backend": ""}),
        ("local", {"master_addr": "{node}", "interfaces": ("lo",), "backend": "gloo"}),
        (
            "palmetto",
            {
                "master_addr": "{node}.palmetto.clemson.edu",
                "job.gpus_per_node": 2,
                "job.gpu_type": "v100",
                "job.gpu_request": "gres",
                "match.slurm_cluster_names": ("palmetto",),
            },
        ),
        ("della", {"master_addr": "{node}", "job.gpus_per_node": 2}),
        (
            "puhti",
            {
                "master_addr": "{node}",
                "interfaces": ("ib0",),
                "job.gpus_per_node": 4,
                "job.gpu_type": "v100",
                "job.gpu_request": "gres",
                "job.partition": "gpu",
            },
        ),
        (
            "mahti",
            {
                "master_addr": "{node}",
                "interfaces": ("ib0",),
                "job.gpus_per_node": 4,
                "job.gpu_type": "a100",
            },
        ),
        (
            "juwels-booster",
            {
                "master_addr": "{node}i",
                "interfaces": ("ib0",),
                "job.gpus_per_node": 4,
                "match.env": (("SYSTEMNAME", "juwelsbooster"),),
            },
        ),
        (
            "hdfml",
            {
                "master_addr": "{node}i",
                "interfaces": ("ib0",),
                "job.gpus_per_node": 4,
                "match.env": (("SYSTEMNAME", "hdfml"),),
            },
        ),
        (
            "lumi",
            {
                "interfaces": HSN,
                "job.gpus_per_node": 8,
                "job.gpu_request": "gpus-per-node",
                "job.gpu_vendor": "amd",
                "match.slurm_cluster_names": ("lumi",),
            },
        ),
        (
            "perlmutter",
            {
                "interfaces": HSN,
                "job.gpus_per_node": 4,
                "job.gpu_request": "gpus-per-node",
                "job.constraint": "gpu",
                "match.env": (("NERSC_HOST", "perlmutter"),),
            },
        ),
    ],
)
def test_documented_properties(name: str, properties: dict[str, Any]) -> None:
    profile = shipped(name)
    for dotted, expected in properties.items():
        holder: Any = profile
        for part in dotted.split("."):
            holder = getattr(holder, part)
        assert holder == expected, dotted


@pytest.mark.parametrize(
    ("name", "variable", "value"),
    [
        ("lumi", "NCCL_NET_GDR_LEVEL", "PHB"),
        ("lumi", "CXI_FORK_SAFE", "1"),
        ("perlmutter", "NCCL_NET_GDR_LEVEL", "PHB"),
        ("perlmutter", "FI_CXI_DISABLE_HOST_REGISTER", "1"),
    ],
)
def test_exports(name: str, variable: str, value: str) -> None:
    assert dict(shipped(name).exports)[variable] == value


@pytest.mark.parametrize("name", ["generic", "local"])
def test_fallback_profiles_are_never_auto_selected(name: str) -> None:
    match = shipped(name).match
    assert (match.hostnames, match.slurm_cluster_names, match.env) == ((), (), ())


@pytest.mark.parametrize(
    ("hostname", "env", "expected"),
    [
        ("puhti-login11", {}, "puhti"),
        ("r01g05", {}, "puhti"),
        ("r13c22.bullx", {}, "puhti"),
        ("c001", {"SLURM_CLUSTER_NAME": "puhti"}, "puhti"),
        ("mahti-login12", {}, "mahti"),
        ("della-gpu", {}, "della"),
        ("della-l01g3", {}, "della"),
        ("node0401", {}, "palmetto"),
        ("node0401.palmetto.clemson.edu", {}, "palmetto"),
        ("jwb0001", {"SYSTEMNAME": "juwelsbooster"}, "juwels-booster"),
        ("hdfmlc01", {"SYSTEMNAME": "hdfml"}, "hdfml"),
        ("nid005001", {"SLURM_CLUSTER_NAME": "lumi"}, "lumi"),
        ("nid001234", {"NERSC_HOST": "perlmutter"}, "perlmutter"),
        ("nid001234", {"SLURM_CLUSTER_NAME": "perlmutter"}, "perlmutter"),
        # The namespace test cluster's nodes and ordinary machines are not mistaken for a site.
        ("node1", {}, "generic"),
        ("laptop", {}, "generic"),
        ("jwb0001", {}, "generic"),
    ],
)
def test_auto_detection_picks_exactly_one_shipped_profile(
    hostname: str, env: dict[str, str], expected: str
) -> None:
    assert select_profile(env, hostname).profile.name == expected


@pytest.mark.parametrize(
    ("name", "first_node", "master"),
    [
        ("palmetto", "node0401", "node0401.palmetto.clemson.edu"),
        ("puhti", "r01g05", "r01g05"),
        ("mahti", "g1101", "g1101"),
        ("juwels-booster", "jwb0001", "jwb0001i"),
        ("hdfml", "hdfmlc01", "hdfmlc01i"),
        ("lumi", "nid005001", "nid005001"),
        ("generic", "node1", "node1"),
        ("local", "", ""),
    ],
)
def test_master_address_of_the_first_node(name: str, first_node: str, master: str) -> None:
    assert apply_master_rule(shipped(name), first_node) == master


def test_readme_documents_every_key_and_profile() -> None:
    readme = (PROFILES / "README.md").read_text(encoding="utf-8")
    missing_keys = [dotted for dotted in SCHEMA if f"| `{dotted}` |" not in readme]
    assert missing_keys == []
    missing_profiles = [name for name in SHIPPED if f"| `{name}` |" not in readme]
    assert missing_profiles == []
