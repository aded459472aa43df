"""One process without a launcher."""

from __future__ import annotations

import pytest

from ddpimg.errors import LauncherError
from ddpimg.topology import resolve_with
from ddpimg.topology.model import Topology
from ddpimg.topology.single import SingleSource
from tests.topology import envs

SINGLE = SingleSource()


@pytest.mark.parametrize("env", [{}, envs.SHELL, envs.srun(0), envs.torchrun(0)])
def test_always_detected_so_it_must_come_last(env: dict[str, str]) -> None:
    assert SINGLE.detect(env)


@pytest.mark.parametrize(
    ("env", "job_id"),
    [
        (envs.SHELL, ""),
        (envs.SHELL | {"WORLD_SIZE": "1", "RANK": "0"}, ""),
        (envs.sbatch(ntasks=1, nnodes=1), "4242"),
        (envs.SHELL | {"PBS_JOBID": "77.pbs"}, "77.pbs"),
    ],
    ids=["shell", "world-size-1", "one-task-batch-script", "pbs-job"],
)
def test_rank_zero_of_one_leaves_master_to_the_site(env: dict[str, str], job_id: str) -> None:
    assert resolve_with(SINGLE, env) == Topology(
        source="single",
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        num_nodes=1,
        hosts=(),
        tasks_per_node=(),
        master_node="",
        master_addr_explicit=False,
        master_port=None,
        job_key="",
        job_id=job_id,
        all_local=True,
    )


def test_exported_master_addr_and_port_win() -> None:
    topology = resolve_with(
        SINGLE, envs.SHELL | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512"}
    )
    assert (topology.master_node, topology.master_addr_explicit) == ("127.0.0.1", True)
    assert topology.master_port == 29512


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"WORLD_SIZE": "4", "RANK": "2"},
            r"^single: WORLD_SIZE=4 is set, but no launcher \(torchrun, srun, mpirun\) started "
            r"this process and MASTER_ADDR, MASTER_PORT are not set, so its rank is unknown",
        ),
        (
            {"WORLD_SIZE": "4", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"},
            r"^single: WORLD_SIZE=4 is set, .* and RANK is not set, so its rank is unknown\n"
            r"  hint: .*export all of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
        ),
        ({"WORLD_SIZE": "many"}, r"^single: WORLD_SIZE=many is not a whole number"),
        ({"MASTER_ADDR": " "}, r"^single: MASTER_ADDR is set but empty"),
        ({"MASTER_PORT": ""}, r"^single: MASTER_PORT is set but empty"),
        ({"MASTER_PORT": "-5"}, r"^single: MASTER_PORT=-5 is negative"),
    ],
)
def test_errors_name_variables_and_values(changes: dict[str, str], message: str) -> None:
    with pytest.raises(LauncherError, match=message) as caught:
        resolve_with(SINGLE, envs.SHELL | changes)
    err = caught.value
    assert err.hint, "every launcher error says what to do"
    assert str(err) == f"{err.message}\n  hint: {err.hint}"
