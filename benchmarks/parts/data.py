"""The streamed image pipeline of ``train resnet --data DIR`` (``ddpimg.train.tasks.resnet``'s
``stream`` and ``transforms``), in three measurements:

* **loader**: ddpimg's loader built as ``train`` builds it (the index, ``ImageStream`` and
  its DataLoader worker processes, uint8 samples normalised into float batches in the main
  process, on the CPU) against torchvision's ``ImageFolder`` + ``DataLoader`` with its
  classification presets (``references/classification/presets.py``: RandomResizedCrop(224)
  + horizontal flip for training, Resize(256) + CenterCrop(224) for evaluation, then
  PILToTensor, ToDtype(float, scale) and Normalize in the workers), on the same files with
  the same workers and batch, and against the limit: decoding alone, every file of the
  split read and decoded at full size by PIL in one process (and, for reference, by
  libjpeg-turbo through simplejpeg), in rounds. Two datasets: real photographs
  (``photos``: scikit-image's sample photographs cut and scaled to ImageNet-like sizes)
  and generated ones (``tests/datagen.py``: coloured stripes and noise, some PNG, greyscale
  and CMYK). ddpimg reads each ImageFolder tree and its shards (``ddpimg data pack``), and
  the generated tree also as shards packed with ``--max-side 500``; the reference reads
  the tree every time, so that last comparison is against other (smaller) files, by
  design. Counted from the first batch to the last (worker start-up and the first batch's
  latency are left out on both sides): images/s, and images per CPU-second of the worker
  processes and the main process together, which a loaded machine disturbs much less than
  the wall clock.
* **scale**: peak memory of the training process and its workers, and time to the first
  step, of ``train resnet --data DIR`` on a dataset and on one 10 times larger, as a tree
  and as shards; the first run (index built) and the second (index reused) apart.
* **training**: resnet18 steps/s on the tree's files against ``--data synthetic``, the same
  batch and image size.

The datasets are made (``photos``; tests/datagen.py: mostly quality-90 JPEG, some PNG,
greyscale and CMYK) into ``CACHE`` and kept there for later runs; nothing is downloaded.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parts.common import HERE, PYTHON, Row, interleaved, log, run_train, spread
from parts.photos import PHOTOS, make_photo_tree

if TYPE_CHECKING:
    import torch

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ddpimg-bench" / "data"
INDEX_DIR = ".ddpimg-index"  # ddpimg.data.images.INDEX_DIR, without importing numpy here
PROC = Path("/proc")
# The goals for the loader, workers + main process on the CPU: against torchvision's
# loader in the same round, and against decoding the same files alone.
REFERENCE_GOAL = 2.5
DECODE_GOAL = 0.60
TARGET = (
    f"≥ {REFERENCE_GOAL}x torchvision and ≥ {DECODE_GOAL:.2f} of decoding alone (workers + main)"
)
GROWTH_LIMIT = 1.25  # the acceptance point: < 25% more for a 10 times larger dataset


@dataclass(frozen=True)
class TreeSpec:
    """An ImageFolder tree for ``tests.datagen.make_image_tree``."""

    name: str
    classes: int
    train_per_class: int
    val_per_class: int
    sizes: tuple[int, int]

    @property
    def files(self) -> int:
        return self.classes * (self.train_per_class + self.val_per_class)

    def make(self, root: Path) -> None:
        # tests/datagen.py is the one generator of image trees; the repository root holds tests/.
        sys.path.insert(0, str(HERE.parent))
        datagen = importlib.import_module("tests.datagen")
        datagen.make_image_tree(
            root,
            classes=self.classes,
            train_per_class=self.train_per_class,
            val_per_class=self.val_per_class,
            sizes=self.sizes,
        )


@dataclass(frozen=True)
class PhotoSpec:
    """An ImageFolder tree of real photographs (``parts.photos``), one class a photograph."""

    name: str
    train_per_class: int
    val_per_class: int
    classes: int = len(PHOTOS)

    @property
    def files(self) -> int:
        return self.classes * (self.train_per_class + self.val_per_class)

    def make(self, root: Path) -> None:
        make_photo_tree(
            root, train_per_class=self.train_per_class, val_per_class=self.val_per_class
        )


# Sides drawn from 300-600 px (ImageNet's mean is about 400 x 350, and a share of its photos
# is larger): about half of these have a side over MAX_SIDE, which --max-side re-encodes.
LOADER_TREE = TreeSpec(
    "loader", classes=10, train_per_class=100, val_per_class=50, sizes=(300, 600)
)
IMAGE_SIZE = 224
LOADER_BATCH = 32
# One worker process: a core of its own on a 2-core machine, the main process on the other.
LOADER_WORKERS = 1
# Images each loader measurement (and each decoding alone) covers at least: a split smaller
# than this is read several times over, in one pass of its files repeated (each repeat with
# its own draws). One pass of the photographs' validation split is 225 images, a third of a
# CPU-second for ddpimg: the rounds of such short windows spread 0.44-0.70 against decoding
# alone on the shared machine.
MIN_IMAGES = 1800
# Rounds of the photographs, whatever --repeats says: the goals are judged on them, and the
# CPU time of the same decoding alone still moved by 25% between rounds of a loaded machine.
GOAL_ROUNDS = 5
MAX_SIDE = 500
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# 630 training and 225 validation photographs (mean about 470 x 380 px, 46 kB).
PHOTO_TREE = PhotoSpec("photos", train_per_class=70, val_per_class=25)
LOADER_SOURCES = {
    "tree": "ImageFolder tree",
    "shards": "its tar shards",
    "shards-500": f"shards packed with --max-side {MAX_SIDE} (reference: the tree)",
}
# The datasets of the loader comparison, and which of LOADER_SOURCES each is read as.
LOADER_SETS: dict[str, tuple[TreeSpec | PhotoSpec, tuple[str, ...]]] = {
    "photos": (PHOTO_TREE, ("tree", "shards")),
    "generated": (LOADER_TREE, ("tree", "shards", "shards-500")),
}
REFERENCE = "torchvision"
DECODE = "decode"  # PIL, full size, one process: the limit
DECODE_TURBO = "decode-turbo"  # libjpeg-turbo through simplejpeg (PIL for other formats)

# Small images: what grows with the number of files is the index, not the decoding.
SCALE_TREES = (
    TreeSpec("scale-small", classes=20, train_per_class=100, val_per_class=10, sizes=(32, 64)),
    TreeSpec("scale-large", classes=20, train_per_class=1000, val_per_class=100, sizes=(32, 64)),
)
SCALE_TRAIN = ["resnet", "--arch", "resnet18", "--image-size", "32", "--batch-size", "16"]
EVAL_SAMPLES = ["--eval-samples", "64"]

TRAINING_BATCH, TRAINING_SIZE = 16, 64
TRAINING = [
    "resnet", "--arch", "resnet18", "--image-size", str(TRAINING_SIZE),
    "--batch-size", str(TRAINING_BATCH),
]  # fmt: skip
TRAINING_STEPS, TRAINING_WARMUP = 34, 4


# ---- datasets, generated once into CACHE ----------------------------------------------------


def dataset(spec: TreeSpec | PhotoSpec) -> Path:
    """``CACHE/NAME``, holding ``tree`` (made from ``spec``) and the shards packed from it;
    made again when ``spec`` changed."""
    home = CACHE / spec.name
    marker = home / "spec.json"
    wanted = json.dumps({"kind": type(spec).__name__, **asdict(spec)}, sort_keys=True)
    if marker.is_file() and marker.read_text() == wanted:
        return home
    shutil.rmtree(home, ignore_errors=True)
    began = time.perf_counter()
    spec.make(home / "tree")
    marker.write_text(wanted)
    log(f"generated {spec.files:,} images into {home} in {time.perf_counter() - began:.0f} s")
    return home


def packed(home: Path, max_side: int | None = None) -> Path:
    """The tree of ``home`` as shards, by ``ddpimg data pack`` (which skips shards that are
    there already)."""
    target = home / ("shards" if max_side is None else f"shards-{max_side}")
    command = [PYTHON, "-m", "ddpimg", "data", "pack", str(home / "tree"), str(target)]
    if max_side is not None:
        command += ["--max-side", str(max_side)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return target


def describe_files(folder: Path) -> dict[str, float]:
    """How many image files ``folder`` holds, their mean size in bytes and in pixels."""
    from PIL import Image

    files = sorted(path for path in folder.rglob("*") if path.is_file())
    pixels = []
    for path in files:
        with Image.open(path) as image:
            pixels.append(image.size[0] * image.size[1])
    return {
        "files": len(files),
        "mean_bytes": statistics.mean(path.stat().st_size for path in files),
        "mean_pixels": statistics.mean(pixels),
    }


# ---- processes: who runs below us, their CPU time and memory --------------------------------


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """The processes below ``pid`` (children of any of its threads, and theirs)."""
    found: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:  # it ended
        return found
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *descendants(child, proc)]
    return found


def cpu_seconds(pids: Iterable[int], proc: Path = PROC) -> float:
    """User + system CPU time of those of ``pids`` still running, from /proc/PID/stat."""
    ticks = 0
    for pid in pids:
        try:
            text = (proc / str(pid) / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces: count the fields after its ")".
        fields = text.rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14, 15 of proc(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def rollup_kb(text: str) -> dict[str, int]:
    """The kB fields (``Rss``, ``Pss``, ...) of a /proc/PID/smaps_rollup text."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[name] = int(parts[0])
    return fields


