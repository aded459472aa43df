"""The env:// source: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from a launcher such as
DeepSpeed's, its derivations, and its place against Slurm steps and MPI ranks."""

from __future__ import annotations

import pytest

from ddpimg.errors import LauncherError
from ddpimg.topology import detect_source, resolve_topology
from ddpimg.topology.env_contract import EnvContractSource, is_loopback
from tests.topology import envs

CONTRACT = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29732"}
PLACEMENT = ("rank", "world_size", "local_rank", "local_world_size", "node_rank", "num_nodes")


def placement(env: dict[str, str]) -> tuple[int, ...]:
    topology = resolve_topology(env)
    return tuple(getattr(topology, field) for field in PLACEMENT)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # deepspeed --num_gpus 2: LOCAL_SIZE and CROSS_* are DeepSpeed's own names.
        (envs.deepspeed_launcher(1), (1, 2, 1, 2, 0, 1)),
        # The same launcher on 2 nodes (its pdsh runner starts one per node).
        (envs.deepspeed_launcher(3, nnodes=2, master="n1"), (3, 4, 1, 2, 1, 2)),
        # Hand-written, one machine: a loopback master puts every rank here.
        (envs.SHELL | CONTRACT, (1, 2, 1, 2, 0, 1)),
        (envs.SHELL | CONTRACT | {"MASTER_ADDR": "localhost"}, (1, 2, 1, 2, 0, 1)),
        # Hand-written, several hosts, nothing local said: one rank per host.
        (envs.SHELL | CONTRACT | {"MASTER_ADDR": "n1", "RANK": "3", "WORLD_SIZE": "4"},
         (3, 4, 0, 1, 3, 4)),
        # torchrun's names without its markers (Accelerate-style), and Lightning's NODE_RANK.
        (envs.SHELL | CONTRACT | {"MASTER_ADDR": "n1", "RANK": "3", "WORLD_SIZE": "4",
                                  "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (3, 4, 1, 2, 1, 2)),
        (envs.SHELL | CONTRACT | {"MASTER_ADDR": "n1", "RANK": "3", "WORLD_SIZE": "4",
                                  "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1"},
         (3, 4, 1, 2, 1, 2)),
        # A node count alone gives the local size.
        (envs.SHELL | CONTRACT | {"MASTER_ADDR": "n1", "RANK": "2", "WORLD_SIZE": "4",
                                  "LOCAL_RANK": "0", "CROSS_SIZE": "2"}, (2, 4, 0, 2, 1, 2)),
    ],
)  # fmt: skip
def test_placement(env: dict[str, str], expected: tuple[int, ...]) -> None:
    assert detect_source(env).name == "env"
    assert placement(env) == expected


def test_master_is_taken_as_given() -> None:
    topology = resolve_topology(envs.deepspeed_launcher(0, master="n1"))
    assert (topology.master_node, topology.master_addr_explicit) == ("n1", True)
    assert topology.master_port == 29500
    assert (topology.hosts, topology.tasks_per_node) == ((), ())


def test_derived_values_are_explained_and_given_ones_are_not() -> None:
    topology = resolve_topology(envs.SHELL | CONTRACT | {"MASTER_ADDR": "n1"})
    assert topology.notes == (
        "local_rank=0: derived (RANK % local_world_size)",
        "local_world_size=1: derived (one rank per host assumed: no LOCAL_RANK)",
        "node_rank=1: derived (RANK // local_world_size)",
        "num_nodes=2: derived (WORLD_SIZE / local_world_size, rounded up)",
    )
    assert resolve_topology(envs.deepspeed_launcher(1)).notes == ()


