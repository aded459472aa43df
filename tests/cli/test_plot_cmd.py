"""``ddpimg plot`` from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.cli import main
from tests.test_plot import PNG_SIGNATURE, write_run


def test_plot_writes_the_image(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = write_run(tmp_path / "n1", world_size=1)
    two = write_run(tmp_path / "n2", world_size=2)
    output = tmp_path / "scaling.png"
    assert main(["plot", str(one), str(two), "-o", str(output)]) == 0
    assert output.read_bytes()[:8] == PNG_SIGNATURE
    assert capsys.readouterr().out == f"wrote {output}\n"


def test_directory_without_metrics_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty"), "-o", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err.startswith(
        f"ddpimg: error: run directory {tmp_path / 'empty'} has no metrics.jsonl"
    )
    assert not (tmp_path / "x.png").exists()


def test_one_run_is_drawn_into_its_directory_and_several_need_an_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without -o, one run's plot is its own plot.png, redrawn each time (ddpimg fetch draws
    it there too); for several runs there is no such place, and -o is asked for."""
    one = write_run(tmp_path / "n1", world_size=1)
    (one / "plot.png").write_bytes(b"an earlier drawing")
    assert main(["plot", str(one)]) == 0
    assert capsys.readouterr().out == f"wrote {one / 'plot.png'}\n"
    assert (one / "plot.png").read_bytes()[:8] == PNG_SIGNATURE
    two = write_run(tmp_path / "n2", world_size=2)
    assert main(["plot", str(one), str(two)]) == 2
    assert capsys.readouterr().err == (
        "ddpimg: error: 2 runs and no -o: say where their plot goes\n"
        "  hint: add -o FILE.png (or .svg); a single run is drawn into RUN/plot.png\n"
    )


def test_a_run_is_named_by_its_name_or_latest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs without --out are plotted by their names under ./runs, and the newest as latest."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DDPIMG_RUNS", raising=False)
    write_run(tmp_path / "runs" / "mnist-1", world_size=1)
    write_run(tmp_path / "runs" / "mnist-2", world_size=2)
    (tmp_path / "runs" / "latest").symlink_to("mnist-2")
    assert main(["plot", "mnist-1", "latest", "-o", "both.png"]) == 0
    assert (tmp_path / "both.png").read_bytes()[:8] == PNG_SIGNATURE
    assert main(["plot", "mnist-3", "-o", "none.png"]) == 2
    assert capsys.readouterr().err.startswith(
        "ddpimg: error: mnist-3: no such run directory, and no run of that name in runs/\n"
    )


def test_an_existing_output_is_replaced_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o over a link to a file of yours (or over any file) once replaced it without a
    word; now it is refused, and with --force the link itself is replaced."""
    run = write_run(tmp_path / "n1", world_size=1)
    mine = tmp_path / "thesis.pdf"
    mine.write_bytes(b"chapter 1")
    output = tmp_path / "scaling.png"
    output.symlink_to(mine)
    assert main(["plot", str(run), "-o", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ddpimg: error: -o {output}: a link to {mine} is there already")
    assert "--force" in err
    assert main(["plot", str(run), "-o", str(output), "--force"]) == 0
    assert mine.read_bytes() == b"chapter 1"
    assert not output.is_symlink()
    assert output.read_bytes()[:8] == PNG_SIGNATURE
