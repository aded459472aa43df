"""train --script: what the script gets, and what replaces train."""

from __future__ import annotations

import sys

from ddpimg.plan import build_plan
from ddpimg.runtime.user_script import BOOT_MODULE, script_argv, script_exports
from tests.topology import envs


def test_lightning_gets_the_tasks_per_node_of_srun_n() -> None:
    plan = build_plan(envs.srun(1, ntasks=2, nnodes=1, nodelist="n1", tasks_per_node="2"), "n1")
    assert script_exports(plan, {}) == {"SLURM_NTASKS_PER_NODE": "2"}


def test_nothing_added_when_srun_exported_it_or_nodes_differ_or_no_step() -> None:
    step = envs.srun(1, ntasks=2, nnodes=1, nodelist="n1", tasks_per_node="2")
    plan = build_plan(step, "n1")
    assert script_exports(plan, {"SLURM_NTASKS_PER_NODE": "2"}) == {}
    uneven = build_plan(envs.srun(4, ntasks=5, tasks_per_node="3,2"), "della-i14g2")
    assert script_exports(uneven, {}) == {}
    assert script_exports(build_plan(envs.ompi(1), "n1"), {}) == {}


def test_the_script_replaces_train_unless_rank_0_must_publish_its_address() -> None:
    known = build_plan(envs.srun(1), "della-i14g1")
    assert script_argv(known, "u.py", ["--x"]) == [sys.executable, "u.py", "--x"]
    mpirun = build_plan(envs.ompi(1), "n1", site="generic")
    assert mpirun.needs_runtime_master
    assert script_argv(mpirun, "u.py", ["--x"]) == [
        sys.executable, "-m", BOOT_MODULE, "--site", mpirun.site.path, "u.py", "--x",
    ]  # fmt: skip