class TreeMemory:
    """The peak, over samples every ``interval`` seconds on a thread, of the summed RSS and
    the summed PSS of this process's descendants (a training process and its loader
    workers). RSS counts the pages a forked worker shares with its parent once per
    process; PSS divides them among the sharers, so its sum is what the tree holds."""

    def __init__(self, interval: float = 0.05, proc: Path = PROC) -> None:
        self.interval = interval
        self.proc = proc
        self.peak_rss_kb = 0
        self.peak_pss_kb = 0
        self.most_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        """Take one sample now."""
        rss = pss = 0
        pids = descendants(os.getpid(), self.proc)
        for pid in pids:
            try:
                fields = rollup_kb((self.proc / str(pid) / "smaps_rollup").read_text())
            except OSError:  # it ended between the listing and the read
                continue
            rss += fields.get("Rss", 0)
            pss += fields.get("Pss", 0)
        self.peak_rss_kb = max(self.peak_rss_kb, rss)
        self.peak_pss_kb = max(self.peak_pss_kb, pss)
        self.most_processes = max(self.most_processes, len(pids))

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


# ---- loader throughput ----------------------------------------------------------------------


# Rate's figures, as the table names them.
METRICS = {
    "per_worker_cpu_s": "per worker core (images per worker CPU-second)",
    "per_cpu_s": "workers + main process (images per CPU-second)",
    "per_s": "images/s",
}


