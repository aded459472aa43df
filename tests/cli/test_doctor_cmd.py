"""What ``ddpimg doctor`` prints from the checks' result: the table, the launch, the verdicts,
every problem, the JSON record; the links' lines."""

from __future__ import annotations

import json
from dataclasses import replace

from ddpimg.cli.doctor_cmd import render_checkup, render_image, render_links
from ddpimg.plan import build_plan
from ddpimg.runtime.doctor import Checkup, RankReport
from ddpimg.runtime.links import LinkResult, judge_links


def _ring(*figures: float) -> list[LinkResult]:
    hosts = [f"n{i + 1}" for i in range(len(figures))]
    return [
        LinkResult(hosts[i], hosts[(i + 1) % len(hosts)], figure)
        for i, figure in enumerate(figures)
    ]


def test_the_links_lines_say_how_they_were_measured_and_what_is_below() -> None:
    lines = render_links(_ring(0.01, 0.6, 0.7), 3, 0.05)
    assert lines == [
        "links: each of 3 nodes with its ring neighbours, 3 round(s) of 3 all-reduces (4 MiB "
        "on CPUs, 256 MiB on GPUs); floor 0.05 GB/s (fabric.min_busbw_gbps)",
        "link n1 - n2: bus bandwidth 0.01 GB/s (below the floor)",
        "link n2 - n3: bus bandwidth 0.6 GB/s",
        "link n3 - n1: bus bandwidth 0.7 GB/s",
    ]


def _row(rank: int, host: str, problems: list[str]) -> RankReport:
    return RankReport(
        rank=rank, host=host, local_rank=0, local_world_size=1, node_rank=rank,
        device="cpu", visible_gpus="<unset>", interfaces={"eth0": "10.0.0.1"},
        shm_gib=2.0, removed=3, problems=problems,
    )  # fmt: skip


CHECKUP = Checkup(
    rows=(_row(0, "n1", []), _row(1, "n2", [])),
    is_main=True,
    backend="gloo",
    master_addr="n1",
    master_port=29500,
    busbw_gbps=1.234,
    transport="NCCL transport check skipped: backend gloo (NCCL runs only on GPUs)",
    num_nodes=2,
    links=(LinkResult("n1", "n2", 0.5),),
    verdict=judge_links([LinkResult("n1", "n2", 0.5)], 0.0, "local"),
)


def test_a_passing_checkup_prints_the_table_the_launch_and_the_record() -> None:
    plan = build_plan({}, "h", site="local")
    lines = render_checkup(CHECKUP, plan, as_json=True)
    table = lines[0].splitlines()
    assert table[0].split() == [
        "rank", "host", "local", "node", "device", "CUDA_VISIBLE", "interfaces", "shm", "GiB",
        "removed",
    ]  # fmt: skip
    assert table[2].split() == [
        "1",
        "n2",
        "0/1",
        "1",
        "cpu",
        "<unset>",
        "eth0=10.0.0.1",
        "2.0",
        "3",
    ]
    assert lines[1] == (
        f"site local ({plan.site_reason}); source {plan.topology.source}; backend gloo; "
        "master n1:29500"
    )
    assert lines[2:4] == ["all-reduce: correct; bus bandwidth 1.23 GB/s", CHECKUP.transport]
    assert lines[5] == "link n1 - n2: bus bandwidth 0.5 GB/s"
    assert not any(line.startswith("problem:") for line in lines)
    record = json.loads(lines[-1])
    assert [row["host"] for row in record["rows"]] == ["n1", "n2"]
    assert record["links"] == [{"a": "n1", "b": "n2", "busbw_gbps": 0.5}]
    assert (record["busbw_gbps"], record["slow_nodes"], record["ok"]) == (1.234, [], True)


def test_a_rank_with_a_problem_fails_the_all_reduce_line_and_is_named() -> None:
    plan = build_plan({}, "h", site="local")
    checkup = replace(CHECKUP, rows=(_row(0, "n1", []), _row(1, "n2", ["/dev/shm is missing"])))
    lines = render_checkup(checkup, plan)
    assert lines[2] == "all-reduce: FAILED; bus bandwidth 1.23 GB/s"
    assert lines[-1] == "problem: rank 1 on n2: /dev/shm is missing"
    assert not checkup.ok


def test_a_slow_link_is_a_problem_of_the_whole_checkup() -> None:
    plan = build_plan({}, "h", site="local")
    slow = [LinkResult("n1", "n2", 0.01)]
    checkup = replace(CHECKUP, links=tuple(slow), verdict=judge_links(slow, 0.05, "local"))
    lines = render_checkup(checkup, plan)
    assert lines[2].startswith("all-reduce: correct")
    assert lines[-1].startswith("problem: link n1 - n2: all-reduce bus bandwidth 0.01 GB/s")
    assert not checkup.ok


def test_the_image_lines_say_its_builds_and_why_they_differ() -> None:
    info = {
        "flavour": "cpu",
        "lock": {"name": "cpu", "sha256": "0" * 64},
        "packages": {"torch": "2.13.0+cpu", "torchvision": "0.28.0", "deepspeed": "0.19.8"},
        "deepspeed_ops": ["deepspeed_shm_comm"],
        "notes": ["torch 2.13.0+cpu, not 2.14.1: why", "torchvision without its ops: why"],
    }
    assert render_image(info) == [
        "image: ddpimg cpu (lock cpu); torch 2.13.0+cpu, torchvision 0.28.0, deepspeed 0.19.8; "
        "DeepSpeed ops built in: deepspeed_shm_comm",
        "image note: torch 2.13.0+cpu, not 2.14.1: why",
        "image note: torchvision without its ops: why",
    ]


def test_an_image_without_notes_or_built_ops_has_one_line_and_none_outside_an_image() -> None:
    info = {"flavour": "gpu", "lock": {"name": "pypi"}, "packages": {"torch": "2.14.1"}}
    assert render_image(info) == ["image: ddpimg gpu (lock pypi); torch 2.14.1"]
    assert render_image(None) == []
    unreadable = {"path": "/etc/ddpimg/build-info.json", "error": "unreadable: denied"}
    assert render_image(unreadable) == [
        "image: build-info /etc/ddpimg/build-info.json unreadable: denied"
    ]