@pytest.mark.parametrize(
    ("env", "source", "rank", "world_size"),
    [
        # srun -n1 deepspeed --num_gpus 2: the step has 1 task, the launcher inside it 2
        # workers; they are the launch.
        (envs.srun(0, ntasks=1, nnodes=1, nodelist="n1", tasks_per_node="1")
         | envs.deepspeed_launcher(1), "env", 1, 2),
        # A batch script exported the contract, then srun -n 4: the step has WORLD_SIZE tasks,
        # so the variables describe it, and its own ranks win over the exported RANK=0.
        (envs.srun(3) | {k: v for k, v in CONTRACT.items()} | {"RANK": "0", "WORLD_SIZE": "4"},
         "slurm", 3, 4),
        # The same under mpirun -np 4.
        (envs.ompi(3) | CONTRACT | {"RANK": "0", "WORLD_SIZE": "4"}, "openmpi", 3, 4),
        # mpirun -np 2, each rank running DeepSpeed's launcher with 2 workers.
        (envs.ompi(1, size=2, local_size=1) | envs.deepspeed_launcher(3, nnodes=2, master="n1"),
         "env", 3, 4),
        # torchrun's workers stay torchrun's: its markers come first.
        (envs.torchrun(3) | {"LOCAL_SIZE": "2"}, "torchrun", 3, 4),
    ],
)  # fmt: skip
def test_place_in_the_detection_order(
    env: dict[str, str], source: str, rank: int, world_size: int
) -> None:
    topology = resolve_topology(env)
    assert (topology.source, topology.rank, topology.world_size) == (source, rank, world_size)


def test_batch_shell_exports_keep_the_step_and_the_exported_port() -> None:
    # export MASTER_PORT=29888 WORLD_SIZE=4 in the batch script, then srun train: no RANK,
    # so not the contract; the step resolves and the exported port is kept.
    env = envs.srun(2) | {"MASTER_PORT": "29888", "WORLD_SIZE": "4"}
    topology = resolve_topology(env)
    assert (topology.source, topology.rank, topology.master_port) == ("slurm", 2, 29888)


def test_the_contract_is_all_four_variables() -> None:
    for missing in CONTRACT:
        env = envs.SHELL | {k: v for k, v in CONTRACT.items() if k != missing}
        assert not EnvContractSource().detect(env), missing


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"MASTER_ADDR": "n1", "LOCAL_RANK": "1"},
         r"^env: LOCAL_RANK=1 is set, but nothing says how many of the WORLD_SIZE=2 ranks run "
         r"on this node \(none of LOCAL_WORLD_SIZE, LOCAL_SIZE, GROUP_WORLD_SIZE, CROSS_SIZE is "
         r"set, and MASTER_ADDR is not this machine\)\n  hint: export LOCAL_WORLD_SIZE"),
        ({"RANK": "2"}, r"^env: RANK=2 is not below WORLD_SIZE=2"),
        ({"LOCAL_SIZE": "4"}, r"^env: LOCAL_SIZE=4 is larger than WORLD_SIZE=2"),
        ({"RANK": "one"}, r"^env: RANK=one is not a whole number"),
        ({"MASTER_PORT": "0"}, r"^env: MASTER_PORT=0 is not a TCP port"),
        ({"MASTER_ADDR": ""}, r"^env: MASTER_ADDR is set but empty"),
    ],
)  # fmt: skip
def test_errors_name_variables_and_values(changes: dict[str, str], message: str) -> None:
    with pytest.raises(LauncherError, match=message):
        resolve_topology(envs.SHELL | CONTRACT | changes)


@pytest.mark.parametrize(
    ("addr", "local"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("::1", True),
     ("LOCALHOST", True), ("10.0.0.1", False), ("n1", False), ("localhost2", False)],
)  # fmt: skip
def test_is_loopback(addr: str, local: bool) -> None:
    assert is_loopback(addr) is local


@pytest.mark.parametrize(
    ("world_size", "message"),
    [
        ("4294967297", r"WORLD_SIZE=4294967297 is more than 16,777,216, the most ddpimg runs"),
        ("9" * 5000, r"WORLD_SIZE=9{40} is not a whole number of at most 18 digits"),
    ],
)
def test_a_world_size_beyond_any_machine_is_refused(world_size: str, message: str) -> None:
    """WORLD_SIZE=4294967297 once had rank 0 wait for four billion ranks (minutes, deaf to
    SIGTERM); 5,000 digits made int() raise a bare ValueError."""
    env = envs.SHELL | CONTRACT | {"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": world_size}
    with pytest.raises(LauncherError, match=message):
        resolve_topology(env)
