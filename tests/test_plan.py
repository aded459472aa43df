from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.errors import LauncherError
from ddpimg.plan import build_plan, check_local_rank_flag
from ddpimg.topology import resolve_topology

SRUN_TASK_1 = {
    "SLURM_JOB_ID": "123",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "r01g[03-04]",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
}


def test_puhti_master_is_the_short_hostname_and_ib0_is_exported() -> None:
    plan = build_plan(SRUN_TASK_1, "r01g03", site="puhti")
    assert plan.master_addr == "r01g03"
    env = dict(plan.exports)
    assert env["MASTER_ADDR"] == "r01g03"
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (
        "1",
        "8",
        "1",
        "4",
    )
    lo, hi = plan.site.port_range
    assert lo <= plan.master_port <= hi


def test_jsc_master_gets_the_i_suffix() -> None:
    plan = build_plan(SRUN_TASK_1 | {"SYSTEMNAME": "juwelsbooster"}, "jwb0001")
    assert plan.site.name == "juwels-booster"
    assert plan.master_addr == "r01g03i"


def test_every_rank_of_a_step_derives_the_same_port_and_another_job_another() -> None:
    ports = {
        build_plan(SRUN_TASK_1 | {"SLURM_PROCID": str(r)}, "h", site="generic").master_port
        for r in range(8)
    }
    assert len(ports) == 1
    other_job = build_plan(SRUN_TASK_1 | {"SLURM_JOB_ID": "124"}, "h", site="generic").master_port
    other_step = build_plan(SRUN_TASK_1 | {"SLURM_STEP_ID": "1"}, "h", site="generic").master_port
    assert len({ports.pop(), other_job, other_step}) == 3


def test_explicit_master_port_and_addr_win() -> None:
    plan = build_plan(
        SRUN_TASK_1 | {"MASTER_PORT": "31000", "MASTER_ADDR": "10.0.0.5"}, "h", site="puhti"
    )
    assert (plan.master_addr, plan.master_port) == ("10.0.0.5", 31000)


def test_single_process_meets_on_loopback() -> None:
    plan = build_plan({}, "laptop", site="local")
    assert plan.topology.source == "single"
    assert plan.master_addr == "127.0.0.1"


def test_mpirun_without_host_list_leaves_master_to_run_time() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    plan = build_plan(env, "h", site="generic")
    assert plan.master_addr == ""
    assert "MASTER_ADDR" not in dict(plan.exports)
    assert plan.to_json()["master_addr"] == ""


def test_user_exported_variable_wins_over_the_profile() -> None:
    plan = build_plan(SRUN_TASK_1 | {"NCCL_SOCKET_IFNAME": "ib1"}, "h", site="puhti")
    assert dict(plan.exports)["NCCL_SOCKET_IFNAME"] == "ib1"
    assert any("kept the exported value" in note for note in plan.notes)


def test_removed_lists_host_variables_and_those_removed_before_a_reexec() -> None:
    plan = build_plan({"PYTHONPATH": "/x", "DDPIMG_REMOVED": "LD_LIBRARY_PATH"}, "h", site="local")
    assert plan.removed == ("LD_LIBRARY_PATH", "PYTHONPATH")
    assert "PYTHONPATH" not in plan.child_environment({"PYTHONPATH": "/x", "HOME": "/h"})


def test_keep_env_flag_keeps_a_variable() -> None:
    plan = build_plan({"PYTHONPATH": "/x"}, "h", site="local", keep=("PYTHONPATH",))
    assert plan.removed == ()


def test_json_has_the_public_keys() -> None:
    data = build_plan(SRUN_TASK_1, "h", site="puhti").to_json()
    public = {
        "source": str, "rank": int, "world_size": int, "local_rank": int, "local_world_size": int,
        "node_rank": int, "num_nodes": int, "master_addr": str, "master_port": int, "site": str,
        "env": dict, "removed": list,
    }  # fmt: skip
    for key, kind in public.items():
        assert isinstance(data[key], kind), key
    for name in (
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
    ):
        assert name in data["env"]