@dataclass(frozen=True)
class Rate:
    """A loader's images after its first batch, the wall time they took, and the CPU time
    its worker processes and its main process spent meanwhile."""

    images: int
    wall_s: float
    worker_cpu_s: float
    main_cpu_s: float

    @property
    def per_s(self) -> float:
        return self.images / self.wall_s

    @property
    def per_worker_cpu_s(self) -> float:
        """Images per CPU-second of the worker processes: per worker core."""
        return self.images / self.worker_cpu_s

    @property
    def per_cpu_s(self) -> float:
        """Images per CPU-second of the workers and the main process together."""
        return self.images / (self.worker_cpu_s + self.main_cpu_s)

    def record(self) -> dict[str, float]:
        return asdict(self) | {metric: getattr(self, metric) for metric in METRICS}


# A 4 KiB page of float32 values: reading one value a page maps every page of a batch.
PAGE_FLOATS = 1024


def touch(images: torch.Tensor) -> None:
    """Read one value of every page of a batch. A batch sent through shared memory is only
    mapped into the main process when read (as the model's first layer reads it); leaving
    it unread would leave that cost out for the reference, whose workers send float
    batches, and in, for ddpimg, whose main process normalises its uint8 batches."""
    images.reshape(-1)[::PAGE_FLOATS].sum()


