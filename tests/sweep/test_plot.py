"""ddpimg plot SWEEP (ddpimg.sweep.plot): the points' losses on one colour scale by the
swept value, and the final eval loss against each swept option."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.cli import main
from ddpimg.errors import DdpimgError
from ddpimg.sweep.plot import plot_sweep
from tests.sweep.sweeps import finished, make_sweep

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def test_losses_coloured_by_the_swept_value_and_eval_loss_against_each_option(
    tmp_path: Path,
) -> None:
    sweep = make_sweep(
        tmp_path / "s",
        ["lr=0.001,0.01,0.1", "opt=adam,sgd"],
        {
            "lr=0.001_opt=adam": ("completed", finished(0.9, 0.8)),
            "lr=0.01_opt=sgd": ("completed", finished(0.5, 0.2)),
            "lr=0.1_opt=adam": ("running", finished(0.7, None)[:2]),
        },
    )
    figure = plot_sweep(sweep, tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:8] == PNG
    curves, colour_bar, by_lr, by_opt = figure.axes
    lines = curves.get_lines()
    train = [line for line in lines if line.get_linestyle() == "-"]
    assert [line.get_label() for line in train] == [
        "lr=0.001_opt=adam", "lr=0.01_opt=sgd", "lr=0.1_opt=adam"
    ]  # fmt: skip
    assert len({line.get_color() for line in train}) == 3  # one colour scale over lr
    assert colour_bar.get_ylabel() == "lr"
    # lr spans a factor of 100: a log axis with a tick at each value; opt is categorical.
    assert by_lr.get_xscale() == "log"
    assert [label.get_text() for label in by_lr.get_xticklabels()] == ["0.001", "0.01", "0.1"]
    assert [label.get_text() for label in by_opt.get_xticklabels()] == ["adam", "sgd"]
    assert by_lr.get_ylabel() == "final eval loss"
    # Two points evaluated (the third still runs), and the best is ringed: 3 markers.
    assert len(by_lr.collections) == 3
    assert sorted(point[1] for c in by_lr.collections for point in c.get_offsets()) == [
        0.2, 0.2, 0.8
    ]  # fmt: skip


def test_the_plot_command_draws_a_sweep_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DDPIMG_RUNS", raising=False)
    make_sweep(tmp_path / "runs" / "sw", ["seed=1,2"], {"seed=1": ("completed", finished(1, 1))})
    assert main(["plot", "sw", "-o", "sw.png"]) == 0
    assert (tmp_path / "sw.png").read_bytes()[:8] == PNG
    make_sweep(tmp_path / "runs" / "empty", ["seed=1,2"], {})
    with pytest.raises(DdpimgError, match="no point has logged a loss yet"):
        plot_sweep(tmp_path / "runs" / "empty", tmp_path / "e.png")
