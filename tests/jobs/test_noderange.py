"""Node ranges (`ddpimg sbatch --nodes MIN-MAX`): parsed, resolved, checked against what the
training needs to resume on fewer nodes, and rendered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpimg.cli import build_parser
from ddpimg.jobs import ERROR, WARNING, JobError, check_job, render_script
from ddpimg.jobs.job_file import load_job_file
from ddpimg.jobs.noderange import check_node_range, parse_nodes
from ddpimg.jobs.resolve import resolve_job
from tests.jobs.conftest import shipped, spec_for

RANGED = ("train", "mnist", "--global-batch-size", "384")


@pytest.mark.parametrize(
    ("text", "nodes"), [("3", (3, 3)), ("2-4", (2, 4)), (" 1-1 ", (1, 1)), ("10-200", (10, 200))]
)
def test_node_counts_and_ranges(text: str, nodes: tuple[int, int]) -> None:
    assert parse_nodes(text, "--nodes") == nodes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4-2", "'4-2': the range must go from at least 1 up"),
        ("0-2", "'0-2': the range must go from at least 1 up"),
        ("2-", "'2-' is not a node count N or a range MIN-MAX"),
        ("2,4", "'2,4' is not a node count N or a range MIN-MAX"),
        ("two", "'two' is not a node count N or a range MIN-MAX"),
    ],
)
def test_what_is_not_a_range(text: str, message: str) -> None:
    with pytest.raises(JobError, match=f"--nodes: {message}"):
        parse_nodes(text, "--nodes")


def _args(*argv: str) -> Any:
    return build_parser().parse_args(["sbatch", *argv, "--", *RANGED])


def test_the_flag_sets_both_ends() -> None:
    args = _args("--nodes", "2-4")
    assert (args.nodes, args.min_nodes) == (4, 2)
    plain = _args("--nodes", "3")
    assert (plain.nodes, plain.min_nodes) == (3, None)


def test_a_reversed_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        _args("--nodes", "4-2")
    assert ended.value.code == 2
    assert "error: --nodes: '4-2': the range must go from at least 1 up (MIN <= MAX) (" in (
        capsys.readouterr().err
    )


def test_a_job_file_gives_the_range_as_min_nodes(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('site = "della"\nnodes = 4\nmin_nodes = 2\n')
    spec = resolve_job(shipped("della"), {"command": RANGED}, load_job_file(path))
    assert (spec.nodes, spec.min_nodes, spec.nodes_request) == (4, 2, "2-4")


def test_more_minimum_than_maximum_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text("nodes = 2\nmin_nodes = 3\n")
    with pytest.raises(JobError, match=r"job.toml: min_nodes: 3 is more than the 2 nodes"):
        resolve_job(shipped("della"), {"command": RANGED}, load_job_file(path))


def test_a_fitting_range_has_no_findings() -> None:
    # della: 2 GPUs a node, so 4, 6 and 8 ranks; 384 divides by all three.
    assert (
        check_job(spec_for("della", nodes=4, min_nodes=2, command=RANGED), shipped("della")) == []
    )


@pytest.mark.parametrize(
    ("command", "message", "hint"),
    [
        (
            ("train", "mnist"),
            "--nodes 2-4: the command gives no --global-batch-size, so the global batch",
            "add train --global-batch-size G, with G divisible by 4, 6, 8",
        ),
        (
            ("train", "mnist", "--global-batch-size", "256"),
            "--nodes 2-4: --global-batch-size 256 is not divisible by the ranks of 3 nodes (6)",
            "e.g. 24, or a narrower range",
        ),
        (
            (*RANGED, "--micro-batch-size", "32"),
            "--nodes 2-4: --global-batch-size 384 is not divisible by the ranks x "
            "--micro-batch-size 32 of 4 nodes (256)",
            "e.g. 768, or a narrower range",
        ),
    ],
)
def test_a_range_the_training_cannot_follow_is_an_error(
    command: tuple[str, ...], message: str, hint: str
) -> None:
    found = check_node_range(spec_for("della", nodes=4, min_nodes=2, command=command))
    assert len(found) == 1, [str(f) for f in found]
    assert found[0].level == ERROR
    assert found[0].message.startswith(message)
    assert hint in (found[0].hint or "")


def test_every_strategy_and_accumulation_follow_a_range() -> None:
    """DeepSpeed's checkpoints continue on another world size too; micro-batches that divide
    every rank count's share keep the global batch."""
    for command in (
        (*RANGED, "--strategy", "deepspeed", "--zero-stage", "3"),
        (*RANGED, "--micro-batch-size", "16"),  # 384 = 4, 6 and 8 ranks x 16 x 6, 4 and 3
        ("train", "resnet", "--global-batch-size", "384", "--micro-batch-size", "16",
         "--no-sync-batchnorm"),
    ):  # fmt: skip
        assert check_node_range(spec_for("della", nodes=4, min_nodes=2, command=command)) == []


@pytest.mark.parametrize("program", [("train",), ("ddpimg", "train"), ("/opt/venv/bin/train",)])
def test_synchronised_batchnorm_over_micro_batches_is_a_warning(program: tuple[str, ...]) -> None:
    command = (*program, "resnet", "--global-batch-size", "384", "--micro-batch-size", "16")
    found = check_node_range(spec_for("della", nodes=4, min_nodes=2, command=command))
    assert [f.level for f in found] == [WARNING]
    assert found[0].message.startswith(
        "--nodes 2-4: train resnet with --micro-batch-size 16 and synchronised BatchNorm "
        "normalises over 16 x the ranks' samples, which changes with the nodes"
    )
    assert found[0].hint.startswith("add --no-sync-batchnorm")


def test_no_range_no_check() -> None:
    assert check_node_range(spec_for("della", nodes=4, command=("train", "mnist"))) == []


def test_a_range_is_rendered_for_the_job_and_left_to_slurm_in_the_step() -> None:
    spec = spec_for("della", nodes=4, min_nodes=2, command=RANGED)
    script = render_script(spec, shipped("della"))
    assert "\n#SBATCH --nodes=2-4\n" in script
    assert '\nsrun --nodes="${SLURM_JOB_NUM_NODES}" --ntasks-per-node=2 ' in script
    assert "2-4 nodes x 2 GPUs = 4-8 ranks" in script
    fixed = render_script(spec_for("della", nodes=4, command=RANGED), shipped("della"))
    assert "\n#SBATCH --nodes=4\n" in fixed
    assert "\nsrun --nodes=4 --ntasks-per-node=2 " in fixed
