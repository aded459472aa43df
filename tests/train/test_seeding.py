from __future__ import annotations

import pytest
import torch

from ddpimg.errors import DdpimgError
from ddpimg.train.seeding import configure_reproducibility, derive_seed, derive_words


def test_derived_seeds_are_stable_across_versions() -> None:
    # Changing these changes every data order and dropout mask: old runs stop reproducing.
    assert derive_seed(1, "dropout", 3, 1) == 2059806924559486037
    assert derive_seed(1, "order", 1) == 7963547403002796752
    assert derive_words(1, "dropout", 3, 1) == (959172344, 411310251)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((1, "order", 1), (1, "order", 2)),
        ((1, "order", 1), (2, "order", 1)),
        ((1, "order", 1), (1, "dropout", 1)),
        ((1, "dropout", 1, 2), (1, "dropout", 12)),
        ((1, "dropout", 12, 1), (1, "dropout", 1, 21)),
    ],
)
def test_neighbouring_positions_get_different_seeds(
    a: tuple[int, str, int], b: tuple[int, str, int]
) -> None:
    assert derive_seed(*a) != derive_seed(*b)


def test_seeds_fit_a_torch_generator() -> None:
    seeds = [derive_seed(s, "x", i) for s in range(3) for i in range(100)]
    assert all(0 <= seed < 2**63 for seed in seeds)
    torch.Generator().manual_seed(max(seeds))


def test_deterministic_mode_is_switched_both_ways() -> None:
    try:
        configure_reproducibility(3, True, torch.device("cpu"), {})
        assert torch.are_deterministic_algorithms_enabled()
        configure_reproducibility(3, False, torch.device("cpu"), {})
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_seed_fixes_initial_weights() -> None:
    configure_reproducibility(5, False, torch.device("cpu"), {})
    first = torch.nn.Linear(4, 4).weight.detach().clone()
    configure_reproducibility(5, False, torch.device("cpu"), {})
    assert torch.equal(first, torch.nn.Linear(4, 4).weight)


@pytest.mark.parametrize(
    ("env", "found"),
    [
        ({}, "it is unset"),
        ({"CUBLAS_WORKSPACE_CONFIG": ""}, "found ''"),
        ({"CUBLAS_WORKSPACE_CONFIG": ":8:8"}, "found ':8:8'"),
    ],
)
def test_deterministic_cuda_needs_cublas_workspace(env: dict[str, str], found: str) -> None:
    message = (
        rf"--deterministic on CUDA needs CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8; {found}\n"
        r"  hint: export CUBLAS_WORKSPACE_CONFIG=:4096:8"
    )
    with pytest.raises(DdpimgError, match=message):
        configure_reproducibility(1, True, torch.device("cuda", 0), env)
