"""Start the training interpreter again without the host's variables.

LD_LIBRARY_PATH, LD_PRELOAD, PYTHONPATH and PYTHONHOME act when a process starts: removing
them from ``os.environ`` of a running interpreter is too late (the host's paths are already on
``sys.path``, the host's libraries already loadable). So the entrypoint, having imported only
ddpimg's pure modules, execs itself once with the cleaned environment. A marker variable stops
a second re-exec; the names removed travel in ``DDPIMG_REMOVED`` so the child still reports
them (``ddpimg env``, ``manifest.json``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from ddpimg.plan import LaunchPlan

REEXEC_MARK = "DDPIMG_REEXEC"
REMOVED_VAR = "DDPIMG_REMOVED"


def needs_reexec(plan: LaunchPlan, env: Mapping[str, str]) -> bool:
    return bool(plan.clean.removed or plan.clean.rewritten) and env.get(REEXEC_MARK) != "1"


def reexec_clean(plan: LaunchPlan, env: Mapping[str, str], argv: Sequence[str]) -> NoReturn:
    """Replace this process by ``python -m ddpimg ARGV`` in the cleaned environment."""
    child = plan.clean.apply(env)
    child[REEXEC_MARK] = "1"
    child[REMOVED_VAR] = ",".join(plan.removed)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "ddpimg", *argv], child)
