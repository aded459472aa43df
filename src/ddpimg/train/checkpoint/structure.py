"""A loaded checkpoint file compared with what this process would write in its place, before
any of it is used.

``torch.load(weights_only=True)`` guarantees data, not the right data: a ``loop.pt`` whose
scheduler state is a list, an RNG file whose Python state is a string, or a ``model.pt``
without its ``model`` would fail deep inside torch, random or a scheduler with a traceback,
or worse, be taken. ``mismatch`` says where a loaded structure differs from a template of
the same kind (``capture_rng()``, the scheduler's own ``state_dict()``): the same keys, the
same types, lists and tuples of the same length, tensors of the same dtype and shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError


def mismatch(found: Any, expected: Any, where: str = "") -> str | None:
    """Where ``found`` differs from ``expected`` in structure (``"numpy[0]: a str, expected
    a list"``), or None when it has the same. Numbers: an int passes for a float."""
    import torch

    here = where or "the file"
    if isinstance(expected, torch.Tensor):
        if not isinstance(found, torch.Tensor):
            return f"{here}: {_kind(found)}, expected a tensor"
        if found.dtype != expected.dtype or found.shape != expected.shape:
            return (
                f"{here}: a {found.dtype} tensor of shape {tuple(found.shape)}, expected "
                f"{expected.dtype} of shape {tuple(expected.shape)}"
            )
        return None
    if isinstance(expected, Mapping):
        if not isinstance(found, Mapping):
            return f"{here}: {_kind(found)}, expected a dict"
        if set(found) != set(expected):
            extra, missing = (
                sorted(map(str, set(found) - set(expected))),
                sorted(map(str, set(expected) - set(found))),
            )
            return f"{here}: keys differ (unknown: {extra[:5]}, missing: {missing[:5]})"
        for key, value in expected.items():
            problem = mismatch(found[key], value, f"{where}.{key}" if where else str(key))
            if problem:
                return problem
        return None
    if isinstance(expected, Sequence) and not isinstance(expected, str | bytes):
        if not isinstance(found, list | tuple) or len(found) != len(expected):
            return f"{here}: {_kind(found)}, expected a sequence of {len(expected)}"
        for index, (item, template) in enumerate(zip(found, expected, strict=True)):
            problem = mismatch(item, template, f"{where}[{index}]")
            if problem:
                return problem
        return None
    return _leaf(found, expected, here)


def _leaf(found: Any, expected: Any, here: str) -> str | None:
    if expected is None:
        return None if found is None or isinstance(found, float) else f"{here}: {_kind(found)}"
    if isinstance(expected, bool) or not isinstance(expected, int | float):
        if type(found) is type(expected):
            return None
        return f"{here}: {_kind(found)}, expected {_kind(expected)}"
    number = isinstance(found, int | float) and not isinstance(found, bool)
    if not number or (isinstance(expected, int) and not isinstance(found, int)):
        return f"{here}: {_kind(found)}, expected {_kind(expected)}"
    return None


def unusable(path: Path, problem: str) -> DdpimgError:
    """The error of a checkpoint file that loads but does not hold what ddpimg writes."""
    return DdpimgError(
        f"checkpoint file {path} does not hold what ddpimg writes there ({problem})",
        hint="it was written by another program or version, or edited; resume from another "
        "checkpoint (--resume PATH) or start over (--resume none)",
    )


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}"
