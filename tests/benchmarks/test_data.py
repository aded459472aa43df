"""The ``data`` benchmark part's bookkeeping: process accounting, rows, verdict, dataset cache,
and its two loaders on a tiny tree (the measurements themselves run in ``nox -s bench``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from parts import data
from parts.data import Decoding, PhotoSpec, Rate, TreeSpec

ROLLUP = """\
5638061c4000-7ffcdf6a7000 ---p 00000000 00:00 0                          [rollup]
Rss:                1724 kB
Pss:                 224 kB
Shared_Clean:       1576 kB
"""


def fake_process(proc: Path, pid: int, children: list[int], rss: int, pss: int) -> None:
    task = proc / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    (task / "children").write_text(" ".join(map(str, children)) + (" " if children else ""))
    (proc / str(pid) / "smaps_rollup").write_text(
        f"0-1 ---p 00000000 00:00 0 [rollup]\nRss: {rss} kB\nPss: {pss} kB\n"
    )


def test_rollup_fields_are_read_in_kb_and_the_header_line_is_skipped() -> None:
    assert data.rollup_kb(ROLLUP) == {"Rss": 1724, "Pss": 224, "Shared_Clean": 1576}
    own = data.rollup_kb(Path("/proc/self/smaps_rollup").read_text())
    assert own["Rss"] >= own["Pss"] > 0


def test_descendants_are_found_through_every_generation() -> None:
    # A shell that starts a sleep and waits for it: a child and a grandchild of this process.
    # This process may have children of its own already (multiprocessing's resource tracker,
    # left by an earlier test in the same worker): only the shell's line is asserted.
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        grandchildren = data.descendants(shell.pid)
        while not grandchildren and time.monotonic() < deadline:
            time.sleep(0.05)
            grandchildren = data.descendants(shell.pid)
        assert len(grandchildren) == 1
        found = data.descendants(os.getpid())
        assert shell.pid in found
        assert grandchildren[0] in found
        assert found.index(shell.pid) < found.index(grandchildren[0])
        assert data.descendants(grandchildren[0]) == []
    finally:
        shell.kill()
        shell.wait()
    assert data.descendants(shell.pid) == []


def test_cpu_seconds_counts_user_and_system_time_of_running_processes(tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    (tmp_path / "7").mkdir()
    # A command name holding spaces and ")" must not shift the fields.
    fields = ["S", "1", "1", "0", "-1", "0", "0", "0", "0", "0", "0"]  # fields 3-13 of proc(5)
    stat = f"7 (a b) c) {' '.join(fields)} {3 * ticks} {ticks} 0 0 20 0 1 0 100"
    (tmp_path / "7" / "stat").write_text(stat)
    assert data.cpu_seconds([7, 8], tmp_path) == pytest.approx(4.0)
    assert data.cpu_seconds([os.getpid()]) == pytest.approx(time.process_time(), abs=0.2)


def test_tree_memory_sums_every_process_below_this_one(tmp_path: Path) -> None:
    me = os.getpid()
    fake_process(tmp_path, me, [101], rss=1, pss=1)
    fake_process(tmp_path, 101, [102], rss=1000, pss=600)
    fake_process(tmp_path, 102, [], rss=800, pss=200)
    memory = data.TreeMemory(proc=tmp_path)
    memory.sample()
    (tmp_path / "102" / "smaps_rollup").unlink()  # it ended: the peak stays
    memory.sample()
    assert (memory.peak_rss_kb, memory.peak_pss_kb, memory.most_processes) == (1800, 800, 2)


def test_the_first_batch_is_not_counted() -> None:
    batches = [(torch.zeros(size, 3, 4, 4), torch.zeros(size)) for size in (32, 32, 16)]
    rate = data.measure(batches)
    assert rate.images == 48
    assert rate.worker_cpu_s == 0  # no worker processes


def rate(images: int, wall_s: float, worker_cpu_s: float, main_cpu_s: float = 0.0) -> Rate:
    return Rate(images, wall_s, worker_cpu_s, main_cpu_s)


def test_loader_ratios_are_taken_within_each_round() -> None:
    # A slow round for both sides: the ratio of medians (100/75) is not the median ratio.
    rounds = [
        {"tree": rate(100, 1.0, 2.0, 2.0), data.REFERENCE: rate(100, 2.0, 2.0)},
        {"tree": rate(100, 4.0, 2.0, 2.0), data.REFERENCE: rate(100, 8.0, 4.0)},
        {"tree": rate(100, 1.0, 1.0, 1.0), data.REFERENCE: rate(100, 1.0, 2.0)},
    ]
    what, result, target = data.loader_row("loader, train", rounds, "tree")
    assert what == "loader, train"
    assert result.split("; ") == [
        "per worker core (images per worker CPU-second) 50 vs 50: **2.00x** (min 1.00, max 2.00)",
        "workers + main process (images per CPU-second) 25 vs 50: **1.00x** (min 0.50, max 1.00)",
        "images/s 100 vs 50: **2.00x** (min 1.00, max 2.00)",
    ]
    assert target == data.TARGET


def test_decoding_alone_is_compared_with_workers_and_main_within_each_round() -> None:
    rounds = [
        {
            "tree": rate(100, 1.0, 1.0, 1.0),
            data.REFERENCE: rate(100, 1.0, 2.0),
            data.DECODE: Decoding(50, 0.5),
            data.DECODE_TURBO: Decoding(50, 0.25),
        },
        {
            "tree": rate(100, 1.0, 2.0, 2.0),
            data.REFERENCE: rate(100, 1.0, 4.0),
            data.DECODE: Decoding(50, 0.5),
            data.DECODE_TURBO: Decoding(50, 0.5),
        },
    ]
    result = data.loader_row("loader", rounds, "tree")[1].split("; ")
    assert result[3:] == [
        "of decoding alone (PIL, 100 images per CPU-second): **0.38x** (min 0.25, max 0.50)",
        "of decoding alone (libjpeg-turbo, 150 images per CPU-second): **0.25x** (min 0.25, "
        "max 0.25)",
    ]
    assert data.goals(rounds, "tree") == pytest.approx(
        {"vs torchvision": 1.0, "vs decoding": 0.375}
    )


def test_the_loader_verdict_names_each_missed_goal() -> None:
    met = {"train tree": {"vs torchvision": 2.5, "vs decoding": 0.6}}
    assert data.loader_verdict(met)[1] == "met"
    missed = met | {"eval shards": {"vs torchvision": 2.49, "vs decoding": 0.7}}
    assert data.loader_verdict(missed)[1] == "missed: eval shards vs torchvision 2.49"


def test_decoding_alone_decodes_every_file_of_the_split(tmp_path: Path) -> None:
    from tests.datagen import make_image_tree

    make_image_tree(tmp_path, classes=2, train_per_class=3, val_per_class=2, sizes=(20, 30))
    for decode in (data.decode_alone, data.decode_turbo_alone):
        assert decode(tmp_path, True).images == 6
        assert decode(tmp_path, False).images == 4
        assert decode(tmp_path, True).cpu_s > 0


def test_the_photographs_are_scaled_to_imagenet_like_sides(tmp_path: Path) -> None:
    from parts.photos import PHOTOS, QUALITY, SIDES, make_photo_tree
    from PIL import Image

    make_photo_tree(tmp_path, train_per_class=2, val_per_class=1)
    files = sorted(tmp_path.rglob("*.jpg"))
    assert len(files) == PhotoSpec("p", 2, 1).files == 3 * len(PHOTOS)
    assert len({path.parent.name for path in files}) == len(PHOTOS)
    for path in files:
        with Image.open(path) as image:
            assert image.format == "JPEG"
            assert image.mode == "RGB"
            assert max(image.size) <= SIDES[1]
            assert min(image.size) >= SIDES[0] or max(image.size) == SIDES[1]
    # The same seed writes the same files.
    again = tmp_path / "again"
    make_photo_tree(again, train_per_class=2, val_per_class=1)
    assert files[0].read_bytes() == (again / files[0].relative_to(tmp_path)).read_bytes()
    assert QUALITY == 90


def test_growth_rows_give_medians_ratios_within_rounds_and_the_data_phase_per_million() -> None:
    def run(rss: float, step: float, data_s: float) -> dict[str, float]:
        return {"peak_rss_mb": rss, "peak_pss_mb": 800.0, "first_step_s": step, "data_s": data_s}

    # The second round is slow for both sizes: its ratio (1.0) is in, its times are not.
    rounds = [
        {"small": run(1000.0, 5.0, 0.1), "large": run(1010.0, 6.0, 2.1)},
        {"small": run(1000.0, 9.0, 0.1), "large": run(1010.0, 9.0, 2.1)},
        {"small": run(1000.0, 4.0, 0.1), "large": run(1010.0, 5.0, 2.1)},
    ]
    rows, ratios = data.growth_rows("scale, tree", rounds, (2000, 22000))
    assert ratios == pytest.approx({"peak_rss_mb": 1.01, "peak_pss_mb": 1.0, "first_step_s": 1.2})
    assert rows == [
        (
            "scale, tree: peak memory of the process and its workers, 2,000 vs 22,000 files "
            "(3 rounds)",
            "RSS summed 1000 vs 1010 MB: **1.01x**; PSS summed 800 vs 800 MB: 1.00x",
            "< 1.25x",
        ),
        (
            "scale, tree: time to first step, 2,000 vs 22,000 files (3 rounds)",
            "5.00 vs 6.00 s: **1.20x**; of it the data phase 0.10 vs 2.10 s (+100.0 s per "
            "million files)",
            "< 1.25x",
        ),
    ]


def test_the_verdict_names_what_grew_too_much() -> None:
    assert data.verdict({"tree rss": 1.01, "tree time": 1.24})[1] == "met"
    assert data.verdict({"tree rss": 1.01, "shards time": 1.25})[1] == "missed: shards time 1.25x"


def test_a_dataset_is_generated_once_and_again_when_its_spec_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "CACHE", tmp_path)
    spec = TreeSpec("tiny", classes=2, train_per_class=2, val_per_class=1, sizes=(8, 12))
    home = data.dataset(spec)
    files = sorted((home / "tree").rglob("*.*"))
    assert len(files) == spec.files == 6
    stamp = files[0].stat().st_mtime_ns
    assert data.dataset(spec) == home
    assert files[0].stat().st_mtime_ns == stamp
    bigger = TreeSpec("tiny", classes=2, train_per_class=3, val_per_class=1, sizes=(8, 12))
    assert len(list((data.dataset(bigger) / "tree").rglob("*.*"))) == bigger.files == 8


@pytest.mark.parametrize("train", [True, False])
def test_both_loaders_deliver_every_image_of_the_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train: bool
) -> None:
    monkeypatch.setattr(data, "CACHE", tmp_path)
    monkeypatch.setattr(data, "IMAGE_SIZE", 16)
    monkeypatch.setattr(data, "LOADER_BATCH", 4)
    spec = TreeSpec("tiny", classes=2, train_per_class=8, val_per_class=5, sizes=(20, 40))
    tree = data.dataset(spec) / "tree"
    ours, reference = data.ours(tree, train), data.reference(tree, train)
    # Training drops the incomplete last batch, as train does; the first batch is not counted.
    assert ours.images == (16 - 4 if train else 10 - 4)
    assert reference.images == (16 - 4 if train else 10 - 4)
    # Read twice over: one epoch of the repeated split.
    ours, reference = data.ours(tree, train, 2), data.reference(tree, train, 2)
    assert ours.images == reference.images == (32 - 4 if train else 20 - 4)


def test_a_small_split_is_read_enough_times_to_cover_the_window(tmp_path: Path) -> None:
    from tests.datagen import make_image_tree

    assert data.passes(data.MIN_IMAGES) == 1
    assert data.passes(data.MIN_IMAGES - 1) == 2
    assert data.passes(225) * 225 >= data.MIN_IMAGES > (data.passes(225) - 1) * 225
    make_image_tree(tmp_path, classes=2, train_per_class=3, val_per_class=2, sizes=(20, 30))
    assert data.decode_alone(tmp_path, False, 3).images == 12
    assert data.decode_turbo_alone(tmp_path, True, 2).images == 12
