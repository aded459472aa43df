"""A script's run record: the manifest of a script run, and a run that continues another."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.script.record import ScriptRecord, earlier_run, same_script


def _start(out: Path, previous: dict[str, Any] | None = None) -> ScriptRecord:
    script = out.parent / "mine.py"
    script.write_text("print('hi')\n")
    return ScriptRecord.start(
        out, script=str(script), args=["--lr", "1"], run_info={"source": "slurm"},
        world={"world_size": 2}, options={"timeout": 9.0}, previous=previous, env={},
    )  # fmt: skip


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_manifest_names_the_script_and_ends_with_the_status(tmp_path: Path) -> None:
    out = tmp_path / "run"
    record = _start(out)
    written = json.loads((out / "manifest.json").read_text())
    assert written["status"] == "running"
    assert written["script"]["path"] == str(tmp_path / "mine.py")
    assert written["script"]["args"] == ["--lr", "1"]
    assert len(written["script"]["sha256"]) == 64
    assert written["distributed"] == {"world_size": 2}
    assert written["continues"] is None
    assert written["versions"]["torch"]
    record.write({"kind": "train", "step": 1, "loss": 2.0})
    record.finish("preempted", 75)
    final = json.loads((out / "manifest.json").read_text())
    assert (final["status"], final["exit_status"]) == ("preempted", 75)
    assert final["ended_utc"]
    assert _lines(out) == [{"kind": "train", "step": 1, "loss": 2.0}]


def _earlier(out: Path, manifest: object) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("status", ["preempted", "failed", "running"])  # running: killed
def test_a_run_continues_its_scripts_earlier_run_that_did_not_complete(
    tmp_path: Path, status: str
) -> None:
    script = str(tmp_path / "mine.py")
    earlier = {"script": {"path": script}, "status": status}
    _earlier(tmp_path / "run", earlier)
    assert earlier_run(tmp_path / "run", script, "auto") == earlier
    assert earlier_run(tmp_path / "run", script, "none") is None  # starts over


def test_no_earlier_run_is_a_new_run(tmp_path: Path) -> None:
    assert earlier_run(tmp_path / "nothing-here", "mine.py", "auto") is None


@pytest.mark.parametrize(
    ("manifest", "described"),
    [
        ({"script": {"path": "/x/mine.py"}, "status": "completed"}, "a completed run of this"),
        ({"script": {"path": "/x/other.py"}, "status": "failed"}, "a run of another script"),
        ({"arguments": {"trainer": "mnist"}, "status": "preempted"}, "a run of a bundled trainer"),
        ("not an object", "a run whose manifest.json cannot be read"),
    ],
)
def test_any_other_earlier_run_is_never_replaced_silently(
    tmp_path: Path, manifest: object, described: str
) -> None:
    _earlier(tmp_path / "run", manifest)
    with pytest.raises(DdpimgError, match=f"^--out {tmp_path}/run holds {described}") as info:
        earlier_run(tmp_path / "run", "/x/mine.py", "auto")
    assert info.value.hint == "use another --out, or --resume none to start over in this one"
    assert earlier_run(tmp_path / "run", "/x/mine.py", "none") is None


def test_a_continued_run_keeps_the_lines_and_rewinds_to_its_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _start(out)
    for step in (1, 2, 3):
        first.write({"kind": "train", "step": step, "loss": float(step)})
    first.write({"kind": "eval", "step": 3, "loss": 9.0})
    first.finish("failed", 5)
    (out / "metrics.jsonl").open("a").write('{"kind": "train", "step": 4, "lo')  # cut short
    previous = earlier_run(out, str(tmp_path / "mine.py"), "auto")
    second = _start(out, previous)
    assert second.manifest["continues"]["status"] == "failed"
    assert [line["step"] for line in _lines(out)] == [1, 2, 3, 3]
    second.rewind(2)
    second.write({"kind": "train", "step": 3, "loss": 30.0})
    assert [(line["kind"], line["step"]) for line in _lines(out)] == [
        ("train", 1), ("train", 2), ("train", 3),
    ]  # fmt: skip
    assert _lines(out)[-1]["loss"] == 30.0


def test_a_step_logged_again_replaces_the_lines_from_it_on(tmp_path: Path) -> None:
    """A plain script resumes from its own checkpoint, which ddpimg does not know: when it
    logs step 3 again, the old lines from step 3 on go."""
    out = tmp_path / "run"
    first = _start(out)
    for step in (1, 2, 3, 4):
        first.write({"kind": "train", "step": step, "loss": float(step)})
    first.finish("preempted", 75)
    second = _start(out, earlier_run(out, str(tmp_path / "mine.py"), "auto"))
    second.write({"kind": "train", "step": 3, "loss": 33.0})
    second.write({"kind": "train", "step": 4, "loss": 44.0})
    assert [(line["step"], line["loss"]) for line in _lines(out)] == [
        (1, 1.0), (2, 2.0), (3, 33.0), (4, 44.0),
    ]  # fmt: skip


def test_a_run_without_out_continues_only_the_same_script_with_the_same_arguments(
    tmp_path: Path,
) -> None:
    """What makes an earlier run in the runs root "the same configuration" for a script."""
    out = tmp_path / "run"
    _start(out)
    recorded = json.loads((out / "manifest.json").read_text())
    mine = str(tmp_path / "mine.py")
    assert same_script(mine, ["--lr", "1"])(recorded)
    assert not same_script(mine, ["--lr", "0.5"])(recorded)
    assert not same_script(str(tmp_path / "other.py"), ["--lr", "1"])(recorded)
    assert not same_script(mine, ["--lr", "1"])({"arguments": {"trainer": "mnist"}})
