"""The GPU figures, run when torch sees a CUDA device:

* MNIST, 5 epochs of the full set: wall time of ``train mnist --epochs 5`` against the
  reference loop (benchmarks/reference/mnist_ddp.py) on the same GPU; the origin tutorial
  took 151 s on one V100.
* ResNet-50 at 224 px, bf16 autocast + channels_last: images/s of ``train resnet`` against
  the reference loop with the same recipe (PyTorch's published figure: about 2,470 img/s
  on one A100 with AMP).
* GPT-124M, bf16: tokens/s and model-FLOPs utilisation from ``train gpt``'s summary.
* NCCL all-reduce bus bandwidth from ``ddpimg doctor --json`` over every visible GPU
  (needs two or more).

ResNet-50 and GPT-124M run at the largest batch that fits on the GPU: benchmarks/
batch_probe.py searches it first (``SIZES``' ``search``: doubling, then bisecting to a
multiple of 8, the peak at most 90% of the device's memory), unless a flag gives the batch
(``--gpu-resnet-batch-size``, ``--gpu-gpt-batch-size``). The table and the JSON say which
batch ran and how it was chosen.

``--gpu-dry-run`` runs the same commands on the CPU at toy sizes (MNIST 1 epoch of 640
samples, ResNet-18 at 32 px, GPT-tiny, doctor over 2 gloo ranks) at their fixed batches (no
search: the CPU has no device memory to fill): it checks the plumbing where no GPU is at
hand, and its figures mean nothing.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from parts.batchsearch import BatchChoice, SearchLimits, searched_from_record
from parts.common import HERE, PYTHON, REFERENCE, Row, free_port, log, run_train, timeout_until

# What each measurement runs, on a GPU and in a dry run on the CPU. ``batch``: the batch of
# the dry run, and on a GPU that of the steps that do not search (the runbook's runs on
# files and token shards); ``search``: where the GPU's search for the largest batch runs
# (the first H200 runs, at 256 and 16, left the GPU half idle: GPT-124M at 30% MFU).
SIZES: dict[str, dict[str, Any]] = {
    "gpu": {
        "mnist": {"epochs": 5, "train_samples": 60000, "eval_samples": 10000},
        "resnet": {"arch": "resnet50", "image_size": 224, "batch": 256, "steps": 100,
                   "warmup": 30, "workers": 8,
                   "search": SearchLimits(start=64, limit=2048, max_trials=14)},
        "gpt": {"size": "124m", "batch": 16, "steps": 50, "warmup": 10,
                "search": SearchLimits(start=8, limit=512, max_trials=12)},
    },
    "dry-run": {
        "mnist": {"epochs": 1, "train_samples": 640, "eval_samples": 128},
        "resnet": {"arch": "resnet18", "image_size": 32, "batch": 8, "steps": 4, "warmup": 1,
                   "workers": 1},
        "gpt": {"size": "tiny", "batch": 8, "steps": 6, "warmup": 2},
    },
}  # fmt: skip


def cuda_devices() -> int:
    probe = subprocess.run(
        [PYTHON, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(probe.stdout.strip().splitlines()[-1])


def _model_arguments(model: str, size: dict[str, Any]) -> list[str]:
    if model == "resnet":
        return ["resnet", "--arch", size["arch"], "--image-size", str(size["image_size"])]
    return ["gpt", "--size", size["size"]]


def search_batch(model: str, size: dict[str, Any], deadline: float | None) -> BatchChoice:
    """The largest batch of ``model`` (resnet or gpt) at ``size`` that fits on the GPU,
    searched by benchmarks/batch_probe.py in a process of its own."""
    limits: SearchLimits = size["search"]
    command = [PYTHON, str(HERE / "batch_probe.py"), *_model_arguments(model, size)]
    command += ["--start", str(limits.start), "--limit", str(limits.limit)]
    command += ["--multiple", str(limits.multiple), "--max-trials", str(limits.max_trials)]
    command += ["--headroom", str(limits.headroom)]
    proc = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=timeout_until(deadline)
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"the batch search ({' '.join(command[1:])}) exited {proc.returncode}:\n"
            f"{proc.stderr[-3000:]}"
        )
    line = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("RESULT "))
    searched = searched_from_record(json.loads(line.removeprefix("RESULT ")))
    return BatchChoice(searched.batch, "searched", searched)


def choose_batch(
    model: str,
    size: dict[str, Any],
    device: str,
    *,
    given: int | None,
    flag: str,
    deadline: float | None = None,
) -> BatchChoice:
    """``given`` (by ``flag``) when set; else on a GPU the largest that fits (searched);
    else the fixed batch of ``size``."""
    if given is not None:
        return BatchChoice(given, "given", flag=flag)
    if device != "cuda":
        return BatchChoice(size["batch"], "fixed")
    return search_batch(model, size, deadline)


def _reference(script: str, arguments: list[str], deadline: float | None) -> dict[str, Any]:
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    began = time.perf_counter()
    proc = subprocess.run(
        [PYTHON, str(REFERENCE / script), *arguments],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout_until(deadline),
    )
    wall = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"{script} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    line = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("RESULT "))
    return dict(json.loads(line.removeprefix("RESULT "))) | {"process_wall_s": wall}


def mnist(
    size: dict[str, Any], device: str, deadline: float | None = None
) -> tuple[list[Row], dict[str, Any]]:
    epochs = ["--epochs", str(size["epochs"])]
    samples = ["--train-samples", str(size["train_samples"])]
    samples += ["--eval-samples", str(size["eval_samples"])]
    # --max-steps of one more than the epochs hold: all of them, every epoch evaluated.
    steps = size["epochs"] * (size["train_samples"] // 64) + 1
    ours = run_train(
        ["mnist", "--batch-size", "64", *samples],
        steps=steps,
        warmup=10,
        epochs=size["epochs"],
        deadline=deadline,
    )
    theirs = _reference(
        "mnist_ddp.py",
        [*epochs, "--max-steps", "0", "--warmup-steps", "10", "--device", device, *samples],
        deadline,
    )
    speedup = theirs["process_wall_s"] / ours.wall_s
    row = (
        f"MNIST {size['epochs']} epoch(s) ({size['train_samples']} samples, batch 64), whole "
        "run wall time: reference / ddpimg",
        f"{theirs['process_wall_s']:.1f} s / {ours.wall_s:.1f} s = {speedup:.1f}x; eval "
        f"accuracy {ours.summary['eval_accuracy']:.4f} (reference {theirs['eval_accuracy']:.4f})",
        ">= 5x (tutorial: 151 s on a V100)",
    )
    record = {
        "ddpimg_wall_s": ours.wall_s,
        "ddpimg_eval_accuracy": ours.summary["eval_accuracy"],
        "reference": theirs,
        "speedup": speedup,
    }
    return [row], record


def resnet(
    size: dict[str, Any], device: str, batch: BatchChoice, deadline: float | None = None
) -> tuple[list[Row], dict[str, Any]]:
    common = ["--arch", size["arch"], "--image-size", str(size["image_size"])]
    common += ["--batch-size", str(batch.batch), "--eval-samples", "256"]
    common += ["--train-samples", str(batch.batch * size["steps"])]
    steps = ["--max-steps", str(size["steps"]), "--warmup-steps", str(size["warmup"])]
    ours = run_train(
        ["resnet", *common, "--precision", "bf16"],
        steps=size["steps"],
        warmup=size["warmup"],
        deadline=deadline,
    )
    theirs = _reference(
        "resnet_ddp.py",
        [*common, *steps, "--bf16", "--device", device, "--workers", str(size["workers"])],
        deadline,
    )
    ours_ips = float(ours.summary["images_per_s"])
    theirs_ips = float(theirs["steps_per_s"]) * batch.batch
    row = (
        f"{size['arch']} {size['image_size']} px, bf16 + channels_last, batch {batch.batch} "
        f"({batch.describe()}): images/s ddpimg / reference",
        f"{ours_ips:.0f} / {theirs_ips:.0f} = {ours_ips / theirs_ips:.2f}x",
        ">= 1.0x and >= 3,000 img/s on an H100",
    )
    return [row], {
        "ddpimg_images_per_s": ours_ips,
        "reference_images_per_s": theirs_ips,
        "batch": batch.record(),
    }


def gpt(
    size: dict[str, Any], batch: BatchChoice, deadline: float | None = None
) -> tuple[list[Row], dict[str, Any]]:
    arguments = ["gpt", "--size", size["size"], "--precision", "bf16"]
    arguments += ["--batch-size", str(batch.batch), "--eval-samples", "16"]
    arguments += ["--train-samples", str(batch.batch * size["steps"])]
    ours = run_train(arguments, steps=size["steps"], warmup=size["warmup"], deadline=deadline)
    summary = ours.summary
    mfu = summary.get("mfu")
    row = (
        f"GPT-{size['size']} bf16, batch {batch.batch} ({batch.describe()}): tokens/s and "
        "model-FLOPs utilisation",
        f"{summary['tokens_per_s']:.0f} tokens/s; MFU "
        + ("n/a (no GPU peak known)" if mfu is None else f"{100 * mfu:.1f}%"),
        ">= 45% MFU on an H100",
    )
    return [row], {"summary": summary, "batch": batch.record()}


def nccl(devices: int, dry_run: bool) -> tuple[list[Row], dict[str, Any]]:
    ranks = 2 if dry_run else devices
    if ranks < 2:
        reason = f"{devices} GPU visible: a bus bandwidth needs 2 or more"
        return [("NCCL all-reduce bus bandwidth (`ddpimg doctor`)", f"skipped: {reason}", "")], {
            "skipped": reason
        }
    command = [PYTHON, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", str(ranks), "-m", "ddpimg", "doctor", "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"doctor exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    result = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("{")))
    row = (
        f"{'gloo (dry run)' if dry_run else 'NCCL'} all-reduce bus bandwidth, {ranks} ranks "
        "(`ddpimg doctor`)",
        f"{result['busbw_gbps']:.2f} GB/s; all-reduce {'correct' if result['ok'] else 'WRONG'}",
        "",
    )
    return [row], result


# The flags of benchmarks/bench.py that give the searched models' batches.
BATCH_FLAGS = {"resnet": "--gpu-resnet-batch-size", "gpt": "--gpu-gpt-batch-size"}


def run(dry_run: bool, given: dict[str, int | None]) -> tuple[list[Row], dict[str, Any]]:
    """The gpu part; ``given``: the batch a flag gave, by model (resnet, gpt), or None."""
    devices = cuda_devices()
    if devices == 0 and not dry_run:
        reason = "no CUDA device visible (torch.cuda.device_count() is 0)"
        row = ("GPU part (MNIST 5 epochs, ResNet-50 img/s, GPT-124M MFU, NCCL bus bw)",
               f"skipped: {reason}", "run `nox -s bench` on a GPU machine")  # fmt: skip
        return [row], {"skipped": reason}
    sizes = SIZES["dry-run" if dry_run else "gpu"]
    device = "cpu" if dry_run else "cuda"
    rows: list[Row] = []
    record: dict[str, Any] = {"devices": devices, "dry_run": dry_run}

    def batch(model: str) -> BatchChoice:
        return choose_batch(
            model, sizes[model], device, given=given.get(model), flag=BATCH_FLAGS[model]
        )

    measures: dict[str, Callable[[], tuple[list[Row], dict[str, Any]]]] = {
        "mnist": functools.partial(mnist, sizes["mnist"], device),
        "resnet": lambda: resnet(sizes["resnet"], device, batch("resnet")),
        "gpt": lambda: gpt(sizes["gpt"], batch("gpt")),
        "nccl": functools.partial(nccl, devices, dry_run),
    }
    for name, measure in measures.items():
        log(f"gpu part: {name}")
        part_rows, record[name] = measure()
        prefix = "[dry run, CPU] " if dry_run else ""
        rows += [(prefix + what, result, target) for what, result, target in part_rows]
    return rows, record
