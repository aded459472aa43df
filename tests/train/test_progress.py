from __future__ import annotations

import io

from ddpimg.train.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_at_log_points_only() -> None:
    stream = io.StringIO()
    progress = Progress(stream, interactive=False)
    progress.begin(20)
    for step in range(1, 11):
        progress.step(step, 1)
    progress.train(10, 1, 0.12345, 1234.56)
    progress.eval(1, 0.5, 0.9876)
    progress.close()
    assert stream.getvalue() == (
        "train epoch 1 step 10/20 loss 0.1235 samples/s 1234.6\n"
        "eval  epoch 1 loss 0.5000 accuracy 98.76%\n"
    )


def test_terminal_line_is_redrawn_and_throttled() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = Progress(stream, interactive=True, clock=clock)
    progress.begin(100)
    progress.step(1, 1)
    progress.step(2, 1)  # same instant: not redrawn
    clock.now = 1.0
    progress.step(3, 1)
    progress.train(3, 1, 2.0, 10.0)
    assert stream.getvalue().split("\r")[1:] == [
        "epoch 1  step 1/100",
        "epoch 1  step 3/100",
        "epoch 1  step 3/100  loss 2.0000  10 samples/s",
    ]


def test_terminal_line_ends_before_plain_lines() -> None:
    stream = io.StringIO()
    progress = Progress(stream, interactive=True, clock=Clock())
    progress.begin(3)
    progress.step(3, 1)
    progress.eval(1, 0.25, 0.5)
    progress.close()
    assert stream.getvalue() == "\repoch 1  step 3/3\neval  epoch 1 loss 0.2500 accuracy 50.00%\n"


def test_shorter_redraw_overwrites_the_longer_line() -> None:
    stream = io.StringIO()
    progress = Progress(stream, interactive=True, clock=Clock())
    progress.begin(10)
    progress.train(1, 1, 2.0, 12345.0)
    progress.train(2, 1, 2.0, 5.0)
    first, second = stream.getvalue().split("\r")[1:]
    assert second.rstrip() == "epoch 1  step 2/10  loss 2.0000  5 samples/s"
    assert len(second) == len(first)


def test_not_a_terminal_by_default() -> None:
    assert not Progress(io.StringIO()).interactive
