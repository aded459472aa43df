"""Runs without ``--out`` (ddpimg.runs): the everyday loop of running a command again, with or
without a change, gives a directory a run; and a refusal that rank 0 decides reaches every
rank as the same one error, under mpirun and srun, with nothing else from the ranks (no
torch C++ frames, no traceback).

Also, elsewhere: the same Lightning script under three launchers in one directory
(tests/integration/test_lightning.py), a run continued after Ctrl-C
(tests/integration/test_interrupt.py), a requeued Slurm job that continues its own directory
(test_lightning.py's preempted job).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from ddpimg import exitcodes
from tests.integration.runs import QUICK_LR, QUICK_TRAIN, command, run, summary

WORLD = 2


def manifest(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((path / "manifest.json").read_text())
    return loaded


def run_dirs(cwd: Path) -> list[Path]:
    return sorted(path for path in (cwd / "runs").iterdir() if path.name != "latest")


def test_a_trainer_run_again_gets_a_new_directory_and_keeps_the_old(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    """Run twice unchanged: two completed runs, the first untouched (not evaluated again);
    once more with another --lr: a third (the second does not belong to it)."""
    train = [command("train"), *QUICK_TRAIN]
    said = [run(train, run_env, cwd=tmp_path).stderr.splitlines()[0]]
    (first,) = run_dirs(tmp_path)
    before = manifest(first)
    said.append(run(train, run_env, cwd=tmp_path).stderr.splitlines()[0])
    said.append(run([*train, "--lr", "0.5"], run_env, cwd=tmp_path).stderr.splitlines()[0])
    dirs = run_dirs(tmp_path)
    assert len(dirs) == 3
    assert all(re.fullmatch(r"mnist-\d{8}-\d{6}(\.\d+)?", path.name) for path in dirs), dirs
    assert said == [f"ddpimg: new run directory runs/{path.name} (runs/latest points to it)"
                    for path in dirs]  # fmt: skip
    assert manifest(first) == before
    assert [manifest(path)["status"] for path in dirs] == ["completed"] * 3
    assert [manifest(path)["arguments"]["lr"] for path in dirs] == [float(QUICK_LR)] * 2 + [0.5]
    assert [summary(path)["steps"] for path in dirs] == [8] * 3
    assert os.readlink(tmp_path / "runs" / "latest") == dirs[-1].name


PLAIN_SCRIPT = """\
import torch.distributed as dist
dist.init_process_group("gloo")
dist.destroy_process_group()
"""


def plant_completed(out: Path, what: dict[str, Any]) -> None:
    """An earlier completed run in ``out`` that the run must not replace (a manifest alone:
    the refusal comes before anything else is read)."""
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"status": "completed", **what}))


LAUNCH = {
    "mpirun": pytest.param(["mpirun", "-np", str(WORLD)], marks=pytest.mark.mpi, id="mpirun"),
    "srun": pytest.param(["srun", "-n", str(WORLD)], marks=pytest.mark.slurm, id="srun"),
}


def ranks_output(launcher: list[str], text: str) -> list[str]:
    """What the ranks printed: ``text`` without the launcher's own lines (mpirun's boxed
    notice of a non-zero exit, ``srun: ...``)."""
    if launcher[0] == "srun":
        return [line for line in text.splitlines() if not line.startswith("srun: ")]
    boxes = re.sub(r"^-{20,}\n.*?^-{20,}\n", "", text, flags=re.DOTALL | re.MULTILINE)
    return [line for line in boxes.splitlines() if line.strip()]


@pytest.mark.parametrize("launcher", LAUNCH.values())
@pytest.mark.parametrize("kind", ["script", "trainer"])
def test_rank_0s_refusal_is_every_ranks_one_error_and_nothing_else(
    tmp_path: Path, kind: str, launcher: list[str], request: pytest.FixtureRequest
) -> None:
    """--out holds a completed run: rank 0 refuses to replace it (a script's boot through the
    rendezvous store, a trainer's over its process group), every rank prints that one
    error, and the launcher ends with its exit status."""
    env = request.getfixturevalue("slurm_env" if launcher[0] == "srun" else "run_env")
    out = tmp_path / "done"
    if kind == "script":
        script = tmp_path / "mine.py"
        script.write_text(PLAIN_SCRIPT)
        plant_completed(out, {"script": {"path": str(script), "args": []}})
        cmd = [command("train"), "--out", str(out), "--script", str(script)]
        error = (
            f"ddpimg: error: --out {out} holds a completed run of this script "
            f"({out}/manifest.json): this run would replace its manifest.json and metrics.jsonl"
        )
    else:
        plant_completed(out, {"arguments": {"trainer": "mnist"}})
        cmd = [command("train"), *QUICK_TRAIN, "--out", str(out)]
        error = (
            f"ddpimg: error: --out {out} holds a completed run ({out}/manifest.json) and no "
            "checkpoint to continue from: this run would replace its manifest.json and "
            "metrics.jsonl"
        )
    hint = "  hint: use another --out, or --resume none to start over in this one"
    proc = run([*launcher, *cmd], env, check=False, cwd=tmp_path)
    assert proc.returncode == exitcodes.USAGE, proc.stderr[-3000:]
    assert ranks_output(launcher, proc.stdout + proc.stderr) == [error, hint] * WORLD
    assert sorted(path.name for path in out.iterdir()) == ["manifest.json"]  # as planted
