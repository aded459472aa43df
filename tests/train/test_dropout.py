from __future__ import annotations

import pytest
import torch

from ddpimg.train.dropout import (
    BatchPosition,
    DropoutContext,
    GlobalBatchDropout,
    GlobalStochasticDepth,
)


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


@pytest.mark.parametrize("mode", ["dropout", "row", "batch"])
def test_compiled_models_draw_the_masks_outside_their_graphs(mode: str) -> None:
    """Under torch.compile the draws run eagerly, from the per-row generators: no graph
    holds a random op (inductor would replace it by its own stream), and the compiled
    layer drops what the eager one drops. (torch 2.14's dynamo would break the graph at
    the generator even without ``torch.compiler.disable``: this guards a later one.)"""
    graphs: list[torch.fx.GraphModule] = []

    def recording(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        graphs.append(graph)
        return graph.forward

    context = DropoutContext(5)
    context.position = BatchPosition(2, 4, 16)
    layer: torch.nn.Module = (
        GlobalBatchDropout(0.5, 0, context)
        if mode == "dropout"
        else GlobalStochasticDepth(0.5, mode, 0, context)
    )
    x = torch.randn(4, 6)
    eager = layer(x)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: layer(x * 2) / 2, backend=recording)
    assert torch.equal(compiled(x), eager)
    targets = {str(node.target) for graph in graphs for node in graph.graph.nodes}
    assert graphs
    assert not {target for target in targets if "rand" in target or "bernoulli" in target}
