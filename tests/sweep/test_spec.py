"""A sweep's definition and points (ddpimg.sweep.spec): the grid, the seeded draws, the
names, and every refusal before anything starts."""

from __future__ import annotations

import re

import pytest

from ddpimg.sweep.spec import (
    Axis,
    Sweep,
    SweepError,
    parse_axis,
    parse_sweep,
    same_definition,
    sweep_document,
    sweep_name,
)


def names(sweep: Sweep) -> list[str]:
    return [point.name for point in sweep.points()]


def test_lists_multiply_in_the_order_given() -> None:
    sweep = parse_sweep(["lr=0.5,0.25", "seed=1,2,3"])
    assert sweep.count() == 6
    points = sweep.points()
    assert [point.index for point in points] == list(range(6))
    assert [point.values for point in points[:4]] == [
        (("lr", "0.5"), ("seed", "1")),
        (("lr", "0.5"), ("seed", "2")),
        (("lr", "0.5"), ("seed", "3")),
        (("lr", "0.25"), ("seed", "1")),
    ]
    assert names(sweep)[:2] == ["lr=0.5_seed=1", "lr=0.5_seed=2"]


def test_the_same_seed_draws_the_same_points_and_another_seed_others() -> None:
    texts = ["lr=log:1e-4:1e-2", "batch-size=int:16:64"]
    first = parse_sweep(texts, trials=8, seed=0).points()
    again = parse_sweep(texts, trials=8, seed=0).points()
    other = parse_sweep(texts, trials=8, seed=1).points()
    assert first == again
    assert [p.values for p in first] != [p.values for p in other]
    for point in first:
        lr, batch = float(point.value_map["lr"]), point.value_map["batch-size"]
        assert 1e-4 <= lr <= 1e-2
        assert re.fullmatch(r"\d+", batch)
        assert 16 <= int(batch) <= 64
        # The value a point runs with is the one its name shows: 4 significant digits.
        assert float(f"{lr:.4g}") == lr


def test_draws_are_pinned_to_the_seed() -> None:
    """random.random()'s sequence for a seed is what Python keeps across versions: these
    values must not change with an upgrade, or a sweep continued later would miss its points
    (the same three are in tests/jobs/golden/sweep-script.sh)."""
    points = parse_sweep(["lr=log:1e-4:1e-2"], trials=3, seed=0).points()
    assert [point.value_map["lr"] for point in points] == ["0.004885", "0.00328", "0.0006937"]


def test_ranges_are_drawn_together_and_meet_every_list_value() -> None:
    sweep = parse_sweep(["lr=log:1e-4:1e-2", "seed=1,2", "wd=uniform:0:0.1"], trials=3, seed=5)
    assert sweep.count() == 6
    points = sweep.points()
    assert len(points) == 6
    # Each trial's draw is run with both seeds: pairs share lr and wd.
    for first, second in zip(points[::2], points[1::2], strict=True):
        assert (first.value_map["lr"], first.value_map["wd"]) == (
            second.value_map["lr"],
            second.value_map["wd"],
        )
        assert (first.value_map["seed"], second.value_map["seed"]) == ("1", "2")


def test_equal_draws_are_one_point() -> None:
    sweep = parse_sweep(["seed=int:1:2"], trials=10, seed=0)
    assert sweep.count() == 10
    assert sorted(point.value_map["seed"] for point in sweep.points()) == ["1", "2"]
    assert [point.index for point in sweep.points()] == [0, 1]


def test_names_are_made_safe_and_long_ones_end_in_a_digest() -> None:
    (point,) = parse_sweep(["opt=adam w/decay"]).points()
    assert point.name == "opt=adam_w_decay"
    long = parse_sweep([f"arch={'x' * 150}"]).points()[0].name
    assert len(long) == 120
    assert re.fullmatch(r"arch=x+-[0-9a-f]{8}", long)


def test_two_values_that_would_share_a_directory_are_refused() -> None:
    with pytest.raises(SweepError, match=r"'opt=a/b' and 'opt=a_b' would share the directory "
                       r"opt=a_b"):  # fmt: skip
        parse_sweep(["opt=a/b,a_b"]).points()


@pytest.mark.parametrize(
    ("texts", "options", "message"),
    [
        (["lr"], {}, r"--sweep 'lr': expected NAME=VALUES"),
        (["--lr=1"], {}, r"expected NAME=VALUES"),
        (["lr=0.1,"], {}, r"--sweep 'lr=0.1,': an empty value"),
        (["lr=0.1,0.1"], {}, r"--sweep lr: 0.1 given more than once"),
        (["lr=1", "lr=2"], {}, r"--sweep lr is given more than once"),
        (["lr=a\nb"], {}, r"holds a control character"),
        (["lr=log:1e-4:1e-2"], {}, r"a range is drawn --trials times, and --trials is not"),
        (["lr=1,2"], {"trials": 3}, r"--trials draws from ranges, and no --sweep is a range"),
        (["lr=1,2"], {"seed": 3}, r"--sweep-seed draws from ranges"),
        (["lr=log:0:1"], {"trials": 2}, r"a log range is log:LOW:HIGH with 0 < LOW < HIGH"),
        (["lr=uniform:1:1"], {"trials": 2}, r"uniform:LOW:HIGH with LOW < HIGH"),
        (["bs=int:1.5:4"], {"trials": 2}, r"with whole numbers LOW <= HIGH"),
        (["lr=log:1e-4"], {"trials": 2}, r"a log range is log:LOW:HIGH"),
        (["lr=log:a:b"], {"trials": 2}, r"a log range"),
        (["lr=log:1e-4:1e-2"], {"trials": 0}, r"--trials 0: must be at least 1"),
    ],
)
def test_refusals(texts: list[str], options: dict[str, int], message: str) -> None:
    with pytest.raises(SweepError, match=message):
        parse_sweep(texts, **options)


def test_more_points_than_max_points_is_refused_before_any_draw() -> None:
    with pytest.raises(SweepError) as caught:
        parse_sweep(["lr=1,2,3", "x=log:1:2"], trials=10**9, max_points=1000)
    assert caught.value.message == (
        "the sweep has 3,000,000,000 points (3 lr x 1000000000 trials of x), more than "
        "--max-points 1,000"
    )
    assert parse_sweep(["lr=1,2", "s=1,2"], max_points=4).count() == 4


def test_axis_text_round_trips() -> None:
    assert parse_axis("lr=0.5,0.25").text() == "lr=0.5,0.25"
    assert parse_axis("lr=log:1e-4:1e-2") == Axis("lr", kind="log", low=1e-4, high=1e-2)


def test_the_sweeps_name_follows_its_definition() -> None:
    sweep = parse_sweep(["lr=0.5,0.25", "seed=1,2"])
    name = sweep_name("mnist", sweep, ["--max-steps", "3"])
    assert re.fullmatch(r"mnist-lr-seed-[0-9a-f]{6}", name)
    assert sweep_name("mnist", sweep, ["--max-steps", "3"]) == name
    assert sweep_name("mnist", sweep, ["--max-steps", "4"]) != name
    assert sweep_name("mnist", parse_sweep(["lr=0.5", "seed=1,2"]), ["--max-steps", "3"]) != name
    document = sweep_document(name, sweep, ["--max-steps", "3"], sweep.points())
    assert same_definition(document, sweep, ["--max-steps", "3"])
    assert not same_definition(document, sweep, ["--max-steps", "4"])
    assert document["points"][0]["values"] == {"lr": "0.5", "seed": "1"}
