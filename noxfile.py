"""Every developer and CI action on ddpimg is a session here; ``nox -l`` is the menu.

    nox                        lint and unit tests (the default sessions)
    nox -s integration         tests under real launchers: a private Slurm cluster, Open MPI,
                               torchrun, DeepSpeed (installs the Debian packages when root)
    nox -s demo                the main job: 2 local CPU workers, synthetic data, 1 epoch
    nox -s tests -- -k slurm   arguments after ``--`` go to pytest (or to ``train`` for demo)

What gets installed is written once, in ``requirements/train.txt`` (the training stack) and
``requirements/dev.txt`` (test and lint tools), and every session installs both: even lint,
because mypy judges the trainers against torch's own types, and without torch installed it
reports different errors than in a developer's environment. Virtual environments are reused
between runs; nox gives each session its own (~5.5 GB each, mostly torch's CUDA wheels).
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

DEV_REQUIREMENTS = "requirements/dev.txt"
TRAIN_REQUIREMENTS = "requirements/train.txt"
DEMO_ARGS = ["--nproc-per-node", "2", "--data", "synthetic", "--epochs", "1", "--out", "runs/demo"]


def _install(session: nox.Session) -> None:
    """Install ddpimg (editable), the training stack and the dev tools."""
    session.install("-e", ".", "-r", TRAIN_REQUIREMENTS, "-r", DEV_REQUIREMENTS)


def _pytest(session: nox.Session, *args: str, engines: bool = False) -> None:
    """Run pytest with ``args`` then the session's positional arguments.

    Any non-zero exit fails the session, 5 ("no tests collected") included: a selection
    that matches nothing must not pass as green.
    """
    _install(session)
    if engines:
        if os.geteuid() == 0:
            session.run("bash", "tests/engines/install.sh", external=True)
        else:
            session.log("not root: not installing engine packages (tests/engines/install.sh)")
    session.run("pytest", *args, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Check style and types: ruff check, ruff format --check, mypy (strict)."""
    _install(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the unit tests (no launcher started, GPU tests deselected)."""
    _pytest(session, "tests", "--ignore=tests/integration", "-m", "not gpu")


@nox.session(default=False)
def integration(session: nox.Session) -> None:
    """Run the integration tests under real launchers (Slurm, Open MPI, torchrun)."""
    _pytest(session, "tests/integration", "-p", "no:cacheprovider", engines=True)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """Run the main job: train on 2 local CPU workers, synthetic data, 1 epoch."""
    _install(session)
    session.run("train", *(session.posargs or DEMO_ARGS))
