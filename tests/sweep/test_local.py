"""A sweep on this machine (ddpimg.sweep.local), with a stand-in for train: each point a
process of its own in its own directory, completed ones skipped when the same sweep runs
again, one sweep per directory, and a preemption signal passed on to the points running."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.runs import lock
from ddpimg.sweep.local import LocalSweep, run_local
from ddpimg.sweep.spec import SweepError, parse_sweep, same_definition, sweep_document

# Stands in for train --out OUT: the outcome its value asks for, in manifest.json and
# metrics.jsonl as train writes them.
FAKE_TRAIN = """\
import json, os, pathlib, signal, sys, time
out, value = pathlib.Path(sys.argv[1]), sys.argv[2]
out.mkdir(parents=True, exist_ok=True)
def manifest(status, code):
    (out / "manifest.json").write_text(json.dumps({"status": status, "exit_status": code}))
manifest("running", None)
(out / "threads").write_text(os.environ.get("OMP_NUM_THREADS", ""))
print(f"training {value}", flush=True)
if value == "wait":
    got = []
    signal.signal(signal.SIGUSR2, lambda *_: got.append(1))
    (out / "waiting").write_text("")
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    manifest("preempted", 75)
    sys.exit(75)
if value == "fail" and not (out.parent / "fixed").exists():
    manifest("failed", 1)
    sys.exit(1)
loss = float(value) if value.replace(".", "").isdigit() else 1.0
summary = {"kind": "summary", "steps": 3, "final_loss": loss, "eval_loss": loss}
(out / "metrics.jsonl").write_text(json.dumps(summary) + "\\n")
manifest("completed", 0)
"""


def make_sweep(directory: Path, texts: list[str], fake: Path) -> LocalSweep:
    sweep = parse_sweep(texts)
    points = sweep.points()
    command = ["--fake"]
    return LocalSweep(
        directory.name,
        directory,
        sweep_document(directory.name, sweep, command, points),
        points,
        argv=lambda point, out: [sys.executable, str(fake), out, point.values[0][1]],
        same=lambda document: same_definition(document, sweep, command),
    )


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    path = tmp_path / "fake_train.py"
    path.write_text(FAKE_TRAIN)
    return path


def test_points_run_in_their_own_directories_and_completed_ones_are_skipped_again(
    tmp_path: Path, fake: Path
) -> None:
    directory = tmp_path / "runs" / "s"
    sweep = make_sweep(directory, ["x=0.5,fail,0.25"], fake)
    said, out = io.StringIO(), io.StringIO()
    status = run_local(sweep, parallel=1, env=os.environ, cpus=2, stream=said, out=out)
    assert status == exitcodes.TRAINING_FAILED
    assert json.loads((directory / "sweep.json").read_text())["points"][1]["name"] == "x=fail"
    table = out.getvalue().splitlines()
    assert table[-1] == "sweep s: 2/3 completed, 1 failed; best x=0.25 (eval loss 0.25)"
    assert table[1:4] == [
        "  x=0.5   completed      3   0.5        0.5",
        "  x=fail  failed",
        "* x=0.25  completed      3  0.25       0.25",
    ]
    assert "sweep s: x=fail failed" in said.getvalue()
    # Again, with what failed fixed: only that point runs.
    (directory / "fixed").write_text("")
    said = io.StringIO()
    status = run_local(sweep, parallel=1, env=os.environ, cpus=2, stream=said, out=io.StringIO())
    assert status == exitcodes.OK
    lines = said.getvalue().splitlines()
    assert "ddpimg: sweep s: x=0.5 completed earlier: skipped" in lines
    assert (
        "ddpimg: sweep s: 1 of 3 points to run, 1 at a time; the table: ddpimg runs "
        + str(directory)
        in lines
    )


def test_points_at_once_log_to_files_and_share_the_cpus(tmp_path: Path, fake: Path) -> None:
    directory = tmp_path / "s"
    sweep = make_sweep(directory, ["x=1,2,3"], fake)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    said = io.StringIO()
    assert run_local(sweep, parallel=2, env=env, cpus=4, stream=said, out=io.StringIO()) == 0
    for value in "123":
        assert (directory / f"x={value}" / "train.log").read_text() == f"training {value}\n"
        assert (directory / f"x={value}" / "threads").read_text() == "2"
    assert "2 at a time, OMP_NUM_THREADS=2 each" in said.getvalue()


def test_a_sweep_running_elsewhere_and_another_sweeps_directory_are_refused(
    tmp_path: Path, fake: Path
) -> None:
    held = tmp_path / "held"
    held.mkdir()
    assert lock.hold(held)  # this process holds it, as another sweep's would
    with pytest.raises(SweepError, match=r"sweep held is being run by another process"):
        run_local(make_sweep(held, ["x=1"], fake), parallel=1, env={}, cpus=1)
    directory = tmp_path / "s"
    assert run_local(make_sweep(directory, ["x=1"], fake), parallel=1, env=os.environ,
                     cpus=1, stream=io.StringIO(), out=io.StringIO()) == 0  # fmt: skip
    with pytest.raises(SweepError, match=r"holds another sweep \(s: --fake over x\)"):
        run_local(make_sweep(directory, ["y=1"], fake), parallel=1, env={}, cpus=1)


RUN_IN_A_PROCESS = """\
import io, os, sys
sys.path[:0] = {paths!r}
from tests.sweep.test_local import make_sweep
from ddpimg.sweep.local import run_local
from pathlib import Path
sweep = make_sweep(Path({directory!r}), ["x=wait,1"], Path({fake!r}))
sys.exit(run_local(sweep, parallel=1, env=os.environ, cpus=1))
"""


def test_usr2_reaches_the_point_running_and_no_other_starts(tmp_path: Path, fake: Path) -> None:
    directory = tmp_path / "s"
    code = RUN_IN_A_PROCESS.format(paths=sys.path, directory=str(directory), fake=str(fake))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (directory / "x=wait" / "waiting").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the point never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR2)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == exitcodes.PREEMPTED, stderr
    assert "x=wait preempted" in stderr
    assert "sweep s stopped by SIGUSR2: the same command continues" in stderr
    assert not (directory / "x=1").exists()
    assert "0/2 completed, 1 stopped, 1 not started" in stdout
