"""train --script: what the script gets, what replaces train, and the checks before."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError, LauncherError
from ddpimg.plan import build_plan
from ddpimg.script.launch import (
    BOOT_MODULE,
    check_script,
    script_argv,
    script_exports,
    script_options,
)
from ddpimg.script.options import ScriptOptions
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


def test_the_boot_replaces_train_and_the_script_keeps_its_arguments() -> None:
    assert script_argv("u.py", ["--x", "1"]) == [sys.executable, "-m", BOOT_MODULE, "u.py",
                                                 "--x", "1"]  # fmt: skip


def _args(**overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "out": Path("runs/x"), "timeout": 30.0, "no_watch": False, "no_record": True,
        "no_integrations": False, "preempt_signals": "usr2", "preempt_check_every": 5,
        "resume": "none", "log_to": None, "project": None, "run_name": "r1",
        "run_group": None, "wandb_entity": None,
    }  # fmt: skip
    return argparse.Namespace(**(values | overrides))


def test_the_flags_become_the_boots_options() -> None:
    mpirun = build_plan(envs.ompi(1), "n1", site="generic")
    options = script_options(mpirun, _args())
    assert options == ScriptOptions(
        out="runs/x",
        runs="",
        timeout_s=30.0,
        watch=True,
        record=False,
        integrations=True,
        preempt_signals=("USR2",),
        preempt_check_every=5,
        resume="none",
        master_via_mpi=True,
        site_path=mpirun.site.path,
        run_info=mpirun.to_json(),
        log_to=(),
        tracker_options={
            "project": None, "run_name": "r1", "run_group": None, "wandb_entity": None,
        },
    )  # fmt: skip


def test_without_out_the_boot_chooses_under_the_runs_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No --out: the boot's rank 0 chooses the run's own directory under the runs root
    (DDPIMG_RUNS over ./runs); with --out an empty DDPIMG_RUNS does not matter."""
    mpirun = build_plan(envs.ompi(1), "n1", site="generic")
    monkeypatch.setenv("DDPIMG_RUNS", "/scratch/me/runs")
    options = script_options(mpirun, _args(out=None))
    assert (options.out, options.runs) == ("", "/scratch/me/runs")
    monkeypatch.setenv("DDPIMG_RUNS", "")
    assert script_options(mpirun, _args()).out == "runs/x"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"timeout": 0.0}, "--timeout must be more than 0 seconds, got 0"),
        ({"timeout": -5.0}, "--timeout must be more than 0 seconds, got -5"),
        ({"preempt_check_every": 0}, "--preempt-check-every must be at least 1, got 0"),
        ({"preempt_signals": "USR1"}, "--preempt-signals 'USR1': SIGUSR1 is refused"),
        ({"log_to": "tensorboard,neptune"}, "--log-to: unknown tracker 'neptune'"),
    ],
)
def test_bad_numbers_are_refused_naming_the_flag(
    overrides: dict[str, object], message: str
) -> None:
    plan = build_plan(envs.srun(1), "della-i14g1")
    with pytest.raises(DdpimgError, match="^" + message.replace("(", r"\(")):
        script_options(plan, _args(**overrides))


def test_the_script_must_be_given_and_exist(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="--script needs a FILE"):
        check_script([])
    with pytest.raises(LauncherError, match=f"--script {tmp_path}/no.py: no such file"):
        check_script([str(tmp_path / "no.py")])
    (tmp_path / "yes.py").write_text("")
    check_script([str(tmp_path / "yes.py"), "--any"])
