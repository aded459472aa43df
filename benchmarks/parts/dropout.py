"""What a training step pays for its dropout masks: ddpimg's counter-based draw
(``ddpimg.train.dropout``) against the two draws it replaced, in this process.

* **per-row generators**: a ``torch.Generator`` seeded by (seed, step, layer, row) for every
  row of the pass (ddpimg from 2026-11-29 to issue 56), kept here only as the reference;
* **whole batch**: a generator seeded by (seed, step, layer) and one ``torch.rand`` of the
  pass's rows for each layer (what ddpimg did before, but drawing only the pass's rows, not
  the global batch's: the cheapest a generator's draw can be), the bound issue 56 sets;
* **counter hash**: the draw ddpimg uses now (``DropoutContext.kept_units`` for dropout,
  ``kept_rows`` for stochastic depth, which draws all of a model's layers at once a pass).

Each method makes the keep masks of one forward pass (bool, compared with p as the layers
do) for each case: MNIST's step at 64 rows (its two dropout layers: 64 x 9,216 units at p
0.25 and 64 x 128 at p 0.5); the 18 stochastic-depth layers of ConvNeXt-tiny (row mode, p
rising to 0.1) at 256 rows; and one such layer alone. Per thread count (1, and torch's
default here), ``repeats`` rounds time every method for ``CALLS`` passes (steps 1..CALLS) in
an order shuffled per round; a round's figure is its median pass, and the ratios are taken
within a round. At 2 threads on a busy machine the int64 operations' parallel regions wait
for a descheduled OpenMP thread unless ``OMP_WAIT_POLICY=PASSIVE`` (as the tests session
sets): MNIST's hash 1.48x the whole-batch draw (rounds 0.15-2.00) with the default policy,
0.67x (0.49-0.75) passive, in one trial at load average 5.

Before timing, the process runs one forward and backward of the MNIST CNN at batch 64, as a
training process has before its masks: glibc then serves the masks' buffers from its heap.
Without that, in a fresh process, glibc hands the hash's two 4.7 MB int64 buffers back to the
kernel after every pass and each pass pays for 2,300 page faults (5-15 ms instead of 1.2, in
a trial); the record keeps the page faults a pass (``faults_per_pass``) to show which state
was measured.
"""

from __future__ import annotations

import functools
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ddpimg.train.dropout import BatchPosition, DropoutContext
from ddpimg.train.seeding import derive_seed
from parts.common import Row, interleaved, spread

CALLS = 30
SEED = 1
WARM_BATCH = 64
# A layer of a case: (layer number, one sample's shape, p, "units" (dropout) or "rows"
# (stochastic depth: one draw a row)).
Layer = tuple[int, tuple[int, ...], float, str]
CONVNEXT_TINY_DEPTH = 18
CASES: dict[str, tuple[int, list[Layer]]] = {
    "MNIST step, 64 rows (64x12x12 units at p 0.25, 128 at p 0.5)": (
        64,
        [(1, (64, 12, 12), 0.25, "units"), (2, (128,), 0.5, "units")],
    ),
    f"stochastic depth, 256 rows, ConvNeXt-tiny's {CONVNEXT_TINY_DEPTH} layers": (
        256,
        [
            (index, (1, 1, 1), 0.1 * index / (CONVNEXT_TINY_DEPTH - 1), "rows")
            for index in range(CONVNEXT_TINY_DEPTH)
        ],
    ),
    "stochastic depth, 256 rows, one layer": (256, [(0, (1, 1, 1), 0.1, "rows")]),
}
Pass = Callable[[int, int, Sequence[Layer]], list[torch.Tensor]]


def per_row_generators(step: int, rows: int, layers: Sequence[Layer]) -> list[torch.Tensor]:
    """The masks as ddpimg drew them before issue 56: a generator per row."""
    masks = []
    for layer, tail, p, _ in layers:
        generator = torch.Generator()
        draws = torch.empty((rows, *tail))
        for row in range(rows):
            generator.manual_seed(derive_seed(SEED, "dropout", step, layer, row))
            torch.rand(tail, generator=generator, out=draws[row])
        masks.append(draws >= p)
    return masks


