"""`ddpimg doctor` under srun: a table from every rank, a real all-reduce check, and a loud
failure when the profile names an interface the node lacks."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ddpimg import exitcodes
from tests.integration.runs import command, run


@pytest.mark.slurm
def test_doctor_reports_every_rank_and_a_correct_allreduce(slurm_env: dict[str, str]) -> None:
    proc = run(["srun", "-n", "2", command("ddpimg"), "doctor", "--timeout", "60"], slurm_env)
    host = socket.gethostname().split(".")[0]
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    rows = [line.split() for line in lines[header + 1 : header + 3]]
    assert [row[0] for row in rows] == ["0", "1"]
    assert {row[1] for row in rows} == {host}
    assert "all-reduce: correct" in proc.stdout
    assert "GB/s" in proc.stdout


@pytest.mark.slurm
def test_doctor_fails_and_names_a_missing_interface(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    profile = tmp_path / "fabric.toml"
    profile.write_text(
        '[site]\nname = "fabric"\ndescription = "a site whose fabric is ib7"\n'
        '[network]\ninterfaces = ["ib7"]\nmaster_addr = "{node}"\n'
    )
    cmd = [
        "srun",
        "-n",
        "2",
        command("ddpimg"),
        "doctor",
        "--site",
        str(profile),
        "--timeout",
        "30",
    ]
    proc = run(cmd, slurm_env, check=False)
    assert proc.returncode == exitcodes.CHECK_FAILED, proc.stderr
    assert "interface ib7" in proc.stderr
    assert "does not exist" in proc.stderr
