"""Errors raised inside libraries that the user acts on: told as ddpimg's own."""

from __future__ import annotations

import pytest
from deepspeed.runtime.zero.utils import ZeRORuntimeException

from ddpimg.errors import DdpimgError
from ddpimg.script.library_errors import explained

# DeepSpeed 0.19.8's words (runtime/engine.py, _load_zero_checkpoint).
REFUSED = (
    "The checkpoint being loaded used a DP world size of 4 but the current world size is 2. "
    "Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not "
    "currently supported."
)


def test_deepspeed_refusing_another_world_size_names_both() -> None:
    err = explained(ZeRORuntimeException(REFUSED))
    assert isinstance(err, DdpimgError)
    assert err.message == (
        "the DeepSpeed checkpoint this script resumes was written by 4 ranks and this run has "
        "2: DeepSpeed does not repartition a ZeRO checkpoint's optimizer state on load"
    )
    assert err.hint is not None
    assert err.hint.startswith("resume on 4 ranks, as many as wrote it; or convert")
    assert "ds_to_universal" in err.hint


@pytest.mark.parametrize(
    "err",
    [
        ZeRORuntimeException("You are using ZeRO-Offload with a client provided optimizer"),
        RuntimeError(REFUSED),  # the words, but not DeepSpeed's exception
        ValueError("anything else"),
    ],
)
def test_anything_else_is_left_as_it_is(err: BaseException) -> None:
    assert explained(err) is None
