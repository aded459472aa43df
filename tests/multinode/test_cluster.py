"""The namespace cluster itself: nodes that look like a CSC / JSC cluster's nodes, an eth0
that carries Slurm but nothing else between nodes, and nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engines import netns
from tests.engines.netns import NamespaceCluster, sweep_stale
from tests.integration.runs import PYTHON, run

pytestmark = [pytest.mark.multinode, pytest.mark.slurm]

# What a task sees on its node, as one JSON line.
NODE_VIEW = """
import json, os, socket, subprocess
host = socket.gethostname()
print(json.dumps({
    "rank": int(os.environ["SLURM_PROCID"]),
    "host": host,
    "hostname_I": subprocess.check_output(["hostname", "-I"], text=True).split(),
    "interfaces": sorted(os.listdir("/sys/class/net")),
    "short": socket.gethostbyname(host),
    "suffix": socket.gethostbyname(host + "i"),
}))
"""

# On node A: listen on PORT on every address; on node B: try A's eth0 and ib0 addresses.
LISTEN = """
import socket, sys, time
server = socket.create_server(("", int(sys.argv[1])))
server.settimeout(1)
print("listening", flush=True)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        server.accept()[0].close()
    except TimeoutError:
        pass
"""
CONNECT = """
import json, socket, sys
port, result = int(sys.argv[1]), {}
for addr in sys.argv[2:]:
    try:
        socket.create_connection((addr, port), timeout=3).close()
        result[addr] = "connected"
    except OSError as err:
        result[addr] = type(err).__name__
print(json.dumps(result))
"""
PROBE_PORT = 24999
# Every rank prints its host and rank 0's host, broadcast over MPI.
MPI_BCAST = (
    "import socket; from mpi4py import MPI; host = socket.gethostname(); "
    "print(f'{host}:{MPI.COMM_WORLD.bcast(host)}', flush=True)"
)


def _views(proc: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return sorted(rows, key=lambda row: int(str(row["rank"])))


def test_each_node_has_its_hostname_interfaces_and_names(
    cluster: NamespaceCluster, cluster_env: dict[str, str]
) -> None:
    n = len(cluster.nodes)
    cmd = ["srun", "-N", str(n), "--ntasks-per-node=1", PYTHON, "-c", NODE_VIEW]
    views = _views(run(cmd, cluster_env, timeout=60))
    assert [view["host"] for view in views] == list(cluster.node_names)
    for view, node in zip(views, cluster.nodes, strict=True):
        # `hostname -I` lists the blocked management address first, as on Puhti / Mahti.
        assert view["hostname_I"] == [node.mgmt_addr, node.fabric_addr]
        assert view["interfaces"] == ["eth0", "ib0", "lo"]
        assert view["short"] == node.fabric_addr
        assert view["suffix"] == node.fabric_addr


def test_suffix_naming_puts_short_names_on_eth0(
    cluster: NamespaceCluster, cluster_env: dict[str, str], suffix_naming: None
) -> None:
    cmd = ["srun", "-N", "2", "--ntasks-per-node=1", PYTHON, "-c", NODE_VIEW]
    views = _views(run(cmd, cluster_env, timeout=60))
    for view, node in zip(views, cluster.nodes, strict=False):
        assert view["short"] == node.mgmt_addr
        assert view["suffix"] == node.fabric_addr


def test_eth0_drops_other_traffic_between_nodes_and_ib0_carries_it(
    cluster: NamespaceCluster, run_env: dict[str, str]
) -> None:
    server, client = cluster.nodes[0], cluster.nodes[1]
    listen = cluster.on_node(server.name, [PYTHON, "-c", LISTEN, str(PROBE_PORT), "30"])
    listener = subprocess.Popen(listen, env=run_env, stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "listening"
        probe = [PYTHON, "-c", CONNECT, str(PROBE_PORT), server.mgmt_addr, server.fabric_addr]
        result = json.loads(run(cluster.on_node(client.name, probe), run_env, timeout=30).stdout)
    finally:
        listener.kill()
        listener.wait(10)
    # A dropped SYN: the connection attempt hangs until the client's own timeout.
    assert result == {server.mgmt_addr: "TimeoutError", server.fabric_addr: "connected"}


@pytest.mark.mpi
def test_srun_pmix_runs_mpi_across_nodes(
    cluster: NamespaceCluster, cluster_env: dict[str, str]
) -> None:
    """Slurm's PMIx works through the eth0 filter (the cluster sets PMIxDirectConn=false)."""
    cmd = ["srun", "--mpi=pmix", "-N", "2", "--ntasks-per-node=1", PYTHON, "-c", MPI_BCAST]
    proc = run(cmd, cluster_env, timeout=60)
    assert sorted(proc.stdout.split()) == ["node1:node1", "node2:node1"]


def test_start_and_stop_leave_nothing_and_stop_is_idempotent(tmp_path: Path) -> None:
    one = NamespaceCluster(tmp_path / "one", num_nodes=1)
    one.start()
    names = [node.netns for node in one.nodes]
    assert all((netns.NETNS_DIR / name).exists() for name in names)
    assert set(one.started_pids) == {"holder node1", "munged", "slurmctld", "slurmd node1"}
    one.stop()
    one.stop()
    assert one.leftovers() == []


def test_a_killed_runs_cluster_is_swept_by_the_next_start(tmp_path: Path) -> None:
    """A test run killed with SIGKILL cannot clean up: its daemons and holders die with it
    (parent-death signal), and the next cluster's start removes its namespaces and links."""
    owner = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from tests.engines.netns import NamespaceCluster\n"
        "c = NamespaceCluster(Path(sys.argv[1]), 1)\n"
        "c.start()\n"
        "print(json.dumps({'token': c.token, 'pids': c.slurm.pids}), flush=True)\n"
        "time.sleep(120)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", owner, str(tmp_path / "killed")],
        cwd=repo,
        env=os.environ | {"PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    token = started["token"]
    record = netns.REGISTRY_DIR / f"{token}.json"
    assert record.exists()
    assert token in sweep_stale()
    assert not record.exists()
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert token not in left.stdout
    links = subprocess.run(["ip", "link"], capture_output=True, text=True, check=True)
    assert token not in links.stdout
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [pid for pid in started["pids"].values() if Path(f"/proc/{pid}").exists()]
        if not alive:
            break
        time.sleep(0.1)
    assert alive == [], f"daemons of the killed run still alive: {alive}"
