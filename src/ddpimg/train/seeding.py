"""Seeds derived from the run seed and a position (epoch, step, layer, data chunk), and the
``--deterministic`` switch.

Topology invariance needs every random draw to be tied to the global position in training,
never to a rank's own RNG stream, so every generator in the trainers is seeded by
``derive_seed(seed, <purpose>, <position>...)`` and created where it is used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    import torch

# cuBLAS is only reproducible with a fixed workspace; torch refuses deterministic mode on CUDA
# without one of these values.
CUBLAS_WORKSPACE_VALUES = (":4096:8", ":16:8")


def _digest(seed: int, purpose: str, position: tuple[int, ...], size: int) -> bytes:
    text = ":".join([str(seed), purpose, *(str(part) for part in position)])
    return hashlib.blake2b(text.encode(), digest_size=size).digest()


def derive_seed(seed: int, purpose: str, *position: int) -> int:
    """A 63-bit seed for ``torch.Generator.manual_seed`` from the run seed, what the draw is
    for and where it happens. Hashing (not arithmetic) keeps neighbouring positions apart."""
    return int.from_bytes(_digest(seed, purpose, position, 8), "big") >> 1


def derive_words(seed: int, purpose: str, *position: int) -> tuple[int, int]:
    """Two 32-bit keys from the run seed, purpose and position, as ``derive_seed`` makes one
    seed: for the counter-based draws hashed on tensors (``ddpimg.train.dropout``)."""
    digest = _digest(seed, purpose, position, 8)
    return int.from_bytes(digest[:4], "big"), int.from_bytes(digest[4:], "big")


def configure_reproducibility(
    seed: int, deterministic: bool, device: torch.device, env: Mapping[str, str]
) -> None:
    """Seed torch's global RNG (it only draws the initial weights, identically on every rank
    and topology) and switch deterministic kernels on or off; both ways are set explicitly
    so a run never inherits the previous run's mode in the same process. ``env`` is the
    process environment (read only)."""
    import torch

    if deterministic and device.type == "cuda":
        value = env.get("CUBLAS_WORKSPACE_CONFIG")
        if value not in CUBLAS_WORKSPACE_VALUES:
            found = "it is unset" if value is None else f"found {value!r}"
            raise DdpimgError(
                f"--deterministic on CUDA needs CUBLAS_WORKSPACE_CONFIG="
                f"{' or '.join(CUBLAS_WORKSPACE_VALUES)}; {found}",
                hint="export CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting the job",
            )
    torch.manual_seed(seed)
    # torch's setter imports torch._inductor (with Dynamo: about 1 s on two cores) to mirror
    # the flag in Inductor's config. A run with the mode already off has nothing to switch;
    # its optimizer imports Dynamo anyway, but later, where startup's phases put the model.
    if deterministic or torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    if deterministic:
        torch.backends.cudnn.benchmark = False
