"""What the laptop's commands share (``submit``, ``follow``, ``fetch``, ``cancel``): the
state file, the run a name stands for, the connection, and following a run to its end."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.remote import state
from ddpimg.remote.follow import DEFAULT_GIVE_UP_S, DEFAULT_INTERVAL_S, Follower, Screen
from ddpimg.remote.ssh import SshTransport, interactive
from ddpimg.remote.state import RemoteRun
from ddpimg.remote.sweep_follow import SweepFollower, TableScreen
from ddpimg.remote.transport import Transport

INTERVAL_HELP = f"seconds between two polls of the job (default {DEFAULT_INTERVAL_S:g})"
GIVE_UP_HELP = (
    "give up after this many seconds without a connection, or without an answer from Slurm "
    f"(default {DEFAULT_GIVE_UP_S:g})"
)


def state_file(env: Mapping[str, str] = os.environ) -> Path:
    return state.state_path(env)


def pick(text: str, env: Mapping[str, str] = os.environ) -> tuple[Path, RemoteRun]:
    """The state file and the run ``text`` names in it (a name, or ``latest``)."""
    path = state_file(env)
    return path, state.find(state.load(path), text)


def connect(host: str, env: Mapping[str, str] = os.environ) -> SshTransport:
    """An open connection to ``host`` (the caller closes it: ``with``)."""
    transport = SshTransport(host, env, interactive=interactive())
    transport.connect()
    return transport


def say(words: str) -> None:
    print(f"ddpimg: {words}", file=sys.stderr, flush=True)


def follow(
    transport: Transport,
    run: RemoteRun,
    path: Path,
    *,
    reconnect: Callable[[], None],
    interval_s: float = DEFAULT_INTERVAL_S,
    give_up_s: float = DEFAULT_GIVE_UP_S,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Follow ``run`` to its end; Ctrl-C detaches (the job goes on). The exit status: 0
    when the job completed, 1 when it ended otherwise, 130 when detached."""
    interactive = sys.stdout.isatty()
    screen = (
        TableScreen(sys.stdout, interactive) if run.is_sweep else Screen(sys.stdout, interactive)
    )
    what = (
        f"array job {run.job_id}, {len(run.points)} points" if run.is_sweep else f"job {run.job_id}"
    )
    say(f"following {run.name} ({what} on {run.host}); Ctrl-C stops following, "
        "not the job")  # fmt: skip
    kind = SweepFollower if run.is_sweep else Follower
    follower = kind(
        transport,
        run,
        screen,
        reconnect=reconnect,
        interval_s=interval_s,
        give_up_s=give_up_s,
        sleep=sleep,
    )
    try:
        ended = follower.follow()
    except KeyboardInterrupt:
        screen.close()
        say(
            f"stopped following {run.name}; job {run.job_id} goes on (ddpimg follow "
            f"{run.name} again, ddpimg cancel {run.name} to end it)"
        )
        return exitcodes.INTERRUPTED
    state.update(
        path, run.name, state=ended.state, status=ended.status, steps=ended.steps, loss=ended.loss
    )
    if ended.ok:
        say(f"next: ddpimg fetch {run.name}")
        return exitcodes.OK
    return exitcodes.TRAINING_FAILED


def check_positive(value: float, flag: str) -> None:
    from ddpimg.errors import DdpimgError

    if not value > 0:
        raise DdpimgError(f"{flag} {value:g}: must be positive", hint=f"{flag} 5")
