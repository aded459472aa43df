"""Work rank 0 does for all: its value, or its error, on every rank."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ddpimg.errors import DataError
from ddpimg.train.coordination import decided_on_main
from tests.train.contexts import single_process
from tests.train.ranks import run_ranks


def _decide(rank: int, out: Path) -> None:
    ctx = replace(single_process(world_size=2), rank=rank)
    found: dict[str, object] = {"value": decided_on_main(ctx, lambda: f"decided by {rank}")}

    def refuse() -> str:
        raise DataError(f"refused by rank {rank}", hint="a hint")

    try:
        decided_on_main(ctx, refuse)
    except DataError as err:
        found["error"] = str(err)

    def crash() -> str:
        raise PermissionError(13, "Permission denied", f"runs-{rank}")

    try:
        decided_on_main(ctx, crash)
    except (PermissionError, RuntimeError) as err:
        found["crash"] = f"{type(err).__name__}: {err}"
    (out / f"rank-{rank}.json").write_text(json.dumps(found))


def test_rank_0s_value_and_error_reach_every_rank(tmp_path: Path) -> None:
    """A DdpimgError is every rank's; any other error is raised as itself on rank 0 and
    named on the others, which then end instead of waiting for a decision."""
    run_ranks(_decide, 2, tmp_path)
    found = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    decided = {"value": "decided by 0", "error": "refused by rank 0\n  hint: a hint"}
    crash = "PermissionError: [Errno 13] Permission denied: 'runs-0'"
    assert found == [
        decided | {"crash": crash},
        decided | {"crash": f"RuntimeError: rank 0 failed while deciding for every rank: {crash}"},
    ]
