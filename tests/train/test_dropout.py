from __future__ import annotations

import math

import pytest
import torch

from ddpimg.train.dropout import (
    BatchPosition,
    DropoutContext,
    GlobalBatchDropout,
    GlobalStochasticDepth,
    unit_draws,
)
from ddpimg.train.seeding import derive_words


def dropped(
    x: torch.Tensor,
    p: float,
    *,
    step: int,
    offset: int,
    global_batch: int,
    layer: int = 0,
    seed: int = 1,
) -> torch.Tensor:
    context = DropoutContext(seed)
    context.position = BatchPosition(step, offset, global_batch)
    out: torch.Tensor = GlobalBatchDropout(p, layer, context)(x)
    return out


@pytest.mark.parametrize("world_size", [2, 4])
def test_rank_rows_equal_the_single_process_rows(world_size: int) -> None:
    x = torch.randn(8, 6, 3)
    single = dropped(x, 0.5, step=3, offset=0, global_batch=8)
    rows = 8 // world_size
    for rank in range(world_size):
        part = x[rank * rows : (rank + 1) * rows]
        mine = dropped(part, 0.5, step=3, offset=rank * rows, global_batch=8)
        assert torch.equal(mine, single[rank * rows : (rank + 1) * rows])


def test_a_pass_draws_only_its_own_rows() -> None:
    """A micro-batch of 2 rows of a global batch of 10^12: drawn whole, its mask would not
    fit in any memory; per row it is two rows' draws, those of its place in the batch."""
    x = torch.ones(2, 1000)
    far = dropped(x, 0.5, step=2, offset=10**12 - 2, global_batch=10**12)
    assert far.shape == (2, 1000)
    near = dropped(torch.ones(4, 1000), 0.5, step=2, offset=10**12 - 4, global_batch=10**12)
    assert torch.equal(far, near[2:])


def test_kept_units_are_scaled_and_about_p_are_dropped() -> None:
    x = torch.ones(64, 100)
    out = dropped(x, 0.25, step=1, offset=0, global_batch=64)
    assert torch.unique(out).tolist() == pytest.approx([0.0, 1 / 0.75])
    # A fixed draw (the seed); 0.02 is 3.7 standard deviations of a fraction over 6,400 units.
    assert (out == 0).float().mean().item() == pytest.approx(0.25, abs=0.02)


@pytest.mark.parametrize(
    "change", [{"step": 4}, {"layer": 1}, {"seed": 2}], ids=["step", "layer", "seed"]
)
def test_mask_changes_with_step_layer_and_seed(change: dict[str, int]) -> None:
    x = torch.ones(16, 32)
    base: dict[str, int] = {"step": 3, "layer": 0, "seed": 1}
    first = dropped(x, 0.5, offset=0, global_batch=16, **base)
    again = dropped(x, 0.5, offset=0, global_batch=16, **base)
    other = dropped(x, 0.5, offset=0, global_batch=16, **(base | change))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_eval_mode_is_identity_without_a_position() -> None:
    layer = GlobalBatchDropout(0.5, 0, DropoutContext(1)).eval()
    x = torch.randn(4, 5)
    assert layer(x) is x


def test_training_without_position_is_an_error() -> None:
    layer = GlobalBatchDropout(0.5, 0, DropoutContext(1))
    with pytest.raises(RuntimeError, match="ran in training mode before a position"):
        layer(torch.ones(2, 2))


def test_slice_beyond_the_global_batch_is_an_error() -> None:
    with pytest.raises(RuntimeError, match=r"rows 6..10 are outside the global batch of 8"):
        dropped(torch.ones(4, 2), 0.5, step=1, offset=6, global_batch=8)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_probability_must_be_below_one(p: float) -> None:
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\)"):
        GlobalBatchDropout(p, 0, DropoutContext(1))


def depth(x: torch.Tensor, p: float, mode: str, *, offset: int, global_batch: int) -> torch.Tensor:
    context = DropoutContext(5)
    context.position = BatchPosition(2, offset, global_batch)
    out: torch.Tensor = GlobalStochasticDepth(p, mode, 1, context)(x)
    return out


def test_stochastic_depth_drops_whole_samples_the_same_on_any_split() -> None:
    x = torch.ones(16, 3, 2, 2)
    single = depth(x, 0.5, "row", offset=0, global_batch=16)
    per_sample = single.flatten(1)
    assert all(len(torch.unique(row)) == 1 for row in per_sample)
    assert set(torch.unique(single).tolist()) == {0.0, 2.0}
    halves = [depth(x[:8], 0.5, "row", offset=o, global_batch=16) for o in (0, 8)]
    assert torch.equal(torch.cat(halves), single)


