"""The benchmark session (``nox -s bench``): ddpimg against plain PyTorch, and its own costs.

Parts (benchmarks/parts/, one module each; docs/benchmarks.md says what each row means, and
docs/performance.md shows the current figures):

* ``env``: ``ddpimg env --json`` against ``python -c pass``; whether it imports torch.
* ``startup``: time to the first training step, by phase; the whole process of
  ``train mnist --max-steps 1`` against ``python -c 'import torch'`` (``--startup-before SRC``:
  and another source tree's, in the same rounds).
* ``topology``: rank resolution for simulated Slurm steps of 64 to 10,000 nodes.
* ``rendezvous``: the join of 64 local processes; the report when one never arrives.
* ``ab``: ddpimg's trainers against tutorial-style loops (benchmarks/reference/).
* ``overhead``: DDP on 1 rank vs the bare model, 2 ranks vs 1, ZeRO 0-3 and FSDP vs DDP.
* ``stallwatch``: what recording each rank's progress costs, and the loop with it vs without.
* ``trackers``: the loop with ``--log-to tensorboard,wandb,mlflow`` vs without.
* ``scripts``: a Hugging Face Trainer script under ``train --script`` vs plain torchrun.
* ``image``: image sizes, build times, container start time.
* ``data``: the streamed image pipeline: the loader against torchvision's and against
  decoding alone, on real photographs and generated images; memory and time to first step
  at two dataset sizes; resnet18 on files vs synthetic data.
* ``gpu``: the GPU figures; skipped with a line in the table when no CUDA device is visible.
* ``tokens``: gpt on token shards vs synthetic, peak memory against corpus size, tokenizing.
* ``accumulation``: samples/s with micro-batches accumulated vs one batch of their size; peak
  memory against the number of micro-batches.
* ``addon``: an add-on of a realistic requirements file: its build time and size; importing
  from a mounted add-on against the image's own packages (``--addon-image``).
* ``dropout``: a pass's dropout masks: the counter-based draw vs the per-row generators it
  replaced and one generator's draw of the pass.

    python benchmarks/bench.py [--parts env,startup,...] [--repeats 3] [--models mnist,...]
                               [--startup-before SRC]
                               [--out benchmarks/results] [--markdown FILE]
                               [--gpu-resnet-batch-size N] [--gpu-gpt-batch-size N]

Results go to ``<out>/<hostname>-<date>.json``; a later run on the same day replaces the
parts it ran and keeps the others, so one part can be rerun alone. The table of every
part in the file is printed (Markdown). With the default ``--out`` (benchmarks/results), the
figures docs/performance.md shows are drawn again from the results there (``figures.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import figures
from parts import (
    ab,
    accumulation,
    addon,
    data,
    dropout,
    env,
    gpu,
    image,
    overhead,
    rendezvous,
    scripts,
    stallwatch,
    startup,
    tokens,
    topology,
    trackers,
)
from parts.common import HERE, Row

RESULTS = HERE / "results"
PARTS: dict[str, Callable[[argparse.Namespace], tuple[list[Row], dict[str, Any]]]] = {
    "env": lambda ns: env.run(ns.env_count),
    "startup": lambda ns: startup.run(ns.repeats, ns.startup_before),
    "topology": lambda ns: topology.run((64, 512, 4096, 10000)),
    "rendezvous": lambda ns: rendezvous.run(64, ns.join_timeout),
    "ab": lambda ns: ab.run(ns.repeats, ns.models.split(",")),
    "overhead": lambda ns: overhead.run(ns.repeats),
    "stallwatch": lambda ns: stallwatch.run(ns.repeats),
    "trackers": lambda ns: trackers.run(ns.repeats),
    "scripts": lambda ns: scripts.run(ns.repeats),
    "image": lambda ns: image.run(ns.image_builds, ns.image_count),
    "data": lambda ns: data.run(ns.repeats),
    "gpu": lambda ns: gpu.run(
        ns.gpu_dry_run, {"resnet": ns.gpu_resnet_batch_size, "gpt": ns.gpu_gpt_batch_size}
    ),
    "tokens": lambda ns: tokens.run(ns.repeats),
    "accumulation": lambda ns: accumulation.run(ns.repeats),
    "addon": lambda ns: addon.run(ns.addon_image, ns.image_count),
    "dropout": lambda ns: dropout.run(ns.repeats),
}


def machine() -> dict[str, Any]:
    import torch

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def markdown(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| measurement | result | target |", "|---|---|---|"]
    lines += [f"| {what} | {result} | {target} |" for what, result, target in rows]
    return "\n".join(lines)


def merged(path: Path, parts: dict[str, Any], host: dict[str, Any]) -> dict[str, Any]:
    """The results file with ``parts`` replacing the same parts of an earlier run today (a
    file in another layout is replaced; git keeps it)."""
    earlier: dict[str, Any] = {}
    if path.is_file():
        try:
            earlier = json.loads(path.read_text()).get("parts", {})
        except (json.JSONDecodeError, AttributeError):
            earlier = {}
    combined = earlier | parts
    return {"machine": host, "parts": {name: combined[name] for name in PARTS if name in combined}}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per comparison")
    parser.add_argument("--models", default=",".join(ab.AB_MODELS), help="A/B models")
    parser.add_argument("--env-count", type=int, default=15)
    parser.add_argument(
        "--startup-before",
        type=Path,
        metavar="SRC",
        help="startup: also time this source tree's ddpimg (e.g. another checkout's src), "
        "interleaved with this one's",
    )
    parser.add_argument("--join-timeout", type=float, default=3.0)
    parser.add_argument("--image-builds", type=Path, help="build times (written by nox)")
    parser.add_argument("--image-count", type=int, default=5)
    parser.add_argument(
        "--addon-image", default="ddpimg:cpu", help="addon: the image the add-on is built in"
    )
    parser.add_argument(
        "--gpu-dry-run",
        action="store_true",
        help="run the gpu part's commands on the CPU at toy sizes (checks the plumbing only)",
    )
    for model, name in (("resnet", "ResNet-50"), ("gpt", "GPT-124M")):
        parser.add_argument(
            gpu.BATCH_FLAGS[model],
            type=int,
            metavar="N",
            help=f"the gpu part's {name} batch (default: on a GPU the largest that fits, "
            "searched first; in the dry run its toy batch)",
        )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    ns = parser.parse_args(argv)
    unknown = sorted(set(ns.parts.split(",")) - set(PARTS))
    if unknown:
        parser.error(f"unknown part {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    for flag in gpu.BATCH_FLAGS.values():
        given = getattr(ns, flag.removeprefix("--").replace("-", "_"))
        if given is not None and given < 1:
            parser.error(f"{flag} {given}: give a batch of 1 or more")
    unknown = sorted(set(ns.models.split(",")) - set(ab.AB_MODELS))
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}: choose from {', '.join(ab.AB_MODELS)}")
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(argv)
    started = datetime.now(timezone.utc)
    ns.out.mkdir(parents=True, exist_ok=True)
    path = ns.out / f"{socket.gethostname()}-{started:%Y-%m-%d}.json"
    host = machine()
    failed: list[str] = []
    for name in ns.parts.split(","):
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        began, load = time.perf_counter(), os.getloadavg()
        began_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        try:
            rows, record = PARTS[name](ns)
        except Exception as err:  # the other parts still run; the exit status says it
            failed.append(name)
            rows, record = [(f"part {name}", f"failed: {type(err).__name__}: {err}", "")], {}
            print(f"bench: {name} failed: {err!r}", file=sys.stderr, flush=True)
        result = {
            "started": began_at,
            "took_s": round(time.perf_counter() - began, 1),
            "loadavg_start": load,
            "loadavg_end": os.getloadavg(),
            "rows": rows,
            "record": record,
        }
        # Written after every part: a failure or an interruption later loses nothing.
        document = merged(path, {name: result}, host)
        path.write_text(json.dumps(document, indent=1) + "\n")
        print(markdown(rows), file=sys.stderr, flush=True)
    document = json.loads(path.read_text())
    table = markdown([row for part in document["parts"].values() for row in part["rows"]])
    if ns.markdown:
        ns.markdown.write_text(table + "\n")
    print(table)
    print(f"\nwrote {path}", file=sys.stderr)
    if ns.out.resolve() == RESULTS.resolve():
        try:
            for name in figures.draw_all(RESULTS, figures.IMAGES):
                print(f"drew {figures.IMAGES / name}", file=sys.stderr)
        except ImportError as err:
            print(f"bench: no figures: {err} (pip install matplotlib)", file=sys.stderr)
    if failed:
        print(f"bench: failed parts: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
