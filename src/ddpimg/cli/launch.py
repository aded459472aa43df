"""The start-up of every command that runs ranks (``train``, ``ddpimg doctor``), written once:

    environment -> plan -> re-exec into the clean environment -> the add-ons checked -> this
    process either starts the ``--nproc-per-node`` local workers or is a rank itself

The plan and its checks are pure (``ddpimg.plan``); what touches the process is the runtime's
(``runtime/reexec.py``, ``runtime/local_workers.py``). This module only reads the shared
options and puts the steps in their order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.addon import sitepath
from ddpimg.cli.launch_options import local_workers, plan_from_args
from ddpimg.runtime.reexec import needs_reexec, reexec_clean

if TYPE_CHECKING:
    import argparse

    from ddpimg.plan import LaunchPlan


@dataclass(frozen=True)
class Launch:
    """Where a command stands after the start-up: in the clean environment, with its plan.
    ``local_workers`` (``--nproc-per-node``) > 0: this process is the node's launcher and
    starts them (``start_local_workers``); 0: it is a rank itself."""

    plan: LaunchPlan
    local_workers: int
    argv: tuple[str, ...]  # the command's arguments (after ``ddpimg``)
    timeout_s: float  # ``--timeout``: the workers' rendezvous

    @property
    def worker_program(self) -> tuple[str, ...]:
        """What each local worker runs by default: this command again (``python -m ddpimg``)
        without ``--nproc-per-node``."""
        return ("-m", "ddpimg", *strip_nproc(self.argv))

    def start_local_workers(
        self, program: Sequence[str] | None = None, preempt_signals: Sequence[str] = ()
    ) -> int:
        """Start the local workers, each running ``python PROGRAM`` (default:
        ``worker_program``); ``preempt_signals`` (names without SIG) are passed on to them.
        Returns the first failing worker's exit status, else 0."""
        from ddpimg.runtime.local_workers import launch_local_workers

        return launch_local_workers(
            self.plan,
            self.local_workers,
            self.worker_program if program is None else program,
            timeout_s=self.timeout_s,
            preempt_signals=preempt_signals,
        )


def prepare_launch(args: argparse.Namespace, argv: Sequence[str]) -> Launch:
    """The plan of this process's environment under the shared options (``--site``,
    ``--keep-env``, ``--local-rank``); when the plan removes or rewrites host variables and
    this is not already the re-executed process, this process is replaced by ``python -m
    ddpimg ARGV`` in the clean environment (and the call does not return). Then
    ``--nproc-per-node`` is checked."""
    env = dict(os.environ)
    plan = plan_from_args(args, env)
    if needs_reexec(plan, env):
        reexec_clean(plan, env, argv)
    # Before any rendezvous: an add-on made for another image stops every rank here, each
    # with one line (ddpimg.addon.mounted). Nothing mounted: one listdir, no import.
    if sitepath.mounted(sitepath.addon_root(env)):
        from ddpimg.addon.mounted import check_addons

        check_addons(env)
    return Launch(plan, local_workers(args), tuple(argv), args.timeout)


def strip_nproc(argv: Sequence[str]) -> list[str]:
    """The command line without ``--nproc-per-node N``: what each local worker runs."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--script":
            out.extend(argv[i:])
            break
        if arg == "--nproc-per-node":
            skip = True
            continue
        if arg.startswith("--nproc-per-node="):
            continue
        out.append(arg)
    return out