def test_batch_mode_drops_all_or_nothing_on_every_rank() -> None:
    x = torch.ones(4, 2)
    outcomes = {float(depth(x, 0.5, "batch", offset=o, global_batch=8).sum()) for o in (0, 4)}
    assert len(outcomes) == 1
    assert outcomes <= {0.0, 16.0}


def test_stochastic_depth_is_off_in_evaluation() -> None:
    layer = GlobalStochasticDepth(0.9, "row", 1, DropoutContext(1))
    layer.eval()
    x = torch.randn(3, 2)
    assert layer(x) is x


def random_layers(context: DropoutContext) -> torch.nn.Module:
    """One layer of each kind: dropout, stochastic depth by row and for the whole batch."""
    return torch.nn.Sequential(
        GlobalBatchDropout(0.5, 0, context),
        GlobalStochasticDepth(0.5, "row", 1, context),
        GlobalStochasticDepth(0.5, "batch", 2, context),
    )


def compiled_graphs(
    model: torch.nn.Module, x: torch.Tensor
) -> tuple[torch.Tensor, list[torch.fx.GraphModule]]:
    """``model`` inside a compiled function, run once on ``x``; the graphs dynamo made."""
    graphs: list[torch.fx.GraphModule] = []

    def recording(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: model(x * 2) / 2, backend=recording)
    return compiled(x), graphs


def traced_ops(graphs: list[torch.fx.GraphModule]) -> set[str]:
    return {str(node.target) for graph in graphs for node in graph.graph.nodes}


def test_compiled_models_draw_the_masks_outside_their_graphs() -> None:
    """Under --compile (``keep_outside_graphs``) the masks are computed eagerly: no graph
    holds the hash (traced, its keys would recompile it every step), and the compiled layers
    drop what the eager ones drop."""
    context = DropoutContext(5)
    context.position = BatchPosition(2, 4, 16)
    model = random_layers(context)
    x = torch.randn(4, 6)
    eager = model(x)
    context.keep_outside_graphs()
    out, graphs = compiled_graphs(model, x)
    assert torch.equal(out, eager)
    assert graphs
    hashing = {op for op in traced_ops(graphs) if "bitwise" in op or "arange" in op}
    assert not hashing


def test_traced_draws_are_the_eager_draws() -> None:
    """Traced into a graph (a model compiled without ``keep_outside_graphs``), the hash
    gives the eager masks: integer operations that never overflow are exact on any
    backend."""
    context = DropoutContext(5)
    context.position = BatchPosition(2, 4, 16)
    model = random_layers(context)
    x = torch.randn(4, 6)
    out, graphs = compiled_graphs(model, x)
    assert torch.equal(out, model(x))
    assert any("bitwise_xor" in op for op in traced_ops(graphs))


def test_compiled_random_layers_compile_once_for_all_layers() -> None:
    """Each layer has its own p and layer number; read in the traced forward, they compiled
    the forward once a layer, and a model of 12 such layers of a kind reached dynamo's limit
    of 8 recompiles (made an error here) in its first step. Now only the first step
    compiles, whatever the number of layers."""
    from torch._dynamo.callback import callback_handler

    context = DropoutContext(1)
    blocks = [
        (
            torch.nn.Linear(8, 8),
            GlobalStochasticDepth(0.01 * index, "row", 2 * index, context),
            GlobalBatchDropout(0.1 + 0.01 * index, 2 * index + 1, context),
        )
        for index in range(12)
    ]
    model = torch.nn.Sequential(*[module for block in blocks for module in block])
    context.keep_outside_graphs()
    compiles: list[int] = []
    per_step = []

    def started(_: object) -> None:
        compiles.append(1)

    torch._dynamo.reset()
    model.compile(backend="aot_eager")
    callback_handler.register_start_callback(started)
    try:
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            for step in (1, 2, 3):
                context.position = BatchPosition(step, 0, 4)
                before = len(compiles)
                model(torch.randn(4, 8)).sum().backward()
                per_step.append(len(compiles) - before)
    finally:
        callback_handler.remove_start_callback(started)
        torch._dynamo.reset()
    assert per_step[0] > 0
    assert per_step[1:] == [0, 0]


WORD = 2**32 - 1


