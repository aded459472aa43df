"""Golden files: the rendered 2-node script of every shipped site, and the docs page that
shows them (see ``tests/jobs/examples.py`` for how to regenerate both)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import prepare
from tests.jobs.examples import (
    DOC,
    GOLDEN_DIR,
    JOB_FILE_EXAMPLE,
    SHIPPED,
    check_or_update,
    examples_doc,
    render_example,
)


@pytest.mark.parametrize("site", SHIPPED)
def test_script_matches_the_golden_file(site: str) -> None:
    check_or_update(GOLDEN_DIR / f"{site}.sh", render_example(site))


def test_every_golden_file_belongs_to_a_shipped_site() -> None:
    assert sorted(path.stem for path in GOLDEN_DIR.glob("*.sh")) == SHIPPED


@pytest.mark.parametrize("site", SHIPPED)
def test_golden_script_is_valid_bash(site: str) -> None:
    check = subprocess.run(
        ["bash", "-n", str(GOLDEN_DIR / f"{site}.sh")], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr


def test_job_file_example_of_the_docs_renders(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(JOB_FILE_EXAMPLE)
    args = build_parser().parse_args(["sbatch", "--config", str(path)])
    script = prepare(args, {}, "example-host").script()
    assert "#SBATCH --gres=gpu:a100:4\n" in script
    assert "#SBATCH --mail-type=END,FAIL\n" in script
    assert "--bind /scratch,/projappl,/scratch/project_2001234 " in script


def test_docs_page_is_current() -> None:
    check_or_update(DOC, examples_doc())
