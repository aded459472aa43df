"""Pieces shared by the bundled trainers' in-memory datasets."""

from __future__ import annotations

from ddpimg.errors import DataError


def sample_count(available: int, requested: int | None, flag: str, what: str, source: str) -> int:
    """How many samples to use: ``requested`` (``--train-samples`` / ``--eval-samples``) or
    all ``available`` ones; asking for more than there are is an error naming ``source``."""
    if requested is None:
        return available
    if requested > available:
        raise DataError(
            f"{flag} {requested} is more than the {available} {what} samples in {source}",
            hint=f"give at most {available}, or leave {flag} out to use them all",
        )
    return requested