def whole_batch(step: int, rows: int, layers: Sequence[Layer]) -> list[torch.Tensor]:
    """One generator a layer for the pass's rows: the cost floor of a generator's draw."""
    masks = []
    for layer, tail, p, _ in layers:
        generator = torch.Generator()
        generator.manual_seed(derive_seed(SEED, "dropout", step, layer))
        masks.append(torch.rand((rows, *tail), generator=generator) >= p)
    return masks


def counter_hash(step: int, rows: int, layers: Sequence[Layer]) -> list[torch.Tensor]:
    context = DropoutContext(SEED)
    context.row_layers = max(layer for layer, *_ in layers) + 1
    context.position = BatchPosition(step, 0, rows)
    cpu = torch.device("cpu")
    return [
        context.kept_rows(layer, rows, p, cpu)
        if kind == "rows"
        else context.kept_units(layer, rows, tail, p, cpu)
        for layer, tail, p, kind in layers
    ]


METHODS: dict[str, Pass] = {
    "per-row generators (before)": per_row_generators,
    "whole batch (one generator a layer)": whole_batch,
    "counter hash (now)": counter_hash,
}
OLD, BOUND, NEW = METHODS


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(method: Pass, rows: int, layers: Sequence[Layer]) -> dict[str, float]:
    """The median pass in ms over steps 1..CALLS, and the page faults a pass."""
    method(CALLS + 1, rows, layers)  # the first call's one-off costs
    times = []
    faults = _faults()
    for step in range(1, CALLS + 1):
        began = time.perf_counter()
        method(step, rows, layers)
        times.append(time.perf_counter() - began)
    return {"ms": statistics.median(times) * 1e3, "faults_per_pass": (_faults() - faults) / CALLS}


def _kept_fraction(method: Pass, rows: int, layers: Sequence[Layer]) -> float:
    """The share of units the pass keeps (each method's masks keep about 1 - p)."""
    masks = method(1, rows, layers)
    return sum(mask.float().sum().item() for mask in masks) / sum(m.numel() for m in masks)


def _warm_allocator() -> None:
    """One training pass of the MNIST CNN (``WARM_BATCH`` rows): the allocator's state in a
    training process (the module's docstring)."""
    from ddpimg.train.tasks.mnist.task import MnistNet

    context = DropoutContext(SEED)
    context.position = BatchPosition(1, 0, WARM_BATCH)
    MnistNet(context)(torch.randn(WARM_BATCH, 1, 28, 28)).sum().backward()


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    default_threads = torch.get_num_threads()
    rows_out: list[Row] = []
    record: dict[str, Any] = {"calls_per_round": CALLS, "rounds": repeats}
    _warm_allocator()
    try:
        for threads in sorted({1, default_threads}):
            torch.set_num_threads(threads)
            for case, (rows, layers) in CASES.items():
                runners = {
                    name: functools.partial(_timed, method, rows, layers)
                    for name, method in METHODS.items()
                }
                label = f"{case}, {threads} thread(s)"
                rounds = interleaved(runners, repeats, f"dropout {label}", seed=3)
                ms = {name: [r[name]["ms"] for r in rounds] for name in METHODS}
                ratio = spread([r[NEW]["ms"] / r[BOUND]["ms"] for r in rounds])
                speedup = spread([r[OLD]["ms"] / r[NEW]["ms"] for r in rounds])
                median = {name: statistics.median(values) for name, values in ms.items()}
                record[label] = {
                    "ms": ms,
                    "median_ms": median,
                    "faults_per_pass": {
                        name: [r[name]["faults_per_pass"] for r in rounds] for name in METHODS
                    },
                    "hash_over_whole_batch": ratio,
                    "per_row_over_hash": speedup,
                    "kept_fraction": {
                        name: _kept_fraction(method, rows, layers)
                        for name, method in METHODS.items()
                    },
                }
                rows_out.append(
                    (
                        f"dropout masks of a pass: {label} (median of {repeats} rounds x "
                        f"{CALLS} passes)",
                        f"counter hash **{median[NEW]:.3f} ms** = **{ratio['median']:.2f}x** "
                        f"the whole-batch draw's {median[BOUND]:.3f} ms (rounds "
                        f"{ratio['min']:.2f}-{ratio['max']:.2f}); per-row generators "
                        f"{median[OLD]:.3f} ms = {speedup['median']:.1f}x the hash",
                        "hash <= 1.00x whole batch",
                    )
                )
    finally:
        torch.set_num_threads(default_threads)
    record["default_threads"] = default_threads
    return rows_out, record
