"""The draft's decisions (ddpimg.probe.draft) from found facts, and the profile written from
them (ddpimg.probe.writer): it loads in the shipped schema and every fact cites a source."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.probe.draft import Fact, Findings, draft_facts
from ddpimg.probe.network import REACHED, Attempt
from ddpimg.probe.node import GpuFound, Interface, LocalDir, NodeFacts
from ddpimg.probe.runtimes import RuntimeFound
from ddpimg.probe.slurm import Node, Partition, SlurmFacts
from ddpimg.probe.writer import profile_text
from ddpimg.site import load_profile
from ddpimg.site.sources import source_of, uncited

GIB = 1 << 30
SLURM = SlurmFacts(
    cluster_name="nscluster",
    gres_types=("gpu",),
    partitions=(
        Partition("debug", "node[1-3]", True, "", 0, 0),
        Partition("long", "node[1-3]", False, "2-00:00:00", 2, 0),
    ),
    nodes=(
        Node("node1", 16, 64000, 2, "a100", ("debug", "long"), ()),
        Node("node2", 16, 64000, 2, "a100", ("debug", "long"), ()),
    ),
    commands=("scontrol show config",),
)


def node(name: str, last: int, gpu: GpuFound | None = None) -> NodeFacts:
    return NodeFacts(
        node=name, hostname=name, fqdn=name, machine="x86_64",
        interfaces=(Interface("eth0", "ethernet", f"10.0.0.{last}", True),
                    Interface("ib0", "ethernet", f"10.0.1.{last}", True),
                    Interface("lo", "loopback", "127.0.0.1", True)),
        local_dirs=(LocalDir("/tmp", "/tmp", "ext4", 100 * GIB),
                    LocalDir("/dev/shm", "/dev/shm", "tmpfs", 8 * GIB)),
        gpu=gpu,
    )  # fmt: skip


def tries(short_name_on: str) -> list[Attempt]:
    """Both directions: eth0 drops, ib0 passes; `nodeN` resolves to ``short_name_on``."""
    found = []
    for prober, peer, last in (("node1", "node2", 2), ("node2", "node1", 1)):
        eth, ib = f"10.0.0.{last}", f"10.0.1.{last}"
        short = ib if short_name_on == "ib0" else eth
        ways = (
            ("interface:eth0", eth, eth),
            ("interface:ib0", ib, ib),
            ("{node}", peer, short),
            ("{node}i", f"{peer}i", ib),
        )
        for form, host, address in ways:
            ok = address.startswith("10.0.1.")
            outcome = REACHED if ok else "timed out after 3.0 s"
            rate = 40.0 if ok else 0.0
            found.append(Attempt(prober, peer, form, host, address, outcome, 0.1, rate))
    return found


def findings(short_name_on: str = "eth0", **changes: object) -> Findings:
    base = Findings(
        name="draft", date="2026-11-25 12:00 UTC", slurm=SLURM,
        runtimes=(RuntimeFound("apptainer", "/usr/bin/apptainer on PATH"),),
        nodes=(node("node1", 1), node("node2", 2)), attempts=tuple(tries(short_name_on)),
        shared_dirs=("/tmp",), on_compute_nodes=True,
    )  # fmt: skip
    return Findings(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def values(facts: list[Fact]) -> dict[str, object]:
    return {fact.key: fact.value for fact in facts}


@pytest.mark.parametrize(("short_name_on", "rule"), [("eth0", "{node}i"), ("ib0", "{node}")])
def test_the_working_interface_and_the_name_rule_that_uses_it(
    short_name_on: str, rule: str
) -> None:
    """JSC's naming (`nodeN` on the blocked Ethernet, `nodeNi` on the fabric) gives
    `{node}i`; CSC's (`nodeN` on the fabric) gives `{node}`."""
    found = values(draft_facts(findings(short_name_on)))
    assert found["network.interfaces"] == ["ib0"]
    assert found["network.master_addr"] == rule
    assert found["fabric.transport"] == "ib"


def test_no_name_reaching_the_fabric_falls_back_to_the_interface_address() -> None:
    attempts = tuple(a for a in tries("eth0") if a.form != "{node}i")
    assert values(draft_facts(findings(attempts=attempts)))["network.master_addr"] == (
        "interface:ib0"
    )


def test_slurm_gives_partitions_gpus_and_cpus() -> None:
    found = values(draft_facts(findings()))
    assert found["match.slurm_cluster_names"] == ["nscluster"]
    assert found["job.partition"] == "debug"
    assert (found["job.gpus_per_node"], found["job.gpu_type"]) == (2, "a100")
    assert found["job.gpu_types"] == ["a100"]
    assert found["job.cpus_per_task"] == 8
    assert found["partitions.long"] == {"max_time": "2-00:00:00", "max_nodes": 2}
    assert found["partitions.debug"] == {}


def test_a_shared_directory_is_not_node_local() -> None:
    found = values(draft_facts(findings()))
    assert (found["job.local_dir"], found["job.local_dir_kind"]) == ("/dev/shm", "ram")
    facts = draft_facts(findings(shared_dirs=()))
    assert (values(facts)["job.local_dir"], values(facts)["job.local_dir_kind"]) == ("/tmp", "disk")


def test_a_gpu_picks_the_flavour_that_drives_it() -> None:
    v100 = GpuFound("nvidia", "Tesla V100-SXM2-32GB", 4, "7.0", "570.86.15", "nvidia-smi")
    nodes = (node("node1", 1, v100), node("node2", 2, v100))
    found = values(draft_facts(findings(nodes=nodes)))
    assert (found["hardware.arch"], found["hardware.build"]) == ("sm_70", "cuda12")


def test_on_a_login_node_the_network_is_a_question() -> None:
    facts = draft_facts(findings(attempts=(), on_compute_nodes=False, nodes=(node("login", 9),)))
    master = next(f for f in facts if f.key == "network.master_addr")
    assert master.source.startswith("unverified: not measured (the probe ran on one node)")
    assert "ask the site" in master.source


def test_the_written_draft_loads_and_cites_every_fact(tmp_path: Path) -> None:
    path = tmp_path / "draft.toml"
    path.write_text(profile_text(draft_facts(findings()), "ddpimg site probe --out draft.toml"))
    profile = load_profile(path)
    assert profile.name == "draft"
    assert uncited(profile, profile.facts) == []
    assert profile.master_addr == "{node}i"
    assert profile.interfaces == ("ib0",)
    assert source_of(profile, "network.interfaces").startswith(
        "probed: 2026-11-25 12:00 UTC on node1, node2: TCP exchange between the tasks: "
    )
    assert "node1 -> node2 eth0 (10.0.0.2): timed out after 3.0 s" in source_of(
        profile, "network.interfaces"
    )
    assert source_of(profile, "job.gpu_request").startswith("unverified: ")
    assert source_of(profile, "partitions.long").startswith("probed: ")