def test_sbatch_guard_reaches_the_plan() -> None:
    with pytest.raises(LauncherError, match="srun"):
        build_plan({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, "h")


def test_profile_given_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mysite.toml"
    path.write_text('[site]\nname = "mysite"\n[network]\nmaster_addr = "{node}-ib"\n')
    plan = build_plan(SRUN_TASK_1, "h", site=str(path))
    assert plan.master_addr == "r01g03-ib"


DEEPSPEED_WORKER_1 = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_SIZE": "2",
    "CROSS_RANK": "0",
    "CROSS_SIZE": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


@pytest.mark.parametrize(
    ("env", "flag", "message"),
    [
        (DEEPSPEED_WORKER_1, 1, None),
        (DEEPSPEED_WORKER_1, None, None),
        (DEEPSPEED_WORKER_1, 0, r"^--local-rank=0 disagrees with LOCAL_RANK=1\n"),
        # No LOCAL_RANK: the resolved local rank is what the flag must match.
        (SRUN_TASK_1, 1, None),
        (SRUN_TASK_1, 3, r"^--local-rank=3 disagrees with the local rank 1 that slurm gives\n"),
        # A stale LOCAL_RANK equal to the flag does not hide a step that says otherwise.
        (SRUN_TASK_1 | {"LOCAL_RANK": "0"}, 0,
         r"^--local-rank=0 disagrees with the local rank 1 that slurm gives\n"),
    ],
)  # fmt: skip
def test_local_rank_flag(env: dict[str, str], flag: int | None, message: str | None) -> None:
    topology = resolve_topology(env)
    if message is None:
        check_local_rank_flag(topology, flag, env)
        return
    with pytest.raises(LauncherError, match=message) as caught:
        check_local_rank_flag(topology, flag, env)
    assert "drop --local-rank" in (caught.value.hint or "")


def test_explain_names_exported_rank_variables_a_launch_replaces() -> None:
    env = SRUN_TASK_1 | {"RANK": "0", "WORLD_SIZE": "8", "LOCAL_RANK": "0"}
    notes = build_plan(env, "r01g03", site="generic").notes
    assert "RANK=0: replaced by 1 from the slurm launch" in notes
    assert "LOCAL_RANK=0: replaced by 1 from the slurm launch" in notes
    assert not any(note.startswith("WORLD_SIZE=") for note in notes)  # it agrees


def test_explain_carries_the_derivations_of_the_env_source() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    plan = build_plan(env, "laptop", site="generic")
    assert plan.notes[0] == "source=env"
    assert "local_world_size=2: derived (WORLD_SIZE: MASTER_ADDR is this machine)" in plan.notes
    assert dict(plan.exports)["MASTER_ADDR"] == "127.0.0.1"
    assert plan.master_port == 29500


@pytest.mark.parametrize(
    ("site", "hostname", "node_addr"),
    [("juwels-booster", "jwb0002", "jwb0002i"), ("puhti", "r01g04", "r01g04"),
     ("palmetto", "node0042", "node0042.palmetto.clemson.edu")],
)  # fmt: skip
def test_node_addr_is_this_node_by_the_site_rule(site: str, hostname: str, node_addr: str) -> None:
    # What a per-node launcher (torchrun --local_addr) gives as its own address.
    plan = build_plan(SRUN_TASK_1, hostname, site=site)
    assert plan.node_addr == node_addr
    assert plan.to_json()["node_addr"] == node_addr


def test_explain_says_why_one_process_gets_the_first_port() -> None:
    plan = build_plan({}, "laptop", site="generic")
    assert (
        "MASTER_PORT=20000: the first of generic's range 20000-29999 (no launcher names a job)"
        in plan.notes
    )
    srun = build_plan(SRUN_TASK_1, "r01g03", site="generic")
    assert any(
        note.startswith("MASTER_PORT=") and "derived from job key '" in note for note in srun.notes
    )
