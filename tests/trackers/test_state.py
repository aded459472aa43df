from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.trackers.state import STATE_FILE, read_state, write_state


def test_state_round_trips(tmp_path: Path) -> None:
    state = {"wandb": {"run_id": "abc"}, "mlflow": {"run_id": "1f", "tracking_uri": "file:///x"}}
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]", '{"wandb": "abc"}'])
def test_unusable_state_means_new_runs(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        (tmp_path / STATE_FILE).write_text(content)
    assert read_state(tmp_path) == {}
