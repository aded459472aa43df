"""``ddpimg follow RUN``: a run submitted from here (``ddpimg submit``), followed to its end
over ssh: PENDING with Slurm's reason and expected start, RUNNING on which nodes, REQUEUED
after a preemption, a live line of step, loss, samples/s and time left, then COMPLETED or
FAILED with the run's own verdict (and the log's last lines on a failure).

RUN is a name ``ddpimg submit`` printed (``ddpimg runs`` lists them) or ``latest``. A dropped
connection is opened again; Ctrl-C stops following, never the job. Exit status: 0 when the
job completed, 1 when it ended otherwise, 130 when stopped by Ctrl-C.
"""

from __future__ import annotations

import argparse

from ddpimg.cli import remote_common
from ddpimg.remote.follow import DEFAULT_GIVE_UP_S, DEFAULT_INTERVAL_S


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run", metavar="RUN", help="a submitted run's name, or latest")
    parser.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
        help=remote_common.INTERVAL_HELP,
    )  # fmt: skip
    parser.add_argument(
        "--give-up", type=float, default=DEFAULT_GIVE_UP_S, metavar="SECONDS",
        help=remote_common.GIVE_UP_HELP,
    )  # fmt: skip


def run(args: argparse.Namespace, argv: list[str]) -> int:
    remote_common.check_positive(args.interval, "--interval")
    remote_common.check_positive(args.give_up, "--give-up")
    path, found = remote_common.pick(args.run)
    with remote_common.connect(found.host) as transport:
        return remote_common.follow(
            transport,
            found,
            path,
            reconnect=transport.reconnect,
            interval_s=args.interval,
            give_up_s=args.give_up,
        )
