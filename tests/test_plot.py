"""``ddpimg plot``: runs read from metrics.jsonl / manifest.json, what the labels and titles
say, the panels of one run, several overlaid, and the scaling panels across world sizes,
read back from the rendered image (its size, and the panels through matplotlib's figure)."""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path
from typing import Any

import numpy
import pytest

from ddpimg.cli import main
from ddpimg.errors import DdpimgError
from ddpimg.plot import Run, TrainPoint, labels, plot_runs, read_run, scaling, threads_caveat, title
from ddpimg.plot.panels import step_times

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
    arguments: dict[str, Any] | None = None,
    eval_samples: tuple[int, int] | None = None,
) -> Path:
    """A run directory as train leaves it: every step logged (with its throughput, elapsed
    time and learning rate), an eval per epoch (``eval_samples``: evaluated of the set) and,
    unless ``samples_per_s`` is None, a summary; a manifest with ``arguments`` when given."""
    path.mkdir(parents=True)
    lines: list[dict[str, Any]] = []
    for epoch in range(1, epochs + 1):
        for index in range(steps_per_epoch):
            step = (epoch - 1) * steps_per_epoch + index + 1
            lines.append(
                {"kind": "train", "epoch": epoch, "step": step, "loss": 2.0 / step,
                 "samples_per_s": 50.0 * step, "elapsed_s": 0.5 * step, "lr": 0.1 / epoch}
            )  # fmt: skip
        evaluated = (
            {}
            if eval_samples is None
            else dict(zip(("samples", "set_samples"), eval_samples, strict=True))
        )
        lines.append(
            {"kind": "eval", "epoch": epoch, "step": epoch * steps_per_epoch, "loss": 1.0 / epoch,
             "accuracy": 0.4 * epoch} | evaluated
        )  # fmt: skip
    if samples_per_s is not None:
        lines.append(
            {"kind": "summary", "world_size": world_size, "samples_per_s": samples_per_s,
             "steady_samples_per_s": None, "steps_per_epoch": steps_per_epoch,
             "global_batch_size": 64}
        )  # fmt: skip
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    manifest: dict[str, Any] = {}
    if manifest_world is not None:
        manifest["distributed"] = {"world_size": manifest_world}
    if cpu_threads is not None:
        manifest["run_info"] = {"cpu_threads": cpu_threads}
    if arguments is not None:
        manifest["arguments"] = arguments
    if manifest:
        (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's header (its IHDR chunk)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def values(data: object) -> list[float]:
    return [float(value) for value in numpy.asarray(data)]


MNIST = {"trainer": "mnist", "epochs": 2, "lr": None, "seed": 1, "out": "runs/x"}


# --- reading a run ---------------------------------------------------------------------


def test_read_run_takes_every_logged_line(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", 2, samples_per_s=250.0, arguments=MNIST, eval_samples=(8, 9))
    run = read_run(path)
    assert (run.world_size, run.samples_per_s, run.global_batch) == (2, 250.0, 64)
    assert (run.what, run.name, run.arguments["epochs"]) == ("train mnist", "r", 2)
    assert [point.step for point in run.steps] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert run.steps[1] == TrainPoint(2, 1.0, samples_per_s=100.0, elapsed_s=1.0, lr=0.1)
    assert [(e.step, e.loss, e.accuracy, e.samples, e.set_samples) for e in run.evals] == [
        (4, 1.0, 0.4, 8, 9),
        (8, 0.5, 0.8, 8, 9),
    ]


def test_unfinished_run_takes_its_world_size_from_the_manifest(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", world_size=None, samples_per_s=None, manifest_world=4)
    run = read_run(path)
    assert (run.world_size, run.samples_per_s, run.what) == (4, None, None)


def test_steady_throughput_is_preferred(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", world_size=1)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    summary = json.loads(lines[-1]) | {"steady_samples_per_s": 120.0}
    (path / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(summary)]) + "\n")
    assert read_run(path).samples_per_s == 120.0


def test_an_eval_line_without_its_step_is_placed_at_its_epochs_end(tmp_path: Path) -> None:
    """Runs written before eval lines had a step: the summary's steps per epoch place them;
    without a summary, the last step logged before them does."""
    lines = [
        {"kind": "train", "epoch": 1, "step": 3, "loss": 2.0},
        {"kind": "eval", "epoch": 1, "loss": 1.5},
        {"kind": "summary", "world_size": 1, "steps_per_epoch": 5, "samples_per_s": 1.0},
    ]
    for name, kept, step in (("finished", lines, 5.0), ("unfinished", lines[:2], 3.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in kept))
        assert [point.step for point in read_run(tmp_path / name).evals] == [step]


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


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (PNG_SIGNATURE + b"\x00\xff\xfe" * 40, r"metrics.jsonl: line 1 is not UTF-8 text"),
        (b'{"kind": "train", "step": 1, "loss": "abc"}\n', r":1: 'loss' is 'abc', expected a"),
        (b'{"kind": "train", "step": -1, "loss": 1.0}\n', r":1: 'step' is -1, expected a whole"),
        (b'{"kind": "train", "step": 1.5, "loss": 1.0}\n', r":1: 'step' is 1.5, expected a whole"),
        (b'{"kind": "train", "step": 2}\n', r":1: a train line needs 'step' and 'loss'"),
        (b'{"kind": "train", "step": 2, "loss": 1, "lr": "x"}\n', r":1: 'lr' is 'x', expected"),
        (b'{"kind": "eval", "loss": [1]}\n', r":1: 'loss' is \[1\], expected a number"),
        (b'{"kind": "eval", "loss": 1, "samples": -3}\n', r":1: 'samples' is -3, expected a"),
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


def test_a_malformed_manifest_is_left_out(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", 1)
    (path / "manifest.json").write_text('{"arguments": [1], "distributed": "x", "script": 5}')
    run = read_run(path)
    assert (run.arguments, run.what, run.world_size) == ({}, None, 1)


# --- what the plot says in words -------------------------------------------------------


def named(name: str, world: int | None = 1, **arguments: Any) -> Run:
    return Run(Path("runs") / name, world, what="train mnist", arguments=MNIST | arguments,
               global_batch=64)  # fmt: skip


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([named("a"), named("b", lr=0.5)], ["--lr default", "--lr 0.5"]),
        ([named("a", 1), named("b", 2)], ["1 process", "2 processes"]),
        ([named("a", 1), named("b", 2, seed=3)], ["1 process, --seed 1", "2 processes, --seed 3"]),
        ([named("a", deterministic=True), named("b", deterministic=False)],
         ["--deterministic", "no --deterministic"]),
        ([named("a"), named("b", out="elsewhere")], ["a", "b"]),  # where it wrote: no difference
        ([named("a", 2), named("b", 2), named("c", 4)],
         ["2 processes (a)", "2 processes (b)", "4 processes"]),
    ],
)  # fmt: skip
def test_the_legend_names_what_differs_between_the_runs(
    runs: list[Run], expected: list[str]
) -> None:
    assert labels(runs) == expected


def test_the_title_says_what_ran_with_which_options() -> None:
    one = named("mnist-1", 2, max_steps=50, data="x\x1b[31m")
    assert title([one]) == (
        "mnist-1: train mnist, 2 processes, global batch 64\n"
        "--data x\\x1b[31m --epochs 2 --max-steps 50"
    )
    assert title([named("a"), named("b", lr=0.5)]) == (
        "2 runs of train mnist, all with 1 process, global batch 64\n--epochs 2"
    )


def test_time_per_step_is_wall_clock_between_logged_steps() -> None:
    timed = [TrainPoint(10, 1.0, elapsed_s=2.0), TrainPoint(20, 1.0, elapsed_s=2.5)]
    assert step_times(Run(Path("r"), 1, steps=timed)) == [(10, 0.2), (20, 0.05)]
    rated = [TrainPoint(5, 1.0, samples_per_s=320.0)]
    assert step_times(Run(Path("r"), 1, steps=rated, global_batch=64)) == [(5, 0.2)]
    assert step_times(Run(Path("r"), 1, steps=rated)) == []


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


def test_runs_with_unequal_threads_per_process_get_a_caveat() -> None:
    one = Run(Path("n1"), 1, samples_per_s=100.0, cpu_threads=2)
    two = Run(Path("n2"), 2, samples_per_s=434.0, cpu_threads=1)
    caveat = threads_caveat([one, two])
    assert caveat is not None
    assert "(1 process: 2 threads; 2 processes: 1 thread)" in caveat
    assert "OMP_NUM_THREADS" in caveat
    same = [
        Run(Path("a"), 1, samples_per_s=1.0, cpu_threads=1),
        Run(Path("b"), 2, samples_per_s=2.0, cpu_threads=1),
    ]
    assert threads_caveat(same) is None
    # GPU runs record no CPU threads; an unfinished run is not in the scaling panels.
    gpu = [Run(Path("g1"), 1, samples_per_s=1.0), Run(Path("g2"), 2, samples_per_s=2.0)]
    assert threads_caveat(gpu) is None
    assert threads_caveat([*same, Run(Path("u"), 4, cpu_threads=8)]) is None


# --- the figure, read back -------------------------------------------------------------

PER_RUN = [
    "Loss: train at every logged step (line), evaluations (dots)",
    "Learning rate",
    "Throughput between logged steps (evaluations left out)",
    "Time per step (wall clock between logged steps)",
]


def test_one_run_shows_its_loss_learning_rate_throughput_and_step_time(tmp_path: Path) -> None:
    """A smoke run (one evaluation, on part of the set): four panels over its steps, the
    run named in the title, a PNG of 12 x 7.6 inches at 100 dpi."""
    path = write_run(tmp_path / "smoke", 1, epochs=1, arguments=MNIST | {"max_steps": 4},
                     eval_samples=(1024, 10_000))  # fmt: skip
    output = tmp_path / "one.png"
    figure = plot_runs([read_run(path)], output)
    assert png_size(output) == (1200, 760)
    assert [axes.get_title() for axes in figure.axes] == PER_RUN
    loss, lr, rate, step_time = figure.axes
    train, evaluation = loss.get_lines()
    assert (train.get_label(), evaluation.get_label()) == (
        "train",
        "eval on 1,024 of 10,000 samples",
    )
    assert values(train.get_xdata()) == [1, 2, 3, 4]
    assert (values(evaluation.get_xdata()), values(evaluation.get_ydata())) == ([4], [1.0])
    assert values(lr.get_lines()[0].get_ydata()) == [0.1] * 4
    assert values(rate.get_lines()[0].get_ydata()) == [50.0, 100.0, 150.0, 200.0]
    assert values(step_time.get_lines()[0].get_ydata()) == [500.0] * 4
    assert figure.get_suptitle() == (
        "smoke: train mnist, 1 process, global batch 64\n--epochs 2 --max-steps 4"
    )


def test_two_runs_of_other_options_are_overlaid_and_named_by_them(tmp_path: Path) -> None:
    """The same world size: no scaling panels; two evaluations each: the accuracy panel."""
    first = read_run(write_run(tmp_path / "a", 1, arguments=MNIST))
    second = read_run(write_run(tmp_path / "b", 1, arguments=MNIST | {"lr": 0.5}))
    output = tmp_path / "two.png"
    figure = plot_runs([first, second], output)
    assert png_size(output) == (1200, 1100)
    assert [axes.get_title() for axes in figure.axes] == [*PER_RUN, "Evaluation accuracy"]
    legend = figure.axes[0].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["--lr default", "--lr 0.5"]
    assert [len(axes.get_lines()) for axes in figure.axes] == [4, 2, 2, 2, 2]


def test_runs_of_two_world_sizes_add_the_scaling_panels(tmp_path: Path) -> None:
    one = read_run(write_run(tmp_path / "n1", 1, samples_per_s=100.0, epochs=1, cpu_threads=2))
    two = read_run(write_run(tmp_path / "n2", 2, samples_per_s=180.0, epochs=1, cpu_threads=1))
    output = tmp_path / "scaling.png"
    figure = plot_runs([one, two], output)
    assert png_size(output) == (1200, 1100)
    assert len(figure.axes) == 6
    rate, efficiency = figure.axes[4:]
    measured, ideal = rate.get_lines()
    assert values(measured.get_xdata()) == [1, 2]
    assert values(measured.get_ydata()) == [100.0, 180.0]
    assert values(ideal.get_ydata()) == [100.0, 200.0]
    curve, reference = efficiency.get_lines()
    assert values(curve.get_ydata()) == pytest.approx([100.0, 90.0])
    assert values(reference.get_ydata()) == [100, 100]
    assert efficiency.get_title() == "Scaling efficiency (threads per process differ)"
    assert [text.get_text() for text in figure.axes[0].get_legend().get_texts()] == [
        "1 process",
        "2 processes",
    ]
    unfinished = [Run(Path("u1"), 1), Run(Path("u2"), 2)]
    figure = plot_runs(unfinished, tmp_path / "unfinished.png")
    assert [text.get_text() for text in figure.axes[4].texts] == ["no finished run"]


def test_a_scripts_run_without_throughput_or_learning_rate_says_so(tmp_path: Path) -> None:
    """A Hugging Face script logs fractional epochs and evaluations without accuracy; a
    plain script its steps and loss only."""
    hf = tmp_path / "hf"
    hf.mkdir()
    lines = [
        {"kind": "train", "step": 1, "epoch": 0.25, "loss": 3.0},
        {"kind": "train", "step": 2, "epoch": 0.5, "loss": 2.0},
        {"kind": "eval", "step": 2, "epoch": 0.5, "loss": 2.5, "runtime": 0.1},
    ]
    (hf / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = read_run(hf)
    assert [(p.step, p.loss) for p in run.steps] == [(1, 3.0), (2, 2.0)]
    assert math.isnan(run.evals[0].accuracy)
    figure = plot_runs([run], tmp_path / "hf.png")
    assert [axes.texts[0].get_text() for axes in figure.axes[1:]] == [
        "no learning rate in metrics.jsonl",
        "no throughput in metrics.jsonl",
        "no elapsed time in metrics.jsonl",
    ]


def test_unwritable_output_is_named(tmp_path: Path) -> None:
    run = read_run(write_run(tmp_path / "r", world_size=1))
    output = tmp_path / "missing" / "out.png"
    with pytest.raises(DdpimgError, match=rf"-o {output}: cannot write the plot"):
        plot_runs([run], output)


def test_the_command_notes_unequal_threads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = write_run(tmp_path / "n1", world_size=1, samples_per_s=100.0, cpu_threads=2, epochs=1)
    two = write_run(tmp_path / "n2", world_size=2, samples_per_s=434.0, cpu_threads=1, epochs=1)
    assert main(["plot", str(one), str(two), "-o", str(tmp_path / "cli.svg")]) == 0
    assert "ddpimg: note: the runs' processes had different CPU threads" in capsys.readouterr().err
    assert (tmp_path / "cli.svg").read_text().startswith("<?xml")


@pytest.mark.parametrize("what", ["runs", "sweep"])
def test_a_plot_without_matplotlib_says_what_to_install(
    what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddpimg.sweep.plot import plot_sweep

    def draw() -> object:
        if what == "runs":
            return plot_runs([Run(path=tmp_path, world_size=1)], tmp_path / "plot.png")
        return plot_sweep(tmp_path, tmp_path / "plot.png")

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # its import now fails
    with pytest.raises(DdpimgError) as raised:
        draw()
    assert raised.value.message.startswith("ddpimg plot needs matplotlib, which cannot be imported")
    assert raised.value.hint == "pip install matplotlib (or ddpimg[plot])"
    assert not (tmp_path / "plot.png").exists()
