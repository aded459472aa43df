"""The profiles shipped in site-profiles/: they load cleanly and say what their sites need."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from ddpimg.plan import build_plan
from ddpimg.site.container import RUNTIMES
from ddpimg.site.load import load_profile
from ddpimg.site.master import apply_master_rule
from ddpimg.site.model import Limits, SiteProfile
from ddpimg.site.schema import SCHEMA
from ddpimg.site.select import match_reason, select_profile
from ddpimg.site.sources import source_of, uncited

PROFILES = Path(__file__).resolve().parents[2] / "site-profiles"
SHIPPED = sorted(path.stem for path in PROFILES.glob("*.toml"))
LINUX_EPHEMERAL_START = 32768
HSN = ("hsn0", "hsn1", "hsn2", "hsn3")
# The profiles of real sites: every fact they state is cited.
SITES = [name for name in SHIPPED if name not in ("generic", "local")]


def shipped(name: str) -> SiteProfile:
    return load_profile(PROFILES / f"{name}.toml")


def test_the_documented_profiles_are_shipped() -> None:
    assert SHIPPED == [
        "alps",
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
        "roihu",
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


@pytest.mark.parametrize("name", SITES)
def test_every_fact_of_a_site_cites_its_source_or_is_marked(name: str) -> None:
    profile = shipped(name)
    assert uncited(profile, profile.facts) == []
    for key, source in profile.sources:
        assert source.startswith(("https://", "unverified: ", "choice: ")), key


@pytest.mark.parametrize("name", SITES)
def test_every_site_names_its_container_runtime(name: str) -> None:
    profile = shipped(name)
    assert profile.container.runtime in RUNTIMES
    assert source_of(profile, "container.runtime")


@pytest.mark.parametrize(
    ("name", "properties"),
    [
        ("generic", {"master_addr": "{node}", "interfaces": (), "backend": "",
                     "container.runtime": "apptainer"}),
        ("local", {"master_addr": "{node}", "interfaces": ("lo",), "backend": "gloo",
                   "container.runtime": "docker"}),
        (
            "palmetto",
            {
                "master_addr": "{node}.palmetto.clemson.edu",
                "job.gpus_per_node": 2,
                "job.gpu_type": "a100",  # the tutorial's A100 nodes
                "job.gpu_types": ("a100", "v100"),
                "job.gpu_request": "gpus-per-node",  # --gpus-per-node=a100:2, as RCD's scripts
                "job.constraint": "interconnect_hdr",  # the InfiniBand nodes, not Ethernet
                "match.hostnames": (),  # node0401 is no proof of Palmetto
                "match.slurm_cluster_names": ("palmetto",),
                "hardware.build": "cuda12",  # the V100 too
                "container.runtime": "apptainer",
            },
        ),
        (
            "della",
            {
                "master_addr": "{node}",
                "job.gpus_per_node": 2,
                "job.max_gpus_per_node": 4,  # Princeton's FSDP example
                "job.max_gpus_constraint": "gpu80",
                "container.runtime": "apptainer",
            },
        ),
        (
            "puhti",
            {
                "status": "retired",
                "master_addr": "{node}",
                "interfaces": ("ib0",),
                "job.gpus_per_node": 4,
                "job.gpu_type": "v100",
                "job.gpu_request": "gres",
                "job.partition": "gpu",
                "job.mem_per_gpu": "80G",  # CSC's 4-GPU example: --mem=320G
                "match.hostnames": ("puhti-*",),  # not any r01g05
                "container.runtime": "apptainer",
            },
        ),
        (
            "mahti",
            {
                "status": "retired",
                "master_addr": "{node}",
                "interfaces": ("ib0",),
                "job.gpus_per_node": 4,
                "job.gpu_type": "a100",
                "job.partition": "gpumedium",
            },
        ),
        (
            "roihu",
            {
                "job.gpus_per_node": 4,
                "job.gpu_type": "gh200",
                "job.cpus_per_task": 72,  # one Grace CPU per GPU
                "job.cpu_bind": "cores",
                "job.partition": "gpularge",
                "hardware.build": "cuda13-arm64",
                "hardware.arch": "sm_90",
                "container.runtime": "apptainer",
            },
        ),
        (
            "alps",
            {
                "job.gpus_per_node": 4,
                "job.cpus_per_task": 72,
                "job.cpu_bind": "cores",
                "job.partition": "normal",
                "hardware.build": "cuda13-arm64",
                "container.runtime": "edf",
                "container.annotations": (
                    ("com.hooks.aws_ofi_nccl.enabled", "true"),
                    ("com.hooks.aws_ofi_nccl.variant", "cuda13"),
                    ("com.hooks.netstack.source", "host"),
                ),
                "match.slurm_cluster_names": ("daint", "clariden", "santis"),
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
                # LUMI's guide: each GCD's task on the 7 free cores of its CCD
                "job.cpu_bind": "mask_cpu:fe000000000000,fe00000000000000,fe0000,fe000000,"
                "fe,fe00,fe00000000,fe0000000000",
                "match.slurm_cluster_names": ("lumi",),
                "container.runtime": "singularity",
            },
        ),
        (
            "perlmutter",
            {
                "interfaces": HSN,
                "job.gpus_per_node": 4,
                "job.gpu_request": "gpus-per-node",
                "job.constraint": "gpu",
                "job.qos": "regular",  # not the default debug QOS
                "match.env": (("NERSC_HOST", "perlmutter"),),
                "container.runtime": "podman-hpc",
                "fabric.library_paths": ("/opt/nccl-ofi/lib", "/opt/nccl-ofi/deps/lib"),
            },
        ),
    ],
)  # fmt: skip
def test_documented_properties(name: str, properties: dict[str, Any]) -> None:
    profile = shipped(name)
    for dotted, expected in properties.items():
        holder: Any = profile
        for part in dotted.split("."):
            holder = getattr(holder, part)
        assert holder == expected, dotted


@pytest.mark.parametrize(
    ("name", "section", "limit", "expected"),
    [
        ("puhti", "partitions", "gpu", Limits(max_time="3-00:00:00", max_nodes=20, max_gpus=80,
                                              max_mem="373G")),
        ("mahti", "partitions", "gpumedium", Limits(max_time="1-12:00:00", max_nodes=6,
                                                    max_gpus=24, max_mem="490G")),
        ("roihu", "partitions", "gpularge", Limits(
            max_time="1-12:00:00", max_nodes=10, min_gpus_per_node=4,
            note="needs the project's access to gpularge: a 30-day trial requested in MyCSC, "
            "during which a scalability test must be submitted to CSC")),
        ("roihu", "partitions", "gpumedium", Limits(max_time="1-12:00:00", max_nodes=4,
                                                    max_gpus=4)),
        ("lumi", "partitions", "standard-g", Limits(max_time="2-00:00:00", max_nodes=1024)),
        ("alps", "partitions", "normal", Limits(max_time="1-00:00:00")),
        ("alps", "partitions", "debug", Limits(max_time="00:30:00", max_nodes=2)),
        ("perlmutter", "qos", "regular", Limits(max_time="2-00:00:00")),
    ],
)  # fmt: skip
def test_documented_limits(name: str, section: str, limit: str, expected: Limits) -> None:
    assert dict(getattr(shipped(name), section))[limit] == expected


@pytest.mark.parametrize(
    ("name", "variable", "value"),
    [
        ("lumi", "NCCL_NET_GDR_LEVEL", "PHB"),
        ("lumi", "CXI_FORK_SAFE", "1"),
        ("perlmutter", "NCCL_NET_GDR_LEVEL", "PHB"),
        ("perlmutter", "FI_CXI_DISABLE_HOST_REGISTER", "1"),
        # HPE's CXI settings for NCCL on Slingshot (shs-ccl-docs, ccl_env.sh)
        ("perlmutter", "FI_CXI_RDZV_PROTO", "alt_read"),
        ("perlmutter", "FI_CXI_RDZV_EAGER_SIZE", "0"),
        ("perlmutter", "FI_CXI_DEFAULT_TX_SIZE", "2048"),
        ("perlmutter", "FI_CXI_RX_MATCH_MODE", "hybrid"),
        ("perlmutter", "NCCL_NET", "AWS Libfabric"),
        # CSCS's values for Alps
        ("alps", "NCCL_NET", "AWS Libfabric"),
        ("alps", "FI_CXI_RX_MATCH_MODE", "software"),
        ("alps", "NCCL_PROTO", "^LL128"),
    ],
)
def test_exports(name: str, variable: str, value: str) -> None:
    profile = shipped(name)
    assert {**dict(profile.fabric.env), **dict(profile.exports)}[variable] == value


@pytest.mark.parametrize("name", ["generic", "local"])
def test_fallback_profiles_are_never_auto_selected(name: str) -> None:
    match = shipped(name).match
    assert (match.hostnames, match.slurm_cluster_names, match.env) == ((), (), ())


@pytest.mark.parametrize(
    ("hostname", "env", "expected"),
    [
        ("puhti-login11", {}, "puhti"),
        ("r01g05", {"SLURM_CLUSTER_NAME": "puhti"}, "puhti"),
        ("c001", {"SLURM_CLUSTER_NAME": "puhti"}, "puhti"),
        ("mahti-login12", {}, "mahti"),
        ("roihu-login1", {}, "roihu"),
        ("g1101", {"SLURM_CLUSTER_NAME": "roihu"}, "roihu"),
        ("della-gpu", {}, "della"),
        ("della-l01g3", {}, "della"),
        ("node0401", {"SLURM_CLUSTER_NAME": "palmetto"}, "palmetto"),
        ("jwb0001", {"SYSTEMNAME": "juwelsbooster"}, "juwels-booster"),
        ("hdfmlc01", {"SYSTEMNAME": "hdfml"}, "hdfml"),
        ("nid005001", {"SLURM_CLUSTER_NAME": "lumi"}, "lumi"),
        ("nid001234", {"NERSC_HOST": "perlmutter"}, "perlmutter"),
        ("nid001234", {"SLURM_CLUSTER_NAME": "perlmutter"}, "perlmutter"),
        ("nid006000", {"SLURM_CLUSTER_NAME": "daint"}, "alps"),
        ("nid006000", {"SLURM_CLUSTER_NAME": "clariden"}, "alps"),
        # Node names that recur across clusters prove nothing outside a job...
        ("node0401", {}, "generic"),
        ("r01g05", {}, "generic"),
        ("r12c34", {}, "generic"),
        # ...and inside another cluster's job nothing of a site that names its clusters fits.
        ("puhti-login1", {"SLURM_CLUSTER_NAME": "elsewhere"}, "generic"),
        ("della-l01g3", {"SLURM_CLUSTER_NAME": "elsewhere"}, "generic"),
        ("nid001234", {"SLURM_CLUSTER_NAME": "elsewhere", "NERSC_HOST": "perlmutter"}, "generic"),
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


# A host of each site (its compute nodes' naming) and its cluster.
SITE_HOSTS = [
    ("node0401", "palmetto"),
    ("della-l01g3", "della"),
    ("r01g05", "puhti"),
    ("r12c34", "puhti"),
    ("g1101", "mahti"),
    ("nid005001", "lumi"),
    ("nid001234", "perlmutter"),
    ("nid006000", "daint"),
]


@pytest.mark.parametrize("name", [n for n in SITES if shipped(n).match.slurm_cluster_names])
@pytest.mark.parametrize(("host", "cluster"), SITE_HOSTS)
def test_a_profile_never_claims_a_host_of_another_cluster(
    name: str, host: str, cluster: str
) -> None:
    profile = shipped(name)
    claims = match_reason(profile, {"SLURM_CLUSTER_NAME": cluster}, host) is not None
    assert claims == (cluster in profile.match.slurm_cluster_names)


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


def test_the_readmes_complete_example_loads(tmp_path: Path) -> None:
    readme = (PROFILES / "README.md").read_text(encoding="utf-8")
    example = readme.split("## A complete example", 1)[1].split("```toml\n", 1)[1]
    path = tmp_path / "mycluster.toml"
    path.write_text(example.split("```", 1)[0], encoding="utf-8")
    profile = load_profile(path)
    assert profile.container.runtime == "apptainer"
    assert dict(profile.partitions)["gpu"] == Limits(max_time="2-00:00:00", max_nodes=8)
    assert source_of(profile, "partitions.gpu") == "https://wiki.example.org/cluster/partitions"


def test_a_retired_site_says_so_when_explained() -> None:
    plan = build_plan({}, "laptop", site="mahti")
    assert plan.notes[plan.notes.index("site=mahti (--site)") + 1] == (
        "site mahti is retired: CSC shut Mahti's computing services down on 31 August 2026; "
        "Roihu replaces it (--site roihu)"
    )
    assert not [note for note in build_plan({}, "laptop", site="roihu").notes if "retired" in note]
