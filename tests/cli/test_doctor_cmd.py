"""What ``ddpimg doctor`` prints from the checks' result: the table, the launch, the verdicts,
every problem, the JSON record; the links' lines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddpimg import cli, exitcodes, imagetree
from ddpimg.cli.doctor_cmd import render_checkup, render_image, render_links, render_verification
from ddpimg.imagetree import TreeDiff
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


def test_the_image_lines_name_the_tree_digest_when_the_record_has_one() -> None:
    info = {"flavour": "cpu", "lock": {"name": "cpu"}, "tree": {"digest": "sha256:ab"}}
    assert render_image(info)[-1] == (
        "image tree: sha256:ab (`ddpimg doctor --verify` recomputes it)"
    )


def _image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in image: a tree, its listing and a build record naming them."""
    root = tmp_path / "opt"
    (root / "venv" / "pkg").mkdir(parents=True)
    (root / "venv" / "pkg" / "mod.py").write_text("A = 1\n")
    listing = imagetree.render(imagetree.scan([str(root)]))
    (tmp_path / "tree.txt").write_bytes(listing)
    info = {
        "flavour": "cpu",
        "lock": {"name": "cpu"},
        "tree": {
            "digest": imagetree.tree_digest(listing),
            "listing": str(tmp_path / "tree.txt"),
            "roots": [str(root)],
        },
    }
    (tmp_path / "build-info.json").write_text(json.dumps(info))
    monkeypatch.setenv("DDPIMG_BUILD_INFO", str(tmp_path / "build-info.json"))
    return root


def test_verify_says_the_tree_is_the_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _image(tmp_path, monkeypatch)
    assert cli.main(["doctor", "--verify"]) == exitcodes.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("verify: tree sha256:")
    assert lines[-1].endswith("is the build record's")


def test_verify_names_a_changed_and_an_added_file_with_exit_status_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _image(tmp_path, monkeypatch)
    (root / "venv" / "pkg" / "mod.py").write_text("A = 2\n")
    (root / "venv" / "pkg" / "new.py").write_text("")
    assert cli.main(["doctor", "--verify"]) == exitcodes.CHECK_FAILED == 4
    out = capsys.readouterr().out
    assert "verify: FAILED: " in out
    assert "1 added, 0 removed, 1 changed since the build" in out
    assert f"verify: added: {root}/venv/pkg/new.py" in out
    assert f"verify: changed: {root}/venv/pkg/mod.py" in out


def test_verify_outside_the_image_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DDPIMG_BUILD_INFO", str(tmp_path / "none.json"))
    assert cli.main(["doctor", "--verify"]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert f"doctor --verify: no readable build record at {tmp_path}/none.json (none)" in err
    assert "docker run IMAGE ddpimg doctor --verify" in err


def test_verify_of_an_image_built_before_tree_digests_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "build-info.json").write_text(json.dumps({"flavour": "gpu"}))
    monkeypatch.setenv("DDPIMG_BUILD_INFO", str(tmp_path / "build-info.json"))
    assert cli.main(["doctor", "--verify"]) == exitcodes.USAGE
    assert "the build record has no tree digest" in capsys.readouterr().err


def test_verify_names_the_addons_mounted_beside_the_image() -> None:
    result = imagetree.Verification("sha256:a", "sha256:a", 3, ["/opt"], TreeDiff(), ["timm"])
    assert render_verification(result)[-1] == (
        "verify: add-ons mounted beside the image, not in its tree: timm (/opt/ddpimg/addons)"
    )
