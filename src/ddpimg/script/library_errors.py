"""Errors a library raises inside a user's script that are the user's to act on, told as
ddpimg's own (one line, exit status 2, a hint) instead of a traceback from the library.

The one known so far: DeepSpeed 0.19.8 refuses a ZeRO checkpoint written by another number
of ranks (``engine._load_zero_checkpoint``: "The checkpoint being loaded used a DP world size
of 2 but the current world size is 1. Automatic adjustment of ZeRO's optimizer state
partitioning with a new world size is not currently supported."), which a Hugging Face
Trainer run continued on a cluster of another shape meets in ``trainer.train(
resume_from_checkpoint=...)``. The Trainer loads the checkpoint before any callback runs,
so nothing can convert it there; the error says what can.
"""

from __future__ import annotations

import re

from ddpimg.errors import DdpimgError

_DEEPSPEED_WORLD_SIZE = re.compile(
    r"The checkpoint being loaded used a DP world size of (\d+) but the current world size "
    r"is (\d+)"
)


def explained(err: BaseException) -> DdpimgError | None:
    """The user error ``err`` stands for, when ddpimg knows it; None otherwise."""
    if type(err).__name__ != "ZeRORuntimeException":
        return None
    found = _DEEPSPEED_WORLD_SIZE.search(str(err))
    if found is None:
        return None
    saved, current = found.groups()
    return DdpimgError(
        f"the DeepSpeed checkpoint this script resumes was written by {saved} ranks and this "
        f"run has {current}: DeepSpeed does not repartition a ZeRO checkpoint's optimizer state "
        "on load",
        hint=f"resume on {saved} ranks, as many as wrote it; or convert the checkpoint with "
        "DeepSpeed's `python -m deepspeed.checkpoint.ds_to_universal --input_folder "
        "CHECKPOINT/global_stepN --output_folder CHECKPOINT/global_stepN_universal` (Adam's "
        'state only) and resume with "checkpoint": {"load_universal": true} in the DeepSpeed '
        "config; train's bundled trainers continue on any world size (docs/checkpoints-and-"
        "failures.md)",
    )
