"""Fixtures for tests that run real launchers: a private Slurm cluster and clean environments.

``run_env`` is the base environment for every subprocess: this process's variables minus
anything an outer launcher set (``SLURM_*``, ``OMPI_*``, ``PMI*``), so that running the
tests inside an allocation does not leak a foreign topology into them, plus what running
Open MPI as root on a small machine needs. ``slurm_env`` adds the private cluster's
``SLURM_CONF``. Both are session-scoped: derive from them (``run_env | {...}``), do not
mutate them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.engines import opcache
from tests.engines.availability import missing_reason, require_engines, verdict
from tests.engines.slurm import LocalSlurm
from tests.integration import schedule
from tests.integration.runs import (
    PYTHON,
    QUICK_TRAIN,
    command,
    module_cwd,
    run,
    scratch_directories,
    summary,
    test_cwd,
    train_losses,
)

# Autouse: every launcher starts in a directory of its own (tests.integration.runs).
__all__ = ["module_cwd", "scratch_directories", "test_cwd"]

OUTSIDE_PREFIXES = ("SLURM_", "OMPI_", "PMI")
RUN_DEFAULTS = {
    # The test machines run as root, which Open MPI refuses unless told twice.
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    # Tests start up to 4 ranks on 2 cores.
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PYTHONUNBUFFERED": "1",
}


@pytest.fixture(scope="session")
def run_env() -> dict[str, str]:
    """Base subprocess environment; the test interpreter's bin directory comes first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OUTSIDE_PREFIXES)}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", os.defpath)])
    return env | RUN_DEFAULTS


# ddpimg derives a Slurm job's port from its job ID, 16 ports a job in the default
# 10,000-port range (ddpimg.topology.port): 625 job IDs before the ports repeat.
JOB_IDS_BEFORE_PORTS_REPEAT = 625


def first_job_id(env: Mapping[str, str]) -> int:
    """The first job ID of this test process's private cluster. Under pytest-xdist every
    worker runs a cluster of its own, and under all-tests each lane runs workers of its own
    (tests/integration/schedule.py): jobs of up to four clusters run at once."""
    workers = int(env.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(env.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    lanes = 2 if env.get(schedule.CLAIMS_VARIABLE) else 1
    lane = 1 if env.get(schedule.FROM_THE_END_VARIABLE) else 0
    return schedule.first_job_id(worker, workers, lane, lanes, JOB_IDS_BEFORE_PORTS_REPEAT)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """A private one-node Slurm cluster for the whole session (of this worker, under
    pytest-xdist), stopped at its end."""
    decision = verdict(["slurm"], missing_reason, require_engines(os.environ))
    if decision.action == "skip":
        pytest.skip(decision.reason)
    if decision.action == "fail":
        pytest.fail(decision.reason, pytrace=False)
    settings = {"FirstJobId": first_job_id(os.environ)}
    with LocalSlurm(tmp_path_factory.mktemp("slurm"), settings=settings) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def slurm_env(run_env: dict[str, str], slurm_cluster: LocalSlurm) -> dict[str, str]:
    """``run_env`` with the private cluster's variables: srun/sbatch reach that cluster."""
    return run_env | slurm_cluster.env


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> list[float]:
    """One process, no launcher: the trajectory every launcher must reproduce."""
    out = tmp_path_factory.mktemp("single")
    run([command("train"), *QUICK_TRAIN, "--out", str(out)], run_env)
    losses = train_losses(out)
    assert len(losses) == 8
    assert summary(out)["world_size"] == 1
    return losses


@pytest.fixture(scope="session")
def deepspeed_env(run_env: dict[str, str]) -> dict[str, str]:
    """``run_env`` with DeepSpeed's op cache (tests/engines/opcache.py) built, so that no
    test's timeout includes the compiler's minutes."""
    env = run_env | {opcache.VARIABLE: os.environ.get(opcache.VARIABLE, str(opcache.op_cache()))}
    build = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
    run([PYTHON, "-c", build], env, timeout=900)
    return env


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long files first (tests/integration/schedule.py; the integration session turns
    pytest-xdist's own reordering off); in all-tests' second lane, from the other end."""
    items[:] = schedule.longest_first(items, lambda item: item.path)
    if os.environ.get(schedule.FROM_THE_END_VARIABLE):
        items[:] = schedule.from_the_end(items, lambda item: item.path)


# Each test file's claim under all-tests, made at its first test in this process: None when
# this process runs the file, else who does.
_CLAIMED: dict[Path, str | None] = {}


# tryfirst: before pytest's own skipping hook (also tryfirst, registered earlier) reads the marks.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under all-tests, run a file only if this lane reached it first (schedule.claim); the
    other lane's files are skipped before any fixture of theirs is made."""
    claims = os.environ.get(schedule.CLAIMS_VARIABLE)
    if not claims:
        return
    if item.path not in _CLAIMED:
        lane = "second" if os.environ.get(schedule.FROM_THE_END_VARIABLE) else "first"
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        owner = f"all-tests' {lane} lane ({worker}, pid {os.getpid()})"
        _CLAIMED[item.path] = schedule.claim(Path(claims), item.path.name, owner)
    taken_by = _CLAIMED[item.path]
    if taken_by is not None:
        # A mark, not pytest.skip here: the report then names the test, not this hook.
        item.add_marker(pytest.mark.skip(reason=f"run by {taken_by}"))
