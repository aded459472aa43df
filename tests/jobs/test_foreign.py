"""ddpimg in a site's own image (ddpimg.jobs.foreign): ``--ddpimg-from DIR`` renders the
venv's entry point, binds it, starts the step without the host's Python and linker variables
and has train keep the image's own."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from ddpimg.cleanenv import SOFTWARE_STACK
from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import Prepared, prepare
from ddpimg.jobs import ERROR, WARNING
from ddpimg.jobs.foreign import KEEP_IMAGE_STACK
from tests.jobs.stubs import install_stubs, run_script

VENV = "/project/p1/ddpimg"
JOB = ["--nodes", "2", "--time", "1:00:00"]


def prepared(*args: str, command: tuple[str, ...] = ("train", "mnist")) -> Prepared:
    parsed = build_parser().parse_args(["sbatch", *args, "--", *command])
    return prepare(parsed, {}, "example-host")


def test_lumi_runs_its_own_container_with_ddpimg_beside_it() -> None:
    script = prepared("--site", "lumi", *JOB, "--ddpimg-from", VENV).script()
    step = script[script.index("without_host_stack srun") :].replace("\\\n", " ")
    words = shlex.split(step.split("&\n", 1)[0])
    image = words.index("--rocm") + 3  # --rocm --bind BINDS IMAGE
    assert words[image].startswith("/appl/local/laifs/containers/lumi-multitorch-")
    assert VENV in words[words.index("--bind", image - 3) + 1].split(",")
    assert words[image + 1] == f"{VENV}/bin/train"
    assert words[-2:] == ["--keep-env", KEEP_IMAGE_STACK]
    assert "module load lumi-aif-singularity-bindings\n" in script


def test_lumi_without_ddpimg_from_says_how() -> None:
    found = [f for f in prepared("--site", "lumi", *JOB).findings if f.level == ERROR]
    assert len(found) == 1
    assert "is the site's own PyTorch container, which does not carry ddpimg" in found[0].message
    assert "--ddpimg-from DIR" in found[0].hint


@pytest.mark.parametrize(
    ("args", "level", "message"),
    [
        (["--runtime", "none"], ERROR, "--runtime none runs no image"),
        ([], ERROR, "ddp.sif is ddpimg's own image, which carries ddpimg already"),
    ],
)
def test_ddpimg_from_needs_a_site_image(args: list[str], level: str, message: str) -> None:
    found = prepared("--site", "della", *JOB, "--ddpimg-from", VENV, *args).findings
    assert [(f.level, message in f.message) for f in found if message in f.message] == [
        (level, True)
    ]


def test_another_command_is_warned_about() -> None:
    found = prepared(
        "--site", "della", *JOB, "--image", "ngc.sif", "--ddpimg-from", VENV,
        command=("python", "x.py"),
    ).findings  # fmt: skip
    assert [f.level for f in found if "replaces train or ddpimg" in f.message] == [WARNING]


@pytest.mark.parametrize("path", ["venv", "/a,b", "/a:b"])
def test_ddpimg_from_is_one_absolute_path(path: str) -> None:
    from ddpimg.errors import JobError

    with pytest.raises(JobError, match="is not an absolute path without"):
        prepared("--site", "della", *JOB, "--image", "ngc.sif", "--ddpimg-from", path)


def test_the_step_starts_without_the_hosts_stack(tmp_path: Path) -> None:
    """The host's Python and linker variables never reach the runtime's command; everything
    else (SLURM_*, HOME) does. The runtime stub records the environment it was given."""
    (tmp_path / "stubs").mkdir()
    stubs = install_stubs(tmp_path / "stubs")
    env_dump = tmp_path / "env.txt"
    (stubs / "apptainer").write_text(f'#!/bin/bash\nenv > "{env_dump}"\n')
    script = prepared(
        "--site", "della", *JOB, "--image", "ngc.sif", "--ddpimg-from", VENV
    ).script()  # fmt: skip
    host = {name.replace("*", "PREFIX"): "/host" for name in SOFTWARE_STACK}
    work = tmp_path / "work"
    work.mkdir()
    result = run_script(script, work, stubs, host | {"KEEP_ME": "1"})
    assert result.returncode == 0, result.stderr
    seen = dict(line.split("=", 1) for line in env_dump.read_text().splitlines() if "=" in line)
    assert [name for name in host if name in seen] == []
    assert seen["KEEP_ME"] == "1"
    assert seen["SLURM_PROCID"] == "0"


def test_a_keep_env_flag_takes_a_comma_list() -> None:
    from ddpimg.plan import build_plan

    env = {"LD_LIBRARY_PATH": "/image/lib", "CONDA_PREFIX": "/opt/conda", "PYTHONPATH": "/p"}
    kept = build_plan(env, "h", site="local", keep=("LD_LIBRARY_PATH,CONDA_*",))
    assert [name for name in ("LD_LIBRARY_PATH", "CONDA_PREFIX") if name in kept.removed] == []
    assert "PYTHONPATH" in kept.removed
