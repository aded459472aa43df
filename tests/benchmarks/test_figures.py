"""The figures of docs/performance.md, drawn from results files: which file each takes, and
what each shows (read back through matplotlib's figure, not its pixels)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import figures


def bench_file(path: Path, started: str, parts: dict[str, Any]) -> None:
    record = {"machine": {"cpus": 2}, "parts": {}}
    for name, content in parts.items():
        record["parts"][name] = {"started": started, "rows": [], "record": content}
    path.write_text(json.dumps(record))


def ab(ratio: float) -> dict[str, Any]:
    return {"mnist": {"steps_per_s_ratio": {"median": ratio, "min": ratio - 0.1, "max": ratio}}}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two days of CPU results (the second reran ab only) and a GPU runbook file."""
    folder = tmp_path / "results"
    folder.mkdir()
    overhead = {"mnist": {"weak_scaling": [{"1 rank": 100.0, "2 ranks": 150.0}] * 3}}
    totals = {"to first step": 2, "whole process": 3}
    sides = {
        "torch_s": [2.0, 2.2, 1.8],
        "after": {"median_s": {"python": 0.1, "imports": 1.5} | totals},
        "before": {"median_s": {"python": 0.1, "imports": 9.5} | totals},
    }
    parts = {"ab": ab(1.1), "overhead": overhead, "startup": {"breakdown": sides}}
    bench_file(folder / "vm-2026-11-01.json", "2026-11-01T00:00:00+00:00", parts)
    bench_file(folder / "vm-2026-11-02.json", "2026-11-02T00:00:00+00:00", {"ab": ab(1.3)})
    rates = {"ddpimg_images_per_s": 300.0, "reference_images_per_s": 200.0}
    runbook = {
        "runbook": "ddpimg GPU runbook",
        "started": "2026-11-03",
        "device": {"gpu": {"name": "NVIDIA H200"}},
        "steps": [{"name": "bench-resnet50", "record": rates}],
    }
    (folder / "h200-runbook.json").write_text(json.dumps(runbook))
    (folder / "notes.json").write_text("not json")
    return folder


def test_each_figure_takes_the_newest_results_of_its_part(results: Path, tmp_path: Path) -> None:
    docs = figures.documents(results)
    throughput = Figure()
    assert figures.throughput(throughput, docs)
    (axes,) = throughput.axes
    assert [bar.get_width() for bar in axes.patches] == [1.3, 1.5]  # the newer ab; the H200
    assert [label.get_text() for label in axes.get_yticklabels()] == [
        "MNIST CNN\n2-core CPU",
        "ResNet-50, bf16\nH200",
    ]
    startup = Figure()
    assert figures.startup(startup, docs)
    bars = startup.axes[0].patches
    # Two phases a side, the totals left out: python and imports, after then before.
    assert [bar.get_width() for bar in bars] == [0.1, 0.1, 1.5, 9.5]
    scaling = Figure()
    assert figures.scaling(scaling, docs)
    measured, linear = scaling.axes[0].get_lines()
    assert list(measured.get_ydata()) == [100.0, 150.0]
    assert list(linear.get_ydata()) == [100.0, 200.0]
    assert measured.get_label() == "MNIST CNN (75%)"
    images = tmp_path / "images"
    assert figures.draw_all(results, images) == [
        figures.THROUGHPUT,
        figures.STARTUP,
        figures.SCALING,
    ]
    assert (images / figures.STARTUP).read_bytes()[:4] == b"\x89PNG"


def test_a_figure_without_results_is_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / figures.SCALING).write_bytes(b"the committed one")
    assert figures.draw_all(tmp_path, images) == []
    assert (images / figures.SCALING).read_bytes() == b"the committed one"
    assert (
        f"figures: {figures.SCALING}: no results of its part in {tmp_path}"
        in capsys.readouterr().err
    )
