"""The note between train --nproc-per-node's launcher and its rank 0, and the launcher's
verdict written into the run's manifest.json (ddpimg.runtime.run_note)."""

from __future__ import annotations

import json
from pathlib import Path

from ddpimg.endings.workers import WorkerExit, local_verdict
from ddpimg.runtime.run_note import RUN_NOTE_VARIABLE, noted_run, record_verdict, tell_launcher


def _manifest(out: Path, **fields: object) -> Path:
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"status": "running", "exit_status": None}
                                                  | fields))  # fmt: skip
    return out / "manifest.json"


def test_rank_0_tells_the_launcher_where_its_run_is(tmp_path: Path) -> None:
    note = tmp_path / "note"
    tell_launcher(tmp_path / "run", {RUN_NOTE_VARIABLE: str(note)})
    assert noted_run(note) == tmp_path / "run"
    assert noted_run(tmp_path / "none") is None


def test_the_note_never_replaces_a_file(tmp_path: Path) -> None:
    """The variable names a new file: a file or a link there is left as it is."""
    precious = tmp_path / "precious"
    precious.write_text("keep me")
    tell_launcher(tmp_path / "run", {RUN_NOTE_VARIABLE: str(precious)})
    assert precious.read_text() == "keep me"
    link = tmp_path / "link"
    link.symlink_to(precious)
    tell_launcher(tmp_path / "run", {RUN_NOTE_VARIABLE: str(link)})
    assert precious.read_text() == "keep me"


def test_rank_0_killed_leaves_no_running_manifest(tmp_path: Path) -> None:
    """Rank 0 itself killed: its manifest said "running"; the launcher finishes it."""
    path = _manifest(tmp_path / "run")
    verdict = local_verdict([WorkerExit(0, -9, 42, "node7"), WorkerExit(1, 5, 43, "node7")])
    assert record_verdict(tmp_path / "run", verdict)
    manifest = json.loads(path.read_text())
    assert (manifest["status"], manifest["exit_status"]) == ("failed", 5)
    assert manifest["killed"] == {"rank": 0, "host": "node7", "pid": 42, "signal": "SIGKILL"}
    assert manifest["error"].startswith("rank 0 (host node7, pid 42) was killed by SIGKILL")
    assert manifest["ended_utc"]


def test_a_manifest_that_agrees_is_left_as_it_is(tmp_path: Path) -> None:
    path = _manifest(tmp_path / "run", status="preempted", exit_status=75)
    before = path.read_text()
    assert not record_verdict(
        tmp_path / "run", local_verdict([WorkerExit(1, 75), WorkerExit(0, 75)])
    )
    assert path.read_text() == before


def test_a_survivors_preemption_after_a_killed_rank_becomes_the_lost_rank(tmp_path: Path) -> None:
    """The race of issue 54: the survivor recorded "preempted" (the agent's SIGTERM)."""
    path = _manifest(tmp_path / "run", status="preempted", exit_status=75)
    verdict = local_verdict([WorkerExit(1, -9, 43, "n"), WorkerExit(0, 75, 42, "n")])
    assert record_verdict(tmp_path / "run", verdict)
    manifest = json.loads(path.read_text())
    assert (manifest["status"], manifest["exit_status"], manifest["killed"]["rank"]) == (
        "failed", 5, 1,
    )  # fmt: skip