def measure(batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> Rate:
    """The ``Rate`` of a loader from its (images, labels) batches as they come. Its workers
    are this process's children; their CPU time is read as each batch arrives (the
    reference's workers exit with the last one)."""
    iterator = iter(batches)
    touch(next(iterator)[0])
    workers = descendants(os.getpid())
    began, worker_began, main_began = time.perf_counter(), cpu_seconds(workers), time.process_time()
    images, ended, worker_ended, main_ended = 0, began, worker_began, main_began
    for pixels, labels in iterator:
        touch(pixels)
        images += len(labels)
        ended, worker_ended = time.perf_counter(), cpu_seconds(workers)
        main_ended = time.process_time()
    return Rate(images, ended - began, worker_ended - worker_began, main_ended - main_began)


def passes(files: int) -> int:
    """How many times a split of ``files`` files is read so that a measurement covers at
    least ``MIN_IMAGES`` images."""
    return max(1, -(-MIN_IMAGES // files))


def ours(root: Path, train: bool, repeat: int = 1) -> Rate:
    """ddpimg's loader over the training (one epoch) or evaluation split of ``root``, its
    files ``repeat`` times over."""
    import numpy as np
    import torch

    from ddpimg.data.sources import open_splits, prepare
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.sharding import EvalShard, TrainShard, epoch_order
    from ddpimg.train.tasks.resnet.stream import EVAL, TRAIN, ImageStream, SplitView

    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
        prepare(root, Path(out))
        train_source, eval_source = open_splits(root, Path(out))
        views = tuple(
            SplitView(source, np.tile(np.arange(len(source)), repeat) if repeat > 1 else None)
            for source in (train_source, eval_source)
        )
        train_view, eval_view = views
        stream = ImageStream(
            (train_view, eval_view),
            IMAGE_SIZE,
            seed=0,
            workers=LOADER_WORKERS,
            skip_bad=False,
            device=torch.device("cpu"),
            channels_last=False,
        )
        if train:
            shard = TrainShard(len(train_view), BatchLayout(LOADER_BATCH, 1), rank=0)
            order = epoch_order(len(train_view), seed=0, epoch=1)
            batches = stream.batches(TRAIN, shard.plan(order, 1, 0, shard.steps_per_epoch))
        else:
            plan = EvalShard(len(eval_view), LOADER_BATCH, rank=0, world_size=1).plan()
            batches = stream.batches(EVAL, plan)
        return measure(batches)


def reference(root: Path, train: bool, repeat: int = 1) -> Rate:
    """torchvision's ImageFolder + DataLoader with its presets over a split of ``root``,
    its files ``repeat`` times over (one epoch of the repeated list)."""
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2

    geometry: list[Any] = (
        [v2.RandomResizedCrop(IMAGE_SIZE, antialias=True), v2.RandomHorizontalFlip()]
        if train
        else [v2.Resize(IMAGE_SIZE * 256 // 224, antialias=True), v2.CenterCrop(IMAGE_SIZE)]
    )
    preset = v2.Compose(
        [
            *geometry,
            v2.PILToTensor(),
            v2.ToDtype(torch.float, scale=True),
            v2.Normalize(MEAN, STD),
            v2.ToPureTensor(),
        ]
    )
    folder = datasets.ImageFolder(str(root / ("train" if train else "val")), transform=preset)
    folder.samples = folder.samples * repeat
    loader = torch.utils.data.DataLoader(
        folder, batch_size=LOADER_BATCH, shuffle=train, num_workers=LOADER_WORKERS
    )
    return measure(loader)


def split_files(root: Path, train: bool) -> list[Path]:
    return sorted(
        path for path in (root / ("train" if train else "val")).rglob("*") if path.is_file()
    )


@dataclass(frozen=True)
class Decoding:
    """Decoding alone: the files of a split read and decoded in this process, and the CPU
    time that took."""

    images: int
    cpu_s: float

    @property
    def per_cpu_s(self) -> float:
        return self.images / self.cpu_s

    def record(self) -> dict[str, float]:
        return asdict(self) | {"per_cpu_s": self.per_cpu_s}


def decode_alone(root: Path, train: bool, repeat: int = 1) -> Decoding:
    """Every file of a split of the tree ``root`` read and decoded at full size by PIL (what
    torchvision's loader decodes with, and the issue's limit), one process, ``repeat``
    times over."""
    from PIL import Image

    files = split_files(root, train) * repeat
    began = time.process_time()
    for path in files:
        with Image.open(path) as image:
            image.load()
    return Decoding(len(files), time.process_time() - began)


def decode_turbo_alone(root: Path, train: bool, repeat: int = 1) -> Decoding:
    """The same with libjpeg-turbo through simplejpeg, as ddpimg's loader decodes JPEGs
    (PIL for the other formats), full size, to RGB."""
    import simplejpeg
    from PIL import Image

    files = split_files(root, train) * repeat
    began = time.process_time()
    for path in files:
        data = path.read_bytes()
        if data.startswith(b"\xff\xd8"):
            simplejpeg.decode_jpeg(data, strict=False)
        else:
            with Image.open(path) as image:
                image.load()
    return Decoding(len(files), time.process_time() - began)


def ratio_text(values: Sequence[float]) -> str:
    ratio = spread(values)
    return f"**{ratio['median']:.2f}x** (min {ratio['min']:.2f}, max {ratio['max']:.2f})"


def loader_row(what: str, rounds: Sequence[Mapping[str, Any]], name: str) -> Row:
    """``name``'s ``METRICS`` against the reference's (medians), and their ratios taken
    within each round; then its images per CPU-second (workers + main) against decoding
    alone, where the rounds hold it."""
    parts = []
    for metric, label in METRICS.items():
        ours_rate = statistics.median(getattr(r[name], metric) for r in rounds)
        theirs = statistics.median(getattr(r[REFERENCE], metric) for r in rounds)
        ratio = ratio_text(
            [getattr(r[name], metric) / getattr(r[REFERENCE], metric) for r in rounds]
        )
        parts.append(f"{label} {ours_rate:.0f} vs {theirs:.0f}: {ratio}")
    for limit, label in ((DECODE, "PIL"), (DECODE_TURBO, "libjpeg-turbo")):
        if limit in rounds[0]:
            alone = statistics.median(r[limit].per_cpu_s for r in rounds)
            ratio = ratio_text([r[name].per_cpu_s / r[limit].per_cpu_s for r in rounds])
            parts.append(f"of decoding alone ({label}, {alone:.0f} images per CPU-second): {ratio}")
    return what, "; ".join(parts), TARGET


def goals(rounds: Sequence[Mapping[str, Any]], name: str) -> dict[str, float]:
    """The median ratios the goals are about: workers + main against torchvision, and
    against decoding alone (PIL)."""
    return {
        "vs torchvision": statistics.median(
            r[name].per_cpu_s / r[REFERENCE].per_cpu_s for r in rounds
        ),
        "vs decoding": statistics.median(r[name].per_cpu_s / r[DECODE].per_cpu_s for r in rounds),
    }


def loader_verdict(checked: Mapping[str, Mapping[str, float]]) -> Row:
    """Whether every case meets both goals, naming those that do not."""
    missed = [
        f"{case} {key} {value:.2f}"
        for case, ratios in checked.items()
        for key, value in ratios.items()
        if value < (REFERENCE_GOAL if key == "vs torchvision" else DECODE_GOAL)
    ]
    return (
        f"loader on real photographs: ≥ {REFERENCE_GOAL}x torchvision and ≥ {DECODE_GOAL:.2f} of "
        "decoding alone, workers + main, tree and shards, train and eval",
        "met" if not missed else f"missed: {', '.join(missed)}",
        "met",
    )


def loader(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    record: dict[str, Any] = {
        "workers": LOADER_WORKERS,
        "batch": LOADER_BATCH,
        "image_size": IMAGE_SIZE,
    }
    rows: list[Row] = []
    checked: dict[str, dict[str, float]] = {}
    for set_name, (spec, sources) in LOADER_SETS.items():
        home = dataset(spec)
        roots = {"tree": home / "tree", "shards": packed(home)}
        if "shards-500" in sources:
            roots["shards-500"] = packed(home, MAX_SIDE)
        facts: dict[str, Any] = {
            "files": {split: describe_files(home / "tree" / split) for split in ("train", "val")},
            "shard_bytes": {
                name: sum(path.stat().st_size for path in root.glob("*.tar"))
                for name, root in roots.items()
                if name != "tree"
            },
        }
        for train, transforms, split in ((True, "train", "train"), (False, "eval", "val")):
            files = facts["files"][split]["files"]
            repeat = passes(int(files))
            runners: dict[str, Callable[[], Any]] = {
                REFERENCE: functools.partial(reference, roots["tree"], train, repeat),
                DECODE: functools.partial(decode_alone, roots["tree"], train, repeat),
                DECODE_TURBO: functools.partial(decode_turbo_alone, roots["tree"], train, repeat),
            }
            runners |= {
                name: functools.partial(ours, root, train, repeat) for name, root in roots.items()
            }
            count = max(repeats, GOAL_ROUNDS) if set_name == "photos" else repeats
            rounds = interleaved(runners, count, f"loader, {set_name}, {transforms} transforms")
            facts[transforms] = [{name: rate.record() for name, rate in r.items()} for r in rounds]
            facts[f"{transforms}_passes"] = repeat
            for name in sources:
                rows.append(
                    loader_row(
                        f"loader, {set_name}, {transforms} transforms, {LOADER_SOURCES[name]}: "
                        f"ddpimg vs torchvision ImageFolder + DataLoader, and vs decoding alone "
                        f"({split}, {files:.0f} files read {repeat} times, {LOADER_WORKERS} "
                        f"worker, batch {LOADER_BATCH}, {IMAGE_SIZE} px, {count} rounds)",
                        rounds,
                        name,
                    )
                )
                if set_name == "photos":
                    checked[f"{transforms} {name}"] = goals(rounds, name)
        record[set_name] = facts
    rows.append(loader_verdict(checked))
    record["goals"] = checked
    return rows, record


# ---- memory and time to first step at two dataset sizes -------------------------------------


def first_step(root: Path, *, first: bool) -> dict[str, float]:
    """One training step on ``root`` (its index removed first when ``first``): the peak
    memory of the process tree, the time to the first step and the data phase in it."""
    if first:
        shutil.rmtree(root / INDEX_DIR, ignore_errors=True)
    else:
        from ddpimg.data.sources import prepare

        prepare(root, root)  # what an earlier run left: the index beside the data
    with TreeMemory() as memory:
        run = run_train([*SCALE_TRAIN, "--data", str(root), *EVAL_SAMPLES], steps=1, warmup=0)
    marks = run.manifest["startup"]["marks"]
    return {
        "peak_rss_mb": memory.peak_rss_kb / 1024,
        "peak_pss_mb": memory.peak_pss_kb / 1024,
        "processes": memory.most_processes,
        "first_step_s": marks["first_step"] - run.spawned,
        "data_s": marks["data"] - marks["setup"],
    }


def growth_rows(
    label: str, rounds: Sequence[Mapping[str, Mapping[str, float]]], files: tuple[int, int]
) -> tuple[list[Row], dict[str, float]]:
    """Two rows (memory, time to first step) of ``first_step``'s results on the ``small``
    and the ``large`` dataset (``files`` files) in each round: their medians, and the
    median of the large / small ratios taken within each round; and those ratios by key.
    The cost per million files is given for the data phase alone: the difference of two
    whole runs is mostly the machine's noise."""
    median = {
        key: tuple(statistics.median(r[size][key] for r in rounds) for size in ("small", "large"))
        for key in ("peak_rss_mb", "peak_pss_mb", "first_step_s", "data_s")
    }
    ratios = {
        key: statistics.median(r["large"][key] / r["small"][key] for r in rounds)
        for key in ("peak_rss_mb", "peak_pss_mb", "first_step_s")
    }
    sizes = f"{files[0]:,} vs {files[1]:,} files ({len(rounds)} rounds)"
    (rss_a, rss_b), (pss_a, pss_b) = median["peak_rss_mb"], median["peak_pss_mb"]
    (step_a, step_b), (data_a, data_b) = median["first_step_s"], median["data_s"]
    per_million = (data_b - data_a) / (files[1] - files[0]) * 1e6
    target = f"< {GROWTH_LIMIT:.2f}x"
    rows: list[Row] = [
        (
            f"{label}: peak memory of the process and its workers, {sizes}",
            f"RSS summed {rss_a:.0f} vs {rss_b:.0f} MB: **{ratios['peak_rss_mb']:.2f}x**; "
            f"PSS summed {pss_a:.0f} vs {pss_b:.0f} MB: {ratios['peak_pss_mb']:.2f}x",
            target,
        ),
        (
            f"{label}: time to first step, {sizes}",
            f"{step_a:.2f} vs {step_b:.2f} s: **{ratios['first_step_s']:.2f}x**; of it the "
            f"data phase {data_a:.2f} vs {data_b:.2f} s ({per_million:+.1f} s per million files)",
            target,
        ),
    ]
    return rows, ratios


def verdict(ratios: Mapping[str, float]) -> Row:
    """Whether every growth ratio stays under ``GROWTH_LIMIT``, naming those that do not."""
    over = [f"{name} {ratio:.2f}x" for name, ratio in ratios.items() if ratio >= GROWTH_LIMIT]
    return (
        "scale: peak RSS and time to first step grow < 25% for a 10x larger dataset",
        "met" if not over else f"missed: {', '.join(over)}",
        "met",
    )


RUNS = {"first": "index built", "second": "index reused"}
# Whole runs, timed from outside, are the noisiest figures here: this part takes at least
# this many rounds, whatever --repeats says.
SCALE_ROUNDS = 5


def scale(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    homes = [dataset(spec) for spec in SCALE_TREES]
    layouts = {"tree": [home / "tree" for home in homes], "shards": [packed(h) for h in homes]}
    files = (SCALE_TREES[0].files, SCALE_TREES[1].files)
    runners: dict[str, Callable[[], dict[str, float]]] = {
        f"{layout}/{size}/{run}": functools.partial(first_step, root, first=run == "first")
        for layout, roots in layouts.items()
        for size, root in zip(("small", "large"), roots, strict=True)
        for run in RUNS
    }
    rounds = interleaved(runners, max(repeats, SCALE_ROUNDS), "scale")
    rows: list[Row] = []
    checked: dict[str, float] = {}
    for layout in layouts:
        for run, what in RUNS.items():
            pairs = [
                {size: r[f"{layout}/{size}/{run}"] for size in ("small", "large")} for r in rounds
            ]
            more, ratios = growth_rows(f"scale, {layout}, {run} run ({what})", pairs, files)
            rows += more
            checked |= {
                f"{layout} {run} run {key}": ratios[key] for key in ("peak_rss_mb", "first_step_s")
            }
    rows.append(verdict(checked))
    return rows, {"files": files, "rounds": rounds, "ratios": checked}


# ---- training steps/s: real files against synthetic data ------------------------------------


def steps_per_s(data: Sequence[str]) -> float:
    run = run_train([*TRAINING, *data, *EVAL_SAMPLES], steps=TRAINING_STEPS, warmup=TRAINING_WARMUP)
    return run.steady_steps_per_s


def training(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    tree = dataset(LOADER_TREE) / "tree"
    samples = str(LOADER_TREE.classes * LOADER_TREE.train_per_class)
    rounds = interleaved(
        {
            "files": functools.partial(steps_per_s, ["--data", str(tree)]),
            "synthetic": functools.partial(
                steps_per_s, ["--data", "synthetic", "--train-samples", samples]
            ),
        },
        repeats,
        "resnet18 files vs synthetic",
    )
    ratio = spread([r["files"] / r["synthetic"] for r in rounds])
    files = statistics.median(r["files"] for r in rounds)
    synthetic = statistics.median(r["synthetic"] for r in rounds)
    row = (
        f"training: resnet18 steps/s on the loader tree's files vs --data synthetic (batch "
        f"{TRAINING_BATCH}, {TRAINING_SIZE} px, default workers, steps {TRAINING_WARMUP + 1}-"
        f"{TRAINING_STEPS}, {repeats} rounds)",
        f"{files:.2f} vs {synthetic:.2f} steps/s: **{ratio['median']:.2f}x** "
        f"(min {ratio['min']:.2f}, max {ratio['max']:.2f})",
        "",
    )
    return [row], {"rounds": rounds}


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {"cache": str(CACHE)}
    for name, measurement in (("loader", loader), ("scale", scale), ("training", training)):
        began = time.perf_counter()
        more, record[name] = measurement(repeats)
        record[name]["took_s"] = round(time.perf_counter() - began, 1)
        rows += more
    return rows, record
