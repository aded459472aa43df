"""Fixtures for the multi-node tests: one namespace cluster (tests/engines/netns.py) of
three nodes for the whole session, the environments that reach it, and the one-process
reference run every multi-node trajectory is compared with.

Three nodes, so that "3 must work" is exercised (``ddpimg doctor`` runs on all three) while
most jobs use two of them. ``run_env`` is the integration tests' base environment, reused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.availability import missing_reason, require_engines, verdict
from tests.engines.netns import NamespaceCluster
from tests.engines.slurm import DeclaredHardware
from tests.integration.conftest import deepspeed_env, run_env
from tests.integration.runs import (
    QUICK_TRAIN,
    command,
    module_cwd,
    run,
    scratch_directories,
    test_cwd,
    train_losses,
)

__all__ = ["deepspeed_env", "module_cwd", "run_env", "scratch_directories", "test_cwd"]

NUM_NODES = 3
PROFILES = Path(__file__).parent / "profiles"
# Master by short host name, collectives on ib0: what fixes CSC's blocked Ethernet.
SHORT_NAME_PROFILE = PROFILES / "nscluster.toml"
# Master by "{node}i", collectives on ib0: what fixes JSC's naming.
SUFFIX_PROFILE = PROFILES / "nscluster-suffix.toml"
# Master by "{node}i", collectives left to Gloo's choice (eth0, dropped).
NO_INTERFACES_PROFILE = PROFILES / "nscluster-suffix-no-interfaces.toml"
# What the cluster's slurm.conf declares beyond CPUs, as a GPU site's does: two GPUs of type
# a100 a node and a second partition; ddpimg site probe must read them
# (tests/multinode/test_site_probe.py). slurmd drains a node whose GPU GRES has no device file,
# so two character devices stand in (no test requests the GRES).
DECLARED = DeclaredHardware(
    gres="gpu:a100:2",
    gres_conf="AutoDetect=off\n"
    "Name=gpu Type=a100 File=/dev/null\n"
    "Name=gpu Type=a100 File=/dev/zero",
    partitions=(("long", "MaxTime=2-00:00:00 MaxNodes=2"),),
)
# --timeout for runs that must work (4 ranks import torch on 2 shared cores before they
# meet) and for runs that must fail (short: the failure has to come within it).
TIMEOUT_S = 90
FAIL_TIMEOUT_S = 15
# Bound on a whole srun / mpirun that is expected to work (start-up included).
RUN_LIMIT_S = 300


@pytest.fixture(scope="session")
def cluster() -> Iterator[NamespaceCluster]:
    """The namespace cluster for the whole session, removed at its end."""
    decision = verdict(["multinode"], missing_reason, require_engines(os.environ))
    if decision.action == "skip":
        pytest.skip(decision.reason)
    if decision.action == "fail":
        pytest.fail(decision.reason, pytrace=False)
    # Not under pytest's temporary directory, which pytest keeps private to root (and makes
    # private again whenever a session starts): the jobs of the login node's unprivileged user
    # (tests/engines/sshd.py) run from slurmd's spool directory here.
    workdir = Path(tempfile.mkdtemp(prefix="ddpimg-netns-"))
    workdir.chmod(0o711)
    try:
        with NamespaceCluster(workdir, NUM_NODES, DECLARED) as built:
            yield built
        left = built.leftovers()
        assert not left, f"the namespace cluster left behind: {', '.join(left)}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster_env(run_env: dict[str, str], cluster: NamespaceCluster) -> dict[str, str]:
    """``run_env`` plus the cluster's Slurm variables: srun, run here on the "login node"
    (the root namespace), starts tasks on the namespace nodes."""
    return run_env | cluster.env


@pytest.fixture
def suffix_naming(cluster: NamespaceCluster) -> Iterator[None]:
    """JSC naming for one test: ``nodeN`` resolves to the blocked eth0, ``nodeNi`` to ib0."""
    with cluster.short_names("eth0"):
        yield


@pytest.fixture(scope="session")
def reference_losses(
    tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]
) -> list[float]:
    """Per-step losses of QUICK_TRAIN in one process: what every topology must reproduce."""
    out = tmp_path_factory.mktemp("reference")
    run([command("train"), *QUICK_TRAIN, "--out", str(out)], run_env, timeout=RUN_LIMIT_S)
    return train_losses(out)
