"""doctor's transport check around the all-reduce: skipped on Gloo, judged on NCCL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddpimg.plan import build_plan
from ddpimg.runtime import nccl_debug

PROFILE = '[site]\nname = "ibsite"\n[fabric]\ntransport = "ib"\nmin_busbw_gbps = 3\n'
TWO_NODES = {
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_ID": "7",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "n[1-2]",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
}


def test_gloo_skips_and_says_so() -> None:
    assert nccl_debug.start("gloo", 0) is None
    plan = build_plan({}, "h", site="local")
    line, problems = nccl_debug.finish(None, "gloo", plan, 1.0, 1.0)
    assert line == "NCCL transport check skipped: backend gloo (NCCL runs only on GPUs)"
    assert problems == []


def test_nccl_log_is_judged_against_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):
        monkeypatch.delenv(name, raising=False)
    profile = tmp_path / "ibsite.toml"
    profile.write_text(PROFILE)
    plan = build_plan(TWO_NODES, "n1", site=str(profile))
    log = nccl_debug.start("nccl", 0)
    assert log is not None
    assert os.environ["NCCL_DEBUG_FILE"] == str(log)
    log.write_text(
        "x NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\nx NCCL INFO Using network Socket\n"
    )
    line, problems = nccl_debug.finish(log, "nccl", plan, 0.5, 1.0)
    assert line.startswith("NCCL network: Socket (transport socket, expected ib)")
    assert problems[0].startswith("NCCL uses Socket, site ibsite expects ib: fell back to sockets")
    assert "(fell back to sockets)" in problems[1]
    assert not log.parent.exists()
