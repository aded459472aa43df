"""The launchers' own words about a killed rank, read back (ddpimg.endings.reports), from
lines these launchers printed here (torch 2.14's torchrun, Slurm 22.05's srun, Open MPI
4.1's mpirun)."""

from __future__ import annotations

import signal

import pytest

from ddpimg.endings.reports import KilledRank, killed_ranks

TORCHRUN_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
t4.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-07_08:13:44
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 75 (pid: 10012)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_08:13:44
  host      : node7
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 10013)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 10013
============================================================
"""
AGENT_LINE = (
    "E1207 08:10:35.107000 6644 torch/distributed/elastic/multiprocessing/api.py:1002] "
    "failed (exitcode: -9) local_rank: 1 (pid: 6666) of binary: /usr/bin/python"
)


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("srun: error: vm: task 1: Killed\nsrun: Force Terminated StepId=9001.0\n",
         [KilledRank("srun", 1, signal.SIGKILL, "vm")]),
        ("srun: error: node2: tasks 2-3: Segmentation fault\n",
         [KilledRank("srun", 2, signal.SIGSEGV, "node2"),
          KilledRank("srun", 3, signal.SIGSEGV, "node2")]),
        ("srun: error: vm: task 0: Exited with exit code 5\n", []),
        ("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
         [KilledRank("mpirun", 1, 9, "vm", None)]),
        ("mpirun noticed that process rank 2 with PID 77 on node n3 exited on signal 7 (Bus "
         "error).", [KilledRank("mpirun", 2, 7, "n3", 77)]),
        (TORCHRUN_SUMMARY, [KilledRank("torchrun", 3, 9, "node7", 10013)]),
        # The agent's line names a local rank: used only without the summary.
        (AGENT_LINE, [KilledRank("torchrun", 1, 9, "", 6666)]),
        (AGENT_LINE + "\n" + TORCHRUN_SUMMARY, [KilledRank("torchrun", 3, 9, "node7", 10013)]),
        ("train epoch 1 step 3/6 loss 5.1584\nall good\n", []),
    ],
)  # fmt: skip
def test_launcher_reports(log: str, expected: list[KilledRank]) -> None:
    assert killed_ranks(log) == expected


def test_a_report_becomes_ddpimgs_verdict() -> None:
    (report,) = killed_ranks("srun: error: node2: task 1: Killed\n")
    message, hint = report.verdict()
    assert message == (
        "rank 1 (host node2) was killed by SIGKILL: most often the out-of-memory killer (the "
        "kernel's, or Slurm's for a step over its memory), else a stall watch's sentinel (its "
        "line above), scancel or the time limit"
    )
    assert "dmesg" in hint


def test_hostile_lines_are_bounded_and_ignored() -> None:
    noise = "srun: error: \x1b[31mvm: task 1: Killed\n" + "x" * 100_000 + "\n"
    assert killed_ranks(noise) == []
    assert killed_ranks("srun: error: vm: tasks 0-9999999: Killed\n")[-1].rank == 4096
