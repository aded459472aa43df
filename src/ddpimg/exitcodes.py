"""Exit statuses of ``train`` and ``ddpimg``, documented in docs/checkpoints-and-failures.md
("Exit statuses").

The only place that maps an outcome to a number: the CLI's exit status and the one rank 0
records in manifest.json both come from ``for_error``.
"""

from __future__ import annotations

from ddpimg.errors import DdpimgError, RankLostError, RendezvousError, StartStopped, report
from ddpimg.optional import missing_package

OK = 0
TRAINING_FAILED = 1  # an exception during training, e.g. a peer rank died
USAGE = 2  # bad flags, inconsistent launcher variables, bad profile, missing data
RENDEZVOUS_FAILED = 3  # ranks missing at the join deadline, master unreachable
CHECK_FAILED = 4  # `ddpimg doctor` found a problem
# A rank stopped reporting (stopped, hung, died, node gone) or stayed behind during
# training; every survivor names it. The job can be requeued (on the remaining nodes) and
# resumed from a checkpoint. A rank that raised an error of its own is no lost rank: the
# survivors that name it exit TRAINING_FAILED, as it does.
RANK_LOST = 5
PREEMPTED = 75  # EX_TEMPFAIL: stopped by SIGUSR2/SIGTERM after a checkpoint; requeue and resume
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
OUTPUT_CLOSED = 141  # 128 + SIGPIPE: the reader of stdout went away (`ddpimg runs | head`)


def for_error(err: BaseException) -> int:
    """The exit status a run that ended with ``err`` reports."""
    if isinstance(err, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(err, RendezvousError):
        return RENDEZVOUS_FAILED
    if isinstance(err, RankLostError):
        return TRAINING_FAILED if err.raised else RANK_LOST
    if isinstance(err, StartStopped):
        return PREEMPTED
    if isinstance(err, DdpimgError) or missing_package(err) is not None:
        return USAGE
    if isinstance(err, SystemExit):
        return err.code if isinstance(err.code, int) else TRAINING_FAILED
    return TRAINING_FAILED


def tell(err: DdpimgError) -> int:
    """Print ``err`` the way its kind is told (``ddpimg: error: ...``; a start stopped by
    a preemption signal is no error: one line, from rank 0) and return its exit status."""
    status = for_error(err)
    if isinstance(err, StartStopped):
        err.announce(status)
    else:
        report(err)
    return status
