"""One probing task, from start to the draft: on a login node alone, or as one task of an
srun step on several nodes (:mod:`ddpimg.probe`)."""

from __future__ import annotations

import datetime
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddpimg.errors import DdpimgError
from ddpimg.fsio import write_text_atomic
from ddpimg.probe.draft import Findings, draft_facts
from ddpimg.probe.meeting import Meeting
from ddpimg.probe.network import Attempt, EchoServer, Target, attempt
from ddpimg.probe.node import NodeFacts, node_facts
from ddpimg.probe.runtimes import find_runtimes
from ddpimg.probe.slurm import read_slurm
from ddpimg.probe.writer import profile_text

MARKER = ".ddpimg-probe-{token}-{task}"
NODE_FORMS = ("{node}", "{node}i")


@dataclass(frozen=True)
class Step:
    """This task's place in the probing step (``tasks`` 1: alone, e.g. on a login node)."""

    task: int
    tasks: int
    token: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Step:
        if "SLURM_STEP_ID" not in env:
            return cls(0, 1, "login")
        try:
            return cls(
                int(env["SLURM_PROCID"]),
                int(env["SLURM_STEP_NUM_TASKS"]),
                f"{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}",
            )
        except (KeyError, ValueError) as err:
            raise DdpimgError(
                f"probe: the srun step's variables are incomplete ({err})",
                hint="start it as srun -N2 --ntasks-per-node 1 ddpimg site probe --out FILE",
            ) from err


def run_probe(env: Mapping[str, str], out: Path, timeout_s: float, command: str) -> bool:
    """Probe; task 0 writes the draft to ``out`` (returns True for the task that wrote)."""
    step = Step.from_env(env)
    name = out.stem
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    facts = node_facts(env)
    nodes: list[NodeFacts] = [facts]
    attempts: list[Attempt] = []
    shared: set[str] = set()
    if step.tasks > 1:
        meeting = Meeting(out.parent / f".{out.name}.probe-{step.token}", step.task, step.tasks,
                          timeout_s)  # fmt: skip
        nodes, attempts, shared = _meet(meeting, step, facts)
        if step.task != 0:
            return False
    found = Findings(
        name=name,
        date=date,
        slurm=read_slurm(env),
        runtimes=tuple(find_runtimes(env)),
        nodes=tuple(nodes),
        attempts=tuple(attempts),
        shared_dirs=tuple(sorted(shared)),
        on_compute_nodes=step.tasks > 1 and len(nodes) > 1,
    )
    write_text_atomic(out, profile_text(draft_facts(found), command))
    if step.tasks > 1:
        shutil.rmtree(out.parent / f".{out.name}.probe-{step.token}", ignore_errors=True)
    return True


def _meet(
    meeting: Meeting, step: Step, facts: NodeFacts
) -> tuple[list[NodeFacts], list[Attempt], set[str]]:
    """Post this node's facts, probe every other node, gather everyone's results."""
    server = EchoServer(step.token).start()
    markers = [Path(d.path) / MARKER.format(token=step.token, task=step.task)
               for d in facts.local_dirs]  # fmt: skip
    try:
        for marker in markers:
            marker.touch()
        meeting.post("facts", {"facts": facts.to_json(), "port": server.port})
        posted = meeting.gather("facts")
        everyone = [NodeFacts.from_json(p["facts"]) for p in posted]
        mine: list[Attempt] = []
        shared: set[str] = set()
        for task, (peer, post) in enumerate(zip(everyone, posted, strict=True)):
            if task == step.task or peer.node == facts.node:
                continue  # a task on this same node is no other node
            mine += _probe_peer(facts, peer, Target(peer.node, int(post["port"]), step.token))
            theirs = MARKER.format(token=step.token, task=task)
            shared |= {d.path for d in facts.local_dirs if (Path(d.path) / theirs).exists()}
        meeting.post("results", {"attempts": [a.to_json() for a in mine],
                                 "shared": sorted(shared)})  # fmt: skip
        results = meeting.gather("results")
    finally:
        server.stop()
        for marker in markers:
            marker.unlink(missing_ok=True)
    attempts = [Attempt(**item) for result in results for item in result["attempts"]]
    shared_all = {path for result in results for path in result["shared"]}
    by_node = {node.node: node for node in everyone}
    return list(by_node.values()), attempts, shared_all


def _probe_peer(me: NodeFacts, peer: NodeFacts, target: Target) -> list[Attempt]:
    """Every way to reach ``peer``: each of its interfaces' addresses, then each host-name
    rule the master address could use."""
    tries = [
        attempt(me.node, target, f"interface:{i.name}", i.address)
        for i in peer.interfaces
        if i.address and i.kind != "loopback" and i.up
    ]
    hosts = [(form, form.format(node=peer.node)) for form in NODE_FORMS]
    if "." in peer.fqdn:
        domain = peer.fqdn.split(".", 1)[1]
        hosts.append((f"{{node}}.{domain}", f"{peer.node}.{domain}"))
    tries += [attempt(me.node, target, form, host) for form, host in hosts]
    return tries