def permuted(x: int) -> int:
    """hash-prospector's 3-round [16 236f7153 12 33cd8663 15 3e06b66b 16], on Python ints."""
    x ^= x >> 16
    x = (x * 0x236F7153) & WORD
    x ^= x >> 12
    x = (x * 0x33CD8663) & WORD
    x ^= x >> 15
    x = (x * 0x3E06B66B) & WORD
    return x ^ (x >> 16)


def reference_draw(keys: tuple[int, int], row: int, unit: int) -> int:
    """The draw as the module's docstring writes it, in exact integer arithmetic. Changing it
    changes every dropout mask: old runs resume with other masks."""
    k0, k1 = keys
    r = permuted((row & WORD) ^ k0 ^ (((row >> 32) * 0x9E3779B1) & WORD))
    u = permuted(unit ^ k1)
    word = ((r ^ u) * 0x604BAA5D) & WORD
    word ^= word >> 15
    return (word * 0x43D6CE97) & WORD


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("first", [5, 2**32 - 2], ids=["rows", "rows past 2**32"])
def test_draws_are_the_documented_function_on_every_device(device: str, first: int) -> None:
    """Rows on both sides of 2**32 (their high word hashed in) and an odd count of units (the
    vectorised kernels' scalar tail) give the reference's words on each device."""
    keys = derive_words(1, "dropout", 3, 1)
    rows, units = 4, 37
    draws = unit_draws(keys, first, rows, units, torch.device(device)).cpu()
    expected = [
        [reference_draw(keys, first + row, unit) for unit in range(units)] for row in range(rows)
    ]
    assert draws.tolist() == expected


def test_a_unit_is_kept_when_its_word_reaches_p() -> None:
    context = DropoutContext(3)
    context.position = BatchPosition(1, 0, 8)
    keep = context.kept_units(2, 8, (5,), 0.3, torch.device("cpu"))
    words = unit_draws(derive_words(3, "dropout", 1, 2), 0, 8, 5, torch.device("cpu"))
    assert torch.equal(keep, words >= math.ceil(0.3 * 2**32))


def test_stochastic_depth_layers_share_one_draw_a_pass() -> None:
    """Row mode: layer L's rows are column L of one draw keyed by (seed, step); the other
    layers of the model change no layer's draws."""
    context = DropoutContext(3)
    layers = [GlobalStochasticDepth(0.5, "row", layer, context) for layer in (1, 4, 9)]
    assert context.row_layers == 10
    context.position = BatchPosition(2, 8, 32)
    x = torch.ones(8, 3)
    outs = [layer(x)[:, 0] for layer in layers]
    words = unit_draws(derive_words(3, "stochastic depth", 2), 8, 8, 2, torch.device("cpu"))
    assert torch.equal(outs[0] > 0, words[:, 1] >= 2**31)
    alone = DropoutContext(3)
    alone.position = context.position
    assert torch.equal(GlobalStochasticDepth(0.5, "row", 4, alone)(x)[:, 0], outs[1])


def test_draws_look_independent_across_rows_and_units() -> None:
    """A fixed draw of MNIST's first dropout layer (64 rows x 9,216 units), tested as one
    would test a generator, each bound about 4 standard deviations (and 4x chi-square's
    standard deviation): kept fraction, neighbours along rows and units, every pair of rows,
    and the parity of 2 x 2 rectangles of bits, which is constant when a row's draws are the
    same function of the unit's key for every row (r ^ u alone, unmixed, would give 0)."""
    words = unit_draws(derive_words(1, "dropout", 3, 1), 0, 64, 9216, torch.device("cpu"))
    uniform = words.double() / 2**32
    bits = (words >> 31).double()
    n = words.numel()
    assert abs(uniform.mean().item() - 0.5) < 4 * (1 / 12 / n) ** 0.5
    for a, b in ((uniform[:, 1:], uniform[:, :-1]), (uniform[1:], uniform[:-1])):
        assert abs(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1]) < 4 / n**0.5
    centred = bits - 0.5
    pairs = (centred @ centred.T / (0.25 * 9216))[~torch.eye(64, dtype=torch.bool)]
    assert pairs.abs().max() < 5 / 9216**0.5
    rectangles = (bits[1:, 1:] + bits[:-1, 1:] + bits[1:, :-1] + bits[:-1, :-1]) % 2
    assert abs(rectangles.mean().item() - 0.5) < 4 * 0.5 / rectangles.numel() ** 0.5
    counts = torch.bincount((words >> 24).flatten(), minlength=256).double()
    chi_square = ((counts - n / 256) ** 2 / (n / 256)).sum().item()
    assert chi_square < 255 + 4 * (2 * 255) ** 0.5
