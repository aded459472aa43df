"""The benchmark driver's bookkeeping (the measurements themselves run in ``nox -s bench``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench
from parts import startup
from parts.common import TrainRun
from parts.topology import compress_nid

from ddpimg.train.startup import PHASES


def part(value: str) -> dict[str, object]:
    return {"rows": [[value, "", ""]], "record": {}}


def test_a_rerun_replaces_its_parts_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "host-day.json"
    first = bench.merged(path, {"env": part("env 1"), "ab": part("ab 1")}, {"cpus": 2})
    path.write_text(json.dumps(first))
    second = bench.merged(path, {"ab": part("ab 2"), "topology": part("topo 2")}, {"cpus": 2})
    # Parts in the order of bench.PARTS, whatever order they ran in.
    assert list(second["parts"]) == ["env", "topology", "ab"]
    assert second["parts"]["env"] == part("env 1")
    assert second["parts"]["ab"] == part("ab 2")


def test_a_file_in_another_layout_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "host-day.json"
    path.write_text(json.dumps({"machine": {}, "env": {"ratio": 9}, "rows": []}))
    assert bench.merged(path, {"gpu": part("gpu")}, {})["parts"] == {"gpu": part("gpu")}


def test_startup_phases_are_measured_from_the_spawn() -> None:
    marks = {name: 100.0 + i for i, name in enumerate(PHASES)}
    run = TrainRun(metrics=[], manifest={"startup": {"marks": marks}}, spawned=99.5, wall_s=9.0)
    seconds = startup.phases(run)
    assert seconds["launch"] == pytest.approx(0.5)
    assert seconds["first_step"] == pytest.approx(1.0)
    assert seconds["total"] == pytest.approx(len(marks) - 1 + 0.5)


def test_the_first_step_breakdown_adds_up_to_the_whole_process() -> None:
    seconds = {name: 0.25 * (i + 1) for i, name in enumerate(PHASES)}
    seconds |= {"total": sum(seconds.values()), "wall": 20.0}
    rows = startup.split(seconds, python_s=0.05)
    assert sum(rows[label] for label in startup.BREAKDOWN) == pytest.approx(20.0)
    assert rows["to first step"] == pytest.approx(seconds["total"])
    # launch less the interpreter, plan and setup: 0.25 - 0.05 + 0.5 + 1.25
    assert rows[startup.BREAKDOWN[1]] == pytest.approx(1.95)
    assert rows[startup.BREAKDOWN[-1]] == pytest.approx(20.0 - seconds["total"])


@pytest.mark.parametrize(
    ("indices", "expected"),
    [
        ([0, 1, 2, 4], "nid[000000-000002,000004]"),
        ([7], "nid[000007]"),
        ([3, 5], "nid[000003,000005]"),
    ],
)
def test_node_lists_are_compressed_as_slurm_writes_them(indices: list[int], expected: str) -> None:
    assert compress_nid(indices) == expected
