"""The shellcheck directives a rendered script carries, each with its reason on the line.

The golden scripts are shellcheck-clean (``tests/jobs/test_golden.py``); shellcheck cannot see
that single quotes are meant to keep ``$`` for another shell (each task's ``bash -c``), so
that finding is turned off where, and only where, it is intended. A directive applies to the
command that follows it. (The trap handlers' directive is written in templates/job-body.sh.)
"""

from __future__ import annotations

SINGLE_QUOTED = "# shellcheck disable=SC2016  # the quoted words are for the shell of each task"
