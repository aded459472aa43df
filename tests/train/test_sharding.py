from __future__ import annotations

import pytest
import torch

from ddpimg.train.batch import BatchLayout
from ddpimg.train.sharding import EvalShard, TrainShard, epoch_order


def test_epoch_order_is_a_permutation_fixed_by_seed_and_epoch() -> None:
    order = epoch_order(100, seed=1, epoch=1)
    assert sorted(order.tolist()) == list(range(100))
    assert torch.equal(order, epoch_order(100, seed=1, epoch=1))
    assert not torch.equal(order, epoch_order(100, seed=1, epoch=2))
    assert not torch.equal(order, epoch_order(100, seed=2, epoch=1))


@pytest.mark.parametrize(
    ("num_samples", "global_batch", "steps"),
    [(100, 32, 3), (96, 32, 3), (31, 32, 0), (64, 1, 64)],
)
def test_steps_per_epoch_drops_the_incomplete_global_batch(
    num_samples: int, global_batch: int, steps: int
) -> None:
    assert TrainShard(num_samples, BatchLayout(global_batch, 1), rank=0).steps_per_epoch == steps


@pytest.mark.parametrize(("world_size", "global_batch"), [(2, 12), (3, 12), (4, 12), (12, 12)])
def test_rank_slices_together_are_the_single_process_batch(
    world_size: int, global_batch: int
) -> None:
    order = epoch_order(100, seed=7, epoch=3)
    single = TrainShard(100, BatchLayout(global_batch, 1), rank=0)
    per_rank = global_batch // world_size
    shards = [
        TrainShard(100, BatchLayout(per_rank, world_size), rank) for rank in range(world_size)
    ]
    assert {shard.steps_per_epoch for shard in shards} == {single.steps_per_epoch}
    for step in range(single.steps_per_epoch):
        joined = torch.cat([shard.rows(order, step) for shard in shards])
        assert torch.equal(joined, single.rows(order, step))
        assert [shard.offset for shard in shards] == list(range(0, global_batch, per_rank))


def test_an_epoch_visits_each_sample_at_most_once() -> None:
    order = epoch_order(50, seed=1, epoch=1)
    shards = [TrainShard(50, BatchLayout(4, 3), rank) for rank in range(3)]
    seen = [i for s in shards for step in range(s.steps_per_epoch) for i in s.rows(order, step)]
    assert len(seen) == 48
    assert len(set(int(i) for i in seen)) == 48


@pytest.mark.parametrize(
    ("num_samples", "batch_size", "world_size"),
    [(10, 1000, 1), (10, 3, 1), (10, 3, 3), (2001, 1000, 2), (5, 2, 8), (10_000, 1000, 7)],
)
def test_eval_shards_cover_the_set_exactly_once(
    num_samples: int, batch_size: int, world_size: int
) -> None:
    shards = [EvalShard(num_samples, batch_size, rank, world_size) for rank in range(world_size)]
    covered = [i for shard in shards for batch in shard.batches() for i in batch]
    assert covered == list(range(num_samples))
    sizes = [shard.stop - shard.start for shard in shards]
    assert max(sizes) - min(sizes) <= 1
    # Same number of (possibly empty) batches everywhere keeps collectives matched.
    assert {len(shard.batches()) for shard in shards} == {shards[0].num_batches}
    assert all(len(batch) <= batch_size for shard in shards for batch in shard.batches())


def test_eval_shard_pads_with_empty_batches() -> None:
    first, second = (EvalShard(2001, 1000, rank, 2) for rank in range(2))
    assert [len(b) for b in first.batches()] == [1000, 0]
    assert [len(b) for b in second.batches()] == [1000, 1]


@pytest.mark.parametrize(("world_size", "micro"), [(1, 4), (2, 4), (4, 2), (2, 2)])
def test_micro_batches_follow_their_place_in_the_global_batch(world_size: int, micro: int) -> None:
    """The forward passes of a step, rank by rank and micro-batch by micro-batch, are the
    global batch cut into pieces of ``micro`` in order: one rank with two micro-batches of m
    takes, in turn, the rows two ranks of m take at once."""
    global_batch, order = 8, torch.randperm(40)
    per_rank = global_batch // world_size
    shards = [
        TrainShard(40, BatchLayout(per_rank, world_size, micro), rank) for rank in range(world_size)
    ]
    for step in range(3):
        passes = [order[where] for shard in shards for where in shard.micro_positions(step)]
        assert all(len(rows) == micro for rows in passes)
        whole = order[step * global_batch : (step + 1) * global_batch]
        assert torch.equal(torch.cat(passes), whole)
        starts = [shard.micro_offset(j) for shard in shards for j in range(per_rank // micro)]
        assert starts == list(range(0, global_batch, micro))


def test_a_plan_holds_one_batch_a_forward_pass() -> None:
    shard = TrainShard(40, BatchLayout(8, 2, 2), rank=1)
    plan = shard.plan(torch.arange(40), epoch=1, start=1, stop=3)
    assert len(plan) == 2 * 4
    assert [plan.rows(i).tolist() for i in range(4)] == [[24, 25], [26, 27], [28, 29], [30, 31]]


def test_part_of_the_set_is_spread_evenly_whatever_the_ranks() -> None:
    """A short run's 4 of 10 samples: every tenth of the set is represented, each sample
    once, and the same 4 on one rank as on two."""

    def evaluated(world_size: int) -> list[int]:
        rows: list[int] = []
        for rank in range(world_size):
            plan = EvalShard(4, 3, rank, world_size, set_size=10).plan()
            rows += [int(row) for where in plan.slices for row in plan.order[where]]
        return rows

    assert evaluated(1) == [0, 2, 5, 7]
    assert evaluated(2) == [0, 2, 5, 7]
    assert EvalShard(10, 4, 0, 1, set_size=10).plan().order.tolist() == list(range(10))
