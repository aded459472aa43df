"""``ddpimg cancel RUN``: cancel the job of a run submitted from here (``scancel`` on its
login node); a sweep's whole array. RUN is a name ``ddpimg submit`` printed, or ``latest``."""

from __future__ import annotations

import argparse

from ddpimg import exitcodes
from ddpimg.cli import remote_common
from ddpimg.errors import DdpimgError
from ddpimg.remote import programs, state
from ddpimg.remote.login import remote_said


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a submitted run's name, or latest")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    path, found = remote_common.pick(args.run)
    with remote_common.connect(found.host) as transport:
        answer = transport.run(programs.cancel(found.job_id), "scancel on the login node")
    if answer.status != 0:
        raise DdpimgError(
            f"{found.host}: scancel {found.job_id} failed: {remote_said(answer)}",
            hint=f"ddpimg follow {found.name} shows the job's state",
        )
    state.update(path, found.name, state="CANCELLED")
    what = f"array job {found.job_id} (sweep {found.name}, {len(found.points)} points)"
    if not found.is_sweep:
        what = f"job {found.job_id} (run {found.name})"
    remote_common.say(f"{found.host}: cancelled {what}")
    return exitcodes.OK
