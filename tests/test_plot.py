"""``ddpimg plot``: runs read from metrics.jsonl / manifest.json, scaling, the rendered PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy
import pytest

from ddpimg.cli import main
from ddpimg.errors import DdpimgError
from ddpimg.plot import Run, labels, plot_runs, read_run, scaling, threads_caveat

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_run(
    path: Path,
    world_size: int | None,
    *,
    samples_per_s: float | None = 100.0,
    epochs: int = 2,
    steps_per_epoch: int = 4,
    manifest_world: int | None = None,
    cpu_threads: int | None = None,
) -> Path:
    """A run directory as train leaves it: every step logged, an eval per epoch and, unless
    ``samples_per_s`` is None, a summary."""
    path.mkdir(parents=True)
    lines: list[dict[str, Any]] = []
    for epoch in range(1, epochs + 1):
        for index in range(steps_per_epoch):
            step = (epoch - 1) * steps_per_epoch + index + 1
            lines.append({"kind": "train", "epoch": epoch, "step": step, "loss": 2.0 / step})
        lines.append({"kind": "eval", "epoch": epoch, "loss": 1.0 / epoch, "accuracy": 0.4 * epoch})
    if samples_per_s is not None:
        lines.append(
            {
                "kind": "summary",
                "world_size": world_size,
                "samples_per_s": samples_per_s,
                "steady_samples_per_s": None,
                "steps_per_epoch": steps_per_epoch,
            }
        )
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    manifest: dict[str, Any] = {}
    if manifest_world is not None:
        manifest["distributed"] = {"world_size": manifest_world}
    if cpu_threads is not None:
        manifest["run_info"] = {"cpu_threads": cpu_threads}
    if manifest:
        (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_read_run_places_steps_within_epochs(tmp_path: Path) -> None:
    run = read_run(write_run(tmp_path / "r", world_size=2, samples_per_s=250.0))
    assert run.world_size == 2
    assert run.samples_per_s == 250.0
    assert [x for x, _ in run.train] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    assert run.train[1][1] == 1.0
    assert run.eval == [(1, 1.0, 0.4), (2, 0.5, 0.8)]


def test_unfinished_run_takes_its_world_size_from_the_manifest(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", world_size=None, samples_per_s=None, manifest_world=4)
    run = read_run(path)
    assert (run.world_size, run.samples_per_s) == (4, None)
    # Without a summary the steps are spread evenly over their epoch.
    assert [x for x, _ in run.train][:4] == [0.25, 0.5, 0.75, 1.0]


def test_steady_throughput_is_preferred(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", world_size=1)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    summary = json.loads(lines[-1]) | {"steady_samples_per_s": 120.0}
    (path / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(summary)]) + "\n")
    assert read_run(path).samples_per_s == 120.0


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, r"run directory {p} does not exist"),
        (lambda p: p.mkdir(), r"run directory {p} has no metrics.jsonl\n  hint: give the --out"),
        (
            lambda p: (
                p.mkdir(),
                (p / "metrics.jsonl").write_text(
                    '{"kind": "train", "step": 1, "loss": 1}\n{oops\n'
                ),
            ),
            r"{p}/metrics.jsonl:2: not JSON \(Expecting property name",
        ),
        (
            lambda p: (p.mkdir(), (p / "metrics.jsonl").write_text("[1, 2]\n")),
            r"{p}/metrics.jsonl:1: expected an object with a 'kind' key, found '\[1, 2\]'",
        ),
    ],
)
def test_bad_run_directories_are_named(tmp_path: Path, setup: Any, message: str) -> None:
    path = tmp_path / "run"
    setup(path)
    with pytest.raises(DdpimgError, match=message.format(p=path)):
        read_run(path)


def runs(*worlds: int | None) -> list[Run]:
    return [Run(Path(f"runs/n{i}"), world) for i, world in enumerate(worlds)]


@pytest.mark.parametrize(
    ("worlds", "expected"),
    [
        ((1, 2, 4), ["1 process", "2 processes", "4 processes"]),
        ((2, 2, 1), ["2 processes (n0)", "2 processes (n1)", "1 process"]),
        ((None, 8), ["n0", "8 processes"]),
    ],
)
def test_labels_are_world_sizes(worlds: tuple[int | None, ...], expected: list[str]) -> None:
    assert labels(runs(*worlds)) == expected


def test_scaling_efficiency_is_relative_to_the_smallest_run() -> None:
    measured = [
        Run(Path("a"), 4, samples_per_s=300.0),
        Run(Path("b"), 1, samples_per_s=100.0),
        Run(Path("c"), 2, samples_per_s=180.0),
        Run(Path("d"), 2, samples_per_s=190.0),  # a repeat: the best counts
        Run(Path("e"), 8, samples_per_s=None),  # unfinished
    ]
    points = scaling(measured)
    assert [(p.world_size, p.samples_per_s) for p in points] == [(1, 100.0), (2, 190.0), (4, 300.0)]
    assert [p.efficiency for p in points] == pytest.approx([1.0, 0.95, 0.75])
    assert scaling([Run(Path("x"), None, samples_per_s=5.0)]) == []


def test_plot_of_one_and_two_processes_is_a_png_with_both_curves(tmp_path: Path) -> None:
    one = read_run(write_run(tmp_path / "n1", world_size=1, samples_per_s=100.0))
    two = read_run(write_run(tmp_path / "n2", world_size=2, samples_per_s=180.0))
    output = tmp_path / "runs.png"
    figure = plot_runs([one, two], output)
    assert output.read_bytes()[:8] == PNG_SIGNATURE
    loss, accuracy, rate, efficiency = figure.axes
    # Per run: a train line and an eval line in the loss panel, one accuracy line.
    assert [line.get_label() for line in loss.get_lines()] == [
        "1 process train",
        "1 process eval",
        "2 processes train",
        "2 processes eval",
    ]
    assert [line.get_label() for line in accuracy.get_lines()] == ["1 process", "2 processes"]
    measured, ideal = rate.get_lines()
    assert values(measured.get_xdata()) == [1, 2]
    assert values(measured.get_ydata()) == [100.0, 180.0]
    assert values(ideal.get_ydata()) == [100.0, 200.0]
    curve, reference = efficiency.get_lines()
    assert values(curve.get_ydata()) == pytest.approx([100.0, 90.0])
    assert values(reference.get_ydata()) == [100, 100]


def values(data: object) -> list[float]:
    return [float(value) for value in numpy.asarray(data)]


def test_plot_without_finished_runs_says_so(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", world_size=None, samples_per_s=None)
    figure = plot_runs([read_run(path)], tmp_path / "out.png")
    assert [text.get_text() for text in figure.axes[2].texts] == ["no finished run"]
    assert figure.axes[2].get_lines() == []


def test_unwritable_output_is_named(tmp_path: Path) -> None:
    run = read_run(write_run(tmp_path / "r", world_size=1))
    output = tmp_path / "missing" / "out.png"
    with pytest.raises(DdpimgError, match=rf"-o {output}: cannot write the plot"):
        plot_runs([run], output)


def test_a_scripts_run_is_read_from_fractional_epochs_or_steps(tmp_path: Path) -> None:
    """Hugging Face and Lightning scripts log fractional epochs and evaluations without
    accuracy; a plain script may log steps only."""
    hf = tmp_path / "hf"
    hf.mkdir()
    lines = [
        {"kind": "train", "step": 1, "epoch": 0.25, "loss": 3.0},
        {"kind": "train", "step": 2, "epoch": 0.5, "loss": 2.0},
        {"kind": "eval", "step": 2, "epoch": 0.5, "loss": 2.5, "runtime": 0.1},
        {"kind": "summary", "world_size": 2, "steps": 2, "samples_per_s": 50.0},
    ]
    (hf / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = read_run(hf)
    assert run.train == [(0.25, 3.0), (0.5, 2.0)]
    assert run.eval[0][:2] == (0.5, 2.5)
    assert numpy.isnan(run.eval[0][2])
    plain = tmp_path / "plain"
    plain.mkdir()
    steps = [{"kind": "train", "step": step, "loss": 1.0 / step} for step in (1, 2, 3)]
    (plain / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in steps))
    assert [x for x, _ in read_run(plain).train] == [1.0, 2.0, 3.0]
    assert plot_runs([run, read_run(plain)], tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_SIGNATURE


def test_runs_with_unequal_threads_per_process_get_a_caveat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One process on the whole 2-core machine (2 threads) against two of 1 thread each:
    the efficiency is flagged, on the panel and on the command's standard error."""
    one = write_run(tmp_path / "n1", world_size=1, samples_per_s=100.0, cpu_threads=2)
    two = write_run(tmp_path / "n2", world_size=2, samples_per_s=434.0, cpu_threads=1)
    runs = [read_run(one), read_run(two)]
    assert [run.cpu_threads for run in runs] == [2, 1]
    caveat = threads_caveat(runs)
    assert caveat is not None
    assert "(1 process: 2 threads; 2 processes: 1 thread)" in caveat
    assert "OMP_NUM_THREADS" in caveat
    figure = plot_runs(runs, tmp_path / "out.png")
    assert figure.axes[3].get_title() == "Scaling efficiency (threads per process differ)"
    assert main(["plot", str(one), str(two), "-o", str(tmp_path / "cli.png")]) == 0
    assert f"ddpimg: note: {caveat}" in capsys.readouterr().err


