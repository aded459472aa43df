"""The shellcheck directives a rendered script carries, each with its reason on the line.

The golden scripts are shellcheck-clean (``tests/jobs/test_golden.py``); shellcheck cannot see
that a function named by ``trap`` runs, nor that single quotes are meant to keep ``$`` for
another shell (each task's ``bash -c``), so those two findings are turned off where, and only
where, they are intended. A directive applies to the command that follows it.
"""

from __future__ import annotations

TRAP_HANDLER = "# shellcheck disable=SC2317  # runs on a signal, by the trap below"
SINGLE_QUOTED = "# shellcheck disable=SC2016  # the quoted words are for the shell of each task"
