"""The benchmark session (``nox -s bench``): ddpimg against plain PyTorch, and its own costs.

Parts, each a function below, each returning rows for the table and a JSON record:

* ``ab``: ddpimg's trainers (``train mnist``, ``train gpt --size tiny``, ``train resnet
  --arch resnet18 --image-size 64``) against the
  tutorial-style loops in benchmarks/reference/, one process each, same model, data order,
  per-rank batch, precision and optimiser. Runs alternate A/B, B/A, ... so both see the
  same machine load; the ratio of training steps/s after warm-up is taken per pair, and the
  loss after the last step K is compared.
* ``env``: ``ddpimg env --json`` against ``python -c pass`` (interleaved medians), and
  whether ``ddpimg env`` imports torch.
* ``topology``: ``resolve_topology`` + ``derive_port`` for simulated Slurm steps of 64 to
  10,000 nodes x 8 tasks, per rank, over sampled ranks.
* ``rendezvous``: the join of 64 local processes on one TCPStore, and the report when one
  of the 64 never arrives.
* ``gpu``: skipped with a line in the table when no CUDA device is visible.

    python benchmarks/bench.py [--repeats 3] [--parts ab,env,...] [--models mnist,...]
                               [--out benchmarks/results] [--markdown FILE]

Writes ``<out>/<hostname>-<date>.json`` and prints the table (Markdown).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference"
PYTHON = sys.executable

Row = tuple[str, str, str]  # what, result, target / note


# ---- A/B: ddpimg trainers vs the reference loops ---------------------------------------------

# Per model: ddpimg's train arguments and the reference script; both get the same batch,
# step count, warm-up and sample counts.
AB_MODELS: dict[str, dict[str, Any]] = {
    "mnist": {
        "train": ["mnist"],
        "script": "mnist_ddp.py",
        "batch": 64,
        "steps": 30,
        "warmup": 5,
        "train_samples": 6400,
        "eval_samples": 1000,
    },
    "gpt-tiny": {
        "train": ["gpt", "--size", "tiny"],
        "script": "gpt_ddp.py",
        "batch": 32,
        "steps": 60,
        "warmup": 10,
        "train_samples": 4000,
        "eval_samples": 500,
    },
    "resnet18-64px": {
        "train": ["resnet", "--arch", "resnet18", "--image-size", "64"],
        "script": "resnet_ddp.py",
        "reference_args": ["--arch", "resnet18", "--image-size", "64"],
        "batch": 16,
        "steps": 12,
        "warmup": 3,
        "train_samples": 640,
        "eval_samples": 256,
    },
}


def _run_ddpimg(spec: dict[str, Any]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
        command = [
            PYTHON, "-m", "ddpimg", "train", *spec["train"],
            "--epochs", "1", "--max-steps", str(spec["steps"]),
            "--warmup-steps", str(spec["warmup"]), "--log-every", str(spec["steps"]),
            "--batch-size", str(spec["batch"]), "--train-samples", str(spec["train_samples"]),
            "--eval-samples", str(spec["eval_samples"]), "--out", out, "--resume", "none",
        ]  # fmt: skip
        began = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - began
        lines = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    summary = next(line for line in lines if line["kind"] == "summary")
    at_k = next(line for line in lines if line["kind"] == "train" and line["step"] == spec["steps"])
    return {
        "steps_per_s": summary["steady_samples_per_s"] / summary["global_batch_size"],
        "loss_at_k": at_k["loss"],
        "eval_loss": summary["eval_loss"],
        "wall_s": wall,
    }


def _run_reference(spec: dict[str, Any]) -> dict[str, float]:
    command = [
        PYTHON, str(REFERENCE / spec["script"]), *spec.get("reference_args", []),
        "--max-steps", str(spec["steps"]), "--warmup-steps", str(spec["warmup"]),
        "--batch-size", str(spec["batch"]), "--train-samples", str(spec["train_samples"]),
        "--eval-samples", str(spec["eval_samples"]),
    ]  # fmt: skip
    env = dict(os.environ, MASTER_PORT=str(_free_port()))
    began = time.perf_counter()
    proc = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - began
    result_line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    result: dict[str, float] = json.loads(result_line.removeprefix("RESULT "))
    return result | {"wall_s": wall}


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench_ab(repeats: int, models: Sequence[str]) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    for name in models:
        spec = AB_MODELS[name]
        runs: list[dict[str, dict[str, float]]] = []
        for repeat in range(repeats):
            pair: dict[str, dict[str, float]] = {}
            # Alternate which goes first, so a load trend hits both alike.
            order = ("ddpimg", "reference") if repeat % 2 == 0 else ("reference", "ddpimg")
            for who in order:
                pair[who] = _run_ddpimg(spec) if who == "ddpimg" else _run_reference(spec)
            runs.append(pair)
            print(f"  {name} repeat {repeat + 1}: {json.dumps(pair)}", file=sys.stderr)
        ratio = [r["ddpimg"]["steps_per_s"] / r["reference"]["steps_per_s"] for r in runs]
        wall = [r["reference"]["wall_s"] / r["ddpimg"]["wall_s"] for r in runs]
        loss_a = runs[0]["ddpimg"]["loss_at_k"]
        loss_b = runs[0]["reference"]["loss_at_k"]
        record[name] = {
            "spec": {k: v for k, v in spec.items() if k != "train"},
            "runs": runs,
            "steps_per_s_ratio": _spread(ratio),
            "wall_ratio_reference_over_ddpimg": _spread(wall),
        }
        spread = _spread(ratio)
        steps_a = statistics.median(r["ddpimg"]["steps_per_s"] for r in runs)
        steps_b = statistics.median(r["reference"]["steps_per_s"] for r in runs)
        rows.append(
            (
                f"{name}: steps/s ddpimg / reference (batch {spec['batch']}, "
                f"{spec['steps']} steps, {spec['warmup']} warm-up, {repeats} pairs)",
                f"median {spread['median']:.2f}x (min {spread['min']:.2f}, max "
                f"{spread['max']:.2f}); {steps_a:.2f} vs {steps_b:.2f} steps/s",
                ">= 1.0x",
            )
        )
        rows.append(
            (
                f"{name}: loss at step {spec['steps']}, ddpimg / reference",
                f"{loss_a:.6f} / {loss_b:.6f} (diff {abs(loss_a - loss_b):.1e})",
                "agree",
            )
        )
        rows.append(
            (
                f"{name}: whole run wall time, reference / ddpimg (start, train, eval)",
                f"median {_spread(wall)['median']:.2f}x",
                "",
            )
        )
    return rows, record


# ---- ddpimg env vs python -c pass ------------------------------------------------------------

TORCH_PROBE = (
    "import sys\n"
    "from ddpimg.cli import main\n"
    "sys.stdout = open('/dev/null', 'w')\n"
    "main(['env', '--json'])\n"
    "sys.stderr.write('torch' in sys.modules and 'TORCH' or 'NOTORCH')\n"
)


def _time_command(command: Sequence[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - began


def bench_env(count: int) -> tuple[list[Row], dict[str, Any]]:
    ddpimg = str(Path(PYTHON).parent / "ddpimg")
    commands = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "ddpimg env --json": [ddpimg, "env", "--json"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():
        _time_command(command)  # warm the page cache
    for _ in range(count):
        for name, command in commands.items():
            times[name].append(_time_command(command))
    probe = subprocess.run([PYTHON, "-c", TORCH_PROBE], capture_output=True, text=True, check=True)
    imports_torch = probe.stderr.strip().endswith("TORCH") and "NOTORCH" not in probe.stderr
    base = statistics.median(times["python -c pass"])
    env = statistics.median(times["ddpimg env --json"])
    rows: list[Row] = [
        (
            f"`ddpimg env --json` vs `python -c pass` (median of {count}, interleaved)",
            f"{env * 1e3:.0f} ms vs {base * 1e3:.0f} ms = {env / base:.2f}x",
            "< 3x",
        ),
        ("`ddpimg env` imports torch", "yes" if imports_torch else "no", "no"),
    ]
    record = {
        "times_s": times,
        "median_s": {"python -c pass": base, "ddpimg env --json": env},
        "ratio": env / base,
        "imports_torch": imports_torch,
    }
    return rows, record


# ---- Topology resolution at scale ------------------------------------------------------------

TASKS_PER_NODE = 8
SAMPLED_RANKS = 200


def compress_nid(indices: Sequence[int]) -> str:
    """``nid[000001-000006,000008-...]`` for sorted ``indices``, as Slurm writes it."""
    parts, start, prev = [], indices[0], indices[0]
    for index in [*indices[1:], None]:
        if index is not None and index == prev + 1:
            prev = index
            continue
        parts.append(f"{start:06d}" if start == prev else f"{start:06d}-{prev:06d}")
        if index is not None:
            start = prev = index
    return f"nid[{','.join(parts)}]"


def slurm_step_env(nodes: int, rank: int, nodelist: str) -> dict[str, str]:
    """The variables srun gives task ``rank`` of a ``nodes`` x 8 step."""
    world = nodes * TASKS_PER_NODE
    return {
        "SLURM_JOB_ID": "4242424",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_NTASKS": str(world),
        "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_TASKS_PER_NODE": f"{TASKS_PER_NODE}(x{nodes})",
        "SLURM_STEP_TASKS_PER_NODE": f"{TASKS_PER_NODE}(x{nodes})",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % TASKS_PER_NODE),
        "SLURM_NODEID": str(rank // TASKS_PER_NODE),
    }


def bench_topology(node_counts: Sequence[int]) -> tuple[list[Row], dict[str, Any]]:
    from ddpimg.topology import derive_port, expand_hostlist, resolve_topology

    rows: list[Row] = []
    record: dict[str, Any] = {}
    rng = random.Random(0)
    for nodes in node_counts:
        # A fragmented allocation: every 7th node of the machine is taken by someone else.
        indices = [i for i in range(nodes * 7 // 6 + 7) if i % 7 != 3][:nodes]
        nodelist = compress_nid(indices)
        world = nodes * TASKS_PER_NODE
        ranks = sorted(rng.sample(range(world), min(SAMPLED_RANKS, world)))
        per_rank = []
        for rank in ranks:
            env = slurm_step_env(nodes, rank, nodelist)
            began = time.perf_counter()
            topology = resolve_topology(env)
            derive_port(topology.job_key, (20000, 29999))
            per_rank.append(time.perf_counter() - began)
        began = time.perf_counter()
        expand_hostlist(nodelist)
        expand_s = time.perf_counter() - began
        median = statistics.median(per_rank)
        record[str(nodes)] = {
            "ranks": world,
            "nodelist_chars": len(nodelist),
            "sampled_ranks": len(ranks),
            "per_rank_s": _spread(per_rank),
            "expand_hostlist_s": expand_s,
        }
        rows.append(
            (
                f"topology resolution, {nodes} nodes x {TASKS_PER_NODE} = {world} ranks "
                f"(nodelist {len(nodelist)} chars)",
                f"median {median * 1e3:.2f} ms per rank (max {max(per_rank) * 1e3:.2f}); "
                f"hostlist expansion alone {expand_s * 1e3:.2f} ms",
                "< 10 ms at 4,096 nodes" if nodes == 4096 else "",
            )
        )
    return rows, record


# ---- Rendezvous join of 64 local processes ---------------------------------------------------


def _join_worker(
    rank: int, world: int, port: int, timeout_s: float, *, go: Any, results: Any
) -> None:
    from ddpimg.errors import RendezvousError
    from ddpimg.runtime.rendezvous import join, open_store

    # Rank 0's store is up before the clock starts, as it is when rank 0 starts first; the
    # others connect and join after ``go``.
    store = open_store("127.0.0.1", port, 0, timeout_s + 30, False) if rank == 0 else None
    go.wait()
    connected = math.nan
    try:
        if store is None:
            store = open_store("127.0.0.1", port, rank, timeout_s + 30, use_agent_store=False)
        connected = time.monotonic()
        join(
            store,
            rank=rank,
            world_size=world,
            hostname="localhost",
            timeout_s=timeout_s,
            host_of_rank=lambda _rank: "localhost",
        )
        results.put((rank, time.monotonic(), "ok", connected))
    except RendezvousError as err:
        results.put((rank, time.monotonic(), str(err), connected))
    except Exception as err:  # reported in the table rather than hanging the driver
        results.put((rank, time.monotonic(), f"{type(err).__name__}: {err}", connected))
    # Rank 0 serves the store: it stays until every other rank has read the verdict.
    if rank == 0:
        time.sleep(2.0)


def _join_once(world: int, absent: int | None, timeout_s: float) -> dict[str, Any]:
    import torch  # noqa: F401  imported once here, so the forked workers start at once

    context = multiprocessing.get_context("fork")
    go = context.Event()
    results = context.Queue()
    port = _free_port()
    workers = [
        context.Process(
            target=_join_worker,
            args=(rank, world, port, timeout_s),
            kwargs={"go": go, "results": results},
        )
        for rank in range(world)
        if rank != absent
    ]
    for worker in workers:
        worker.start()
    time.sleep(3.0)  # let every worker reach go.wait() and rank 0 open the store
    began = time.monotonic()
    go.set()
    outcomes = [results.get(timeout=timeout_s + 60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    rank0 = next(outcome for outcome in outcomes if outcome[0] == 0)
    return {
        "world": world,
        "absent": absent,
        "timeout_s": timeout_s,
        "rank0_verdict_s": rank0[1] - began,
        "last_rank_s": max(outcome[1] for outcome in outcomes) - began,
        "verdict": rank0[2],
        "last_connected_s": max(
            (outcome[3] for outcome in outcomes if not math.isnan(outcome[3])), default=began
        )
        - began,
        "all_same_verdict": len({outcome[2] for outcome in outcomes}) == 1,
    }


def bench_rendezvous(world: int, timeout_s: float) -> tuple[list[Row], dict[str, Any]]:
    joined = _join_once(world, None, 60.0)
    missing = _join_once(world, world - 1, timeout_s)
    rows: list[Row] = [
        (
            f"rendezvous join, {world} local processes on one TCPStore",
            f"last rank connected to the store after {joined['last_connected_s']:.2f} s; "
            f"verdict '{joined['verdict']}' at rank 0 "
            f"{joined['rank0_verdict_s'] - joined['last_connected_s']:.2f} s later; all "
            f"released at {joined['last_rank_s']:.2f} s",
            "",
        ),
        (
            f"rendezvous, rank {world - 1} of {world} never starts (timeout {timeout_s:g} s)",
            f"reported after {missing['rank0_verdict_s']:.2f} s on rank 0, "
            f"{missing['last_rank_s']:.2f} s on all; rank 0 says: "
            f"{missing['verdict'].splitlines()[0][:90]}",
            "names the rank and host",
        ),
    ]
    return rows, {"all_joined": joined, "one_missing": missing}


# ---- GPU -------------------------------------------------------------------------------------


def bench_gpu() -> tuple[list[Row], dict[str, Any]]:
    probe = subprocess.run(
        [PYTHON, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        check=True,
    )
    if probe.stdout.strip() != "True":
        reason = "no CUDA device visible (torch.cuda.is_available() is False)"
        row = ("GPU part (MNIST 5 epochs, ResNet-50 img/s, GPT-124M MFU, NCCL bus bw)",
               f"skipped: {reason}", "run `nox -s bench` on a GPU machine")  # fmt: skip
        return [row], {"skipped": reason}
    row = ("GPU part", "CUDA present, but the GPU benchmarks are not written yet", "")
    return [row], {"skipped": "not implemented"}


# ---- Driver ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def machine() -> dict[str, Any]:
    import torch

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "loadavg_start": os.getloadavg(),
    }


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| measurement | result | target |", "|---|---|---|"]
    lines += [f"| {what} | {result} | {target} |" for what, result, target in rows]
    return "\n".join(lines)


PARTS: dict[str, Callable[[argparse.Namespace], tuple[list[Row], dict[str, Any]]]] = {
    "env": lambda ns: bench_env(ns.env_count),
    "topology": lambda ns: bench_topology((64, 512, 4096, 10000)),
    "rendezvous": lambda ns: bench_rendezvous(64, ns.join_timeout),
    "ab": lambda ns: bench_ab(ns.repeats, ns.models.split(",")),
    "gpu": lambda ns: bench_gpu(),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="A/B pairs per model")
    parser.add_argument("--models", default=",".join(AB_MODELS), help="A/B models")
    parser.add_argument("--env-count", type=int, default=12)
    parser.add_argument("--join-timeout", type=float, default=3.0)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    ns = parser.parse_args(argv)
    started = datetime.now(timezone.utc)
    record: dict[str, Any] = {"machine": machine(), "started": started.isoformat()}
    rows: list[Row] = []
    for name in ns.parts.split(","):
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        began = time.perf_counter()
        part_rows, part_record = PARTS[name](ns)
        rows += part_rows
        record[name] = part_record | {"took_s": time.perf_counter() - began}
    record["machine"]["loadavg_end"] = os.getloadavg()
    record["rows"] = rows
    ns.out.mkdir(parents=True, exist_ok=True)
    path = ns.out / f"{socket.gethostname()}-{started:%Y-%m-%d}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    table = markdown(rows)
    if ns.markdown:
        ns.markdown.write_text(table + "\n")
    print(table)
    print(f"\nwrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
