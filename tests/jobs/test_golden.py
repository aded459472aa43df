"""Golden files: the rendered 2-node script of every shipped site, and the docs page that
shows them (see ``tests/jobs/examples.py`` for how to regenerate both)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import prepare
from ddpimg.site.container import RUNTIMES
from tests.golden import check_or_update
from tests.jobs.examples import (
    DOC,
    EXAMPLES,
    GOLDEN_DIR,
    JOB_FILE_EXAMPLE,
    examples_doc,
    render_example,
)


@pytest.mark.parametrize("example", EXAMPLES)
def test_script_matches_the_golden_file(example: str) -> None:
    check_or_update(GOLDEN_DIR / f"{example}.sh", render_example(example))


def test_every_golden_file_belongs_to_an_example() -> None:
    assert sorted(path.stem for path in GOLDEN_DIR.glob("*.sh")) == sorted(EXAMPLES)


def test_every_runtime_has_a_golden_file() -> None:
    rendered = "\n".join(path.read_text() for path in GOLDEN_DIR.glob("*.sh"))
    starts = {
        "apptainer": "apptainer exec",
        "singularity": "singularity exec",
        "podman-hpc": "podman-hpc shared-run",
        "pyxis": "--container-image=",
        "edf": '--environment="$edf"',
        "docker": "docker run",
        "none": "--runtime none",
    }
    assert set(starts) == set(RUNTIMES)
    assert [name for name, start in starts.items() if start not in rendered] == []


@pytest.mark.parametrize("example", EXAMPLES)
def test_golden_script_is_valid_bash(example: str) -> None:
    check = subprocess.run(
        ["bash", "-n", str(GOLDEN_DIR / f"{example}.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr


@pytest.mark.shellcheck
def test_golden_scripts_are_shellcheck_clean() -> None:
    """Every finding, notes included: the renderer turns off only the two it means
    (ddpimg.jobs.directives), each at the line it concerns."""
    paths = sorted(str(GOLDEN_DIR / f"{example}.sh") for example in EXAMPLES)
    check = subprocess.run(
        ["shellcheck", "--severity=style", "--format=gcc", *paths],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_job_file_example_of_the_docs_renders(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(JOB_FILE_EXAMPLE)
    args = build_parser().parse_args(["sbatch", "--config", str(path)])
    script = prepare(args, {}, "example-host").script()
    assert "#SBATCH --gres=gpu:gh200:4\n" in script
    assert "#SBATCH --mail-type=END,FAIL\n" in script
    assert "--bind /users,/projappl,/scratch,/dataset,/scratch/project_2001234 " in script


def test_docs_page_is_current() -> None:
    check_or_update(DOC, examples_doc())
