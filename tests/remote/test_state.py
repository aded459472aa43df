"""The laptop's record of its runs: where it is, names that do not collide, what was last
seen, and a file that does not fit is an error naming it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote import state
from ddpimg.remote.state import RemoteRun

RUN = RemoteRun(
    "mnist-7",
    "login",
    "7",
    "/j",
    "/j/w",
    "/j/w/runs/7",
    "/j/w/ddpimg-7.out",
    "2026-11-29T03:15:00Z",
    "local",
    ("train", "--epochs", "1"),
    "/l/runs/mnist-7",
)


def test_where_it_is() -> None:
    assert state.state_path({"XDG_STATE_HOME": "/s"}) == Path("/s/ddpimg/remote-runs.json")
    assert state.state_path({"HOME": "/h"}) == Path("/h/.local/state/ddpimg/remote-runs.json")


def test_add_update_find(tmp_path: Path) -> None:
    path = tmp_path / "ddpimg" / "remote-runs.json"
    assert state.load(path) == []
    assert state.add(path, RUN) == RUN
    other = state.add(path, replace(RUN, host="other"))
    assert (other.name, other.local_dir) == ("mnist-7.2", "/l/runs/mnist-7.2")
    state.update(path, "mnist-7", state="COMPLETED", status="completed", steps=8, loss=0.25)
    runs = state.load(path)
    assert [(r.name, r.state, r.steps, r.loss) for r in runs] == [
        ("mnist-7", "COMPLETED", 8, 0.25),
        ("mnist-7.2", "", None, None),
    ]
    assert state.find(runs, "latest").name == "mnist-7.2"
    assert state.find(runs, "mnist-7").host == "login"
    with pytest.raises(
        DdpimgError,
        match=r"nope: no run of that name was submitted from here \(newest: mnist-7, mnist-7.2\)",
    ):
        state.find(runs, "nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"version": 2, "runs": []}', "not a version 1 record"),
        ('{"version": 1, "runs": {}}', "runs is not a list"),
        ('{"version": 1, "runs": [1]}', "an entry is not a JSON object"),
    ],
)
def test_a_file_that_does_not_fit_is_an_error_naming_it(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "remote-runs.json"
    path.write_text(text)
    with pytest.raises(DdpimgError, match=message) as found:
        state.load(path)
    assert str(path) in str(found.value)
    assert "move it away" in str(found.value)


def test_entries_are_checked_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "remote-runs.json"
    entry = RUN.to_json()
    for changed, message in (
        ({"command": "train"}, "command is not a list"),
        ({"host": 7}, "host is not a string"),
        ({"name": "a/b"}, "is not a run name"),
    ):
        path.write_text(json.dumps({"version": 1, "runs": [entry | changed]}))
        with pytest.raises(DdpimgError, match=message):
            state.load(path)
    path.write_text(json.dumps({"version": 1, "runs": [entry | {"steps": "8", "loss": True}]}))
    assert (state.load(path)[0].steps, state.load(path)[0].loss) == (None, None)
    (tmp_path / "big.json").write_bytes(b" " * (state.MAX_BYTES + 1))
    with pytest.raises(DdpimgError, match="cannot be read"):
        state.load(tmp_path / "big.json")