def test_runs_with_equal_or_unknown_threads_get_none(tmp_path: Path) -> None:
    same = [
        read_run(write_run(tmp_path / "a", world_size=1, cpu_threads=1)),
        read_run(write_run(tmp_path / "b", world_size=2, cpu_threads=1)),
    ]
    assert threads_caveat(same) is None
    # GPU runs record no CPU threads; an unfinished run is not in the scaling panels.
    unknown = [Run(Path("g1"), 1, samples_per_s=1.0), Run(Path("g2"), 2, samples_per_s=2.0)]
    assert threads_caveat(unknown) is None
    unfinished = Run(Path("u"), 4, samples_per_s=None, cpu_threads=8)
    assert threads_caveat([*same, unfinished]) is None
    figure = plot_runs(same, tmp_path / "out.png")
    assert figure.axes[3].get_title() == "Scaling efficiency"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (PNG_SIGNATURE + b"\x00\xff\xfe" * 40, r"metrics.jsonl: line 1 is not UTF-8 text"),
        (b'{"kind": "train", "step": 1, "loss": "abc"}\n', r":1: 'loss' is 'abc', expected a"),
        (b'{"kind": "train", "step": -1, "loss": 1.0}\n', r":1: 'step' is -1, expected a whole"),
        (b'{"kind": "train", "step": 1.5, "loss": 1.0}\n', r":1: 'step' is 1.5, expected a whole"),
        (b'{"kind": "train", "step": 2}\n', r":1: a train line needs 'step' and 'loss'"),
        (b'{"kind": "eval", "loss": [1]}\n', r":1: 'loss' is \[1\], expected a number"),
        (b'{"kind": "summary", "world_size": "2"}\n', r":1: 'world_size' is '2', expected"),
        (b'{"kind": "summary", "steps_per_epoch": 0}\n', r"'steps_per_epoch' is 0"),
        (b'{"kind": "train", "step": ' + b"9" * 5000 + b"}\n", r":1: a number of 5,000 digits"),
        (b'{"kind": "x", "v": ' + b"[" * 100_000 + b"\n", r":1: JSON nested more than 64"),
    ],
)
def test_a_binary_or_mistyped_metrics_file_is_named(
    tmp_path: Path, content: bytes, message: str
) -> None:
    """A binary metrics.jsonl was a UnicodeDecodeError traceback, a string loss a
    ValueError one (exit status 1); now exit status 2 naming the file, line and key."""
    path = tmp_path / "run"
    path.mkdir()
    (path / "metrics.jsonl").write_bytes(content)
    with pytest.raises(DdpimgError, match=message) as caught:
        read_run(path)
    assert caught.value.message.startswith(f"{path / 'metrics.jsonl'}")
