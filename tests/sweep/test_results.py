"""A sweep's directory read back (ddpimg.sweep.results, .listing): the points' runs, the
counts and the best point, and a sweep.json that does not fit refused by name; ddpimg runs
shows a sweep as one line and ddpimg runs SWEEP its points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpimg.cli import main
from ddpimg.sweep.listing import sweep_row
from ddpimg.sweep.results import read_results, verdict
from ddpimg.sweep.spec import SweepError
from tests.runs.test_records import TRAIN
from tests.sweep.sweeps import finished, make_sweep


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return make_sweep(
        tmp_path / "runs" / "mnist-lr-abc123",
        ["lr=0.4,0.2,0.1,0.05"],
        {
            "lr=0.4": ("completed", finished(0.9, 0.8)),
            "lr=0.2": ("completed", finished(0.7, 0.3)),
            "lr=0.1": ("running", TRAIN),
        },
    )


def test_counts_and_the_best_point_by_its_final_eval_loss(sweep: Path) -> None:
    results = read_results(sweep)
    assert [result.status for result in results.points] == [
        "completed", "completed", "running", "not started"
    ]  # fmt: skip
    assert (
        verdict(results) == "2/4 completed, 1 running, 1 not started; best lr=0.2 (eval loss 0.3)"
    )
    assert not results.ended
    row = sweep_row(sweep)
    assert (row.status, row.loss, row.best) == (
        "sweep: 2/4 completed, 1 running, 1 not started, best lr=0.2", 0.3, "lr=0.2"
    )  # fmt: skip


def test_without_evaluations_the_final_training_loss_decides(tmp_path: Path) -> None:
    path = make_sweep(
        tmp_path / "s",
        ["x=a,b"],
        {"x=a": ("completed", finished(0.5, None)), "x=b": ("failed", finished(0.1, None))},
    )
    assert verdict(read_results(path)) == "1/2 completed, 1 failed; best x=a (loss 0.5)"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["points"][0].update(name="../../etc"), "is not a directory name"),
        (lambda d: d["points"][0].update(name=".."), "is not a directory name"),
        (lambda d: d["points"][1].update(name=d["points"][0]["name"]), "two points share a name"),
        (lambda d: d["points"][0].update(values={"other": "1"}), "do not name the sweep's axes"),
        (lambda d: d.update(kind="other"), "not a sweep's definition"),
        (lambda d: d.update(axes=[{"name": "lr", "range": "cubic"}]), "axes are not a list"),
    ],
)
def test_a_sweep_file_that_does_not_fit_is_refused(sweep: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    document = json.loads((sweep / "sweep.json").read_text())
    change(document)
    (sweep / "sweep.json").write_text(json.dumps(document))
    with pytest.raises(SweepError, match=message):
        read_results(sweep)


@pytest.fixture(autouse=True)
def nothing_submitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DDPIMG_RUNS", raising=False)
    monkeypatch.chdir(tmp_path)


def test_runs_lists_a_sweep_as_one_line_and_its_points_by_name(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {key: row[key] for key in ("name", "kind", "points", "completed", "running", "failed",
                                      "best")} == {
        "name": "mnist-lr-abc123", "kind": "sweep", "points": 4, "completed": 2, "running": 1,
        "failed": 0, "best": "lr=0.2",
    }  # fmt: skip
    assert main(["runs", "mnist-lr-abc123"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "  point    status       steps    loss  eval loss",
        "  lr=0.4   completed        3     0.9        0.8",
        "* lr=0.2   completed        3     0.7        0.3",
        "  lr=0.1   running          3  0.6667",
        "  lr=0.05  not started",
        "sweep mnist-lr-abc123: 2/4 completed, 1 running, 1 not started; best lr=0.2 (eval loss "
        "0.3)",
    ]
    assert main(["runs", str(sweep), "--json"]) == 0
    points = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p["name"], p["values"], p["best"]) for p in points][:2] == [
        ("lr=0.4", {"lr": "0.4"}, False), ("lr=0.2", {"lr": "0.2"}, True)
    ]  # fmt: skip
    assert main(["runs", "nosuch"]) == 2
    assert "nosuch: not a sweep's directory" in capsys.readouterr().err
