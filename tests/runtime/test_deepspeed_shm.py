"""DeepSpeed's CPU all-reduce segments: which are this rank's, and their release."""

from __future__ import annotations

import os
from pathlib import Path

from ddpimg.runtime.deepspeed_shm import PREFIX, own_buffers, release_buffers


def maps_line(path: str) -> str:
    return f"7f00c0000000-7f00c4200000 rw-s 00000000 00:1a 4242                       {path}"


def test_own_buffers_are_the_mapped_segments_named_with_the_rank() -> None:
    mine, theirs = f"{PREFIX}0_127.0.0.1_29500_1", f"{PREFIX}0_127.0.0.1_29500_0"
    maps = "\n".join([
        "55d0c8a00000-55d0c8a01000 r--p 00000000 fd:01 131 /usr/bin/python3.11",
        maps_line(theirs),
        maps_line(mine),
        maps_line(mine),  # mapped twice: listed once
        maps_line(f"{PREFIX}0_127.0.0.1_29500_11"),  # rank 11, not 1
        maps_line(f"{mine} (deleted)"),  # already unlinked
        "7f00d0000000-7f00d0021000 rw-p 00000000 00:00 0",  # anonymous: no path
    ])  # fmt: skip
    assert own_buffers(maps, 1) == [Path(mine)]
    assert own_buffers(maps, 0) == [Path(theirs)]
    assert own_buffers(maps, 2) == []


def test_release_unlinks_this_ranks_segment_and_no_other(tmp_path: Path) -> None:
    tag = f"ddpimg-test-{os.getpid()}"
    mine, theirs = Path(f"{PREFIX}0_{tag}_1_1"), Path(f"{PREFIX}0_{tag}_1_0")
    maps = tmp_path / "maps"
    maps.write_text("\n".join(maps_line(str(path)) for path in (mine, theirs)) + "\n")
    try:
        mine.write_bytes(b"x")
        theirs.write_bytes(b"x")
        assert release_buffers(1, maps) == [mine]
        assert not mine.exists()
        assert theirs.exists()
        # Gone already (a second call, or another process): nothing to do, no error.
        assert release_buffers(1, maps) == []
    finally:
        mine.unlink(missing_ok=True)
        theirs.unlink(missing_ok=True)
