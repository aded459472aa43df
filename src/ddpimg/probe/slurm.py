"""What Slurm says about a cluster: partitions (time and node limits, nodes, the default),
nodes (CPUs, memory, GRES with GPU types, features) and the cluster's name, parsed from
``scontrol show partition -o``, ``scontrol show node -o`` and ``scontrol show config``. The
parsers are pure; :func:`read_slurm` runs the commands, each bounded in time."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddpimg.errors import DdpimgError

SCONTROL_TIMEOUT_S = 30.0
UNLIMITED = ("UNLIMITED", "INFINITE", "")
_GRES_ITEM = re.compile(r"(?P<name>[^:(,]+)(?::(?P<type>[^:(,]+))?:(?P<count>\d+)")


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: str  # Slurm's host list expression
    default: bool
    max_time: str  # "" when unlimited
    max_nodes: int  # 0 when unlimited
    min_nodes: int


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    gpu_type: str  # "" when the GRES has no type
    partitions: tuple[str, ...]
    features: tuple[str, ...]


@dataclass(frozen=True)
class Qos:
    name: str
    max_time: str  # "" when not set
    max_nodes: int  # 0 when not set


@dataclass(frozen=True)
class SlurmFacts:
    cluster_name: str
    gres_types: tuple[str, ...]
    partitions: tuple[Partition, ...]
    nodes: tuple[Node, ...]
    commands: tuple[str, ...]  # what was run, for the sources
    qos: tuple[Qos, ...] = ()  # empty when the accounting database could not be read


def parse_records(text: str) -> list[dict[str, str]]:
    """``scontrol -o`` output: one record a line of KEY=VALUE words (a value may hold spaces
    only in keys scontrol lists last, such as Reason=, which are kept whole)."""
    records = []
    for line in text.splitlines():
        record: dict[str, str] = {}
        key = ""
        for word in line.split():
            name, sep, value = word.partition("=")
            if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:.]*", name):
                key = name
                record[key] = value
            elif key:
                record[key] += " " + word
        if record:
            records.append(record)
    return records


def _count(value: str) -> int:
    return 0 if value.upper() in UNLIMITED else int(value) if value.isdigit() else 0


def parse_partitions(text: str) -> list[Partition]:
    return [
        Partition(
            name=record["PartitionName"],
            nodes=record.get("Nodes", ""),
            default=record.get("Default", "NO") == "YES",
            max_time="" if record.get("MaxTime", "").upper() in UNLIMITED else record["MaxTime"],
            max_nodes=_count(record.get("MaxNodes", "")),
            min_nodes=_count(record.get("MinNodes", "")),
        )
        for record in parse_records(text)
        if "PartitionName" in record
    ]


def parse_gres(value: str) -> tuple[int, str]:
    """The GPUs of a node's ``Gres=`` (``gpu:a100:4(S:0-1),nvme:1``): (count, type)."""
    count, types = 0, []
    for match in _GRES_ITEM.finditer(value):
        if match["name"].strip() == "gpu":
            count += int(match["count"])
            if match["type"]:
                types.append(match["type"])
    return count, ",".join(dict.fromkeys(types))


def parse_nodes(text: str) -> list[Node]:
    nodes = []
    for record in parse_records(text):
        if "NodeName" not in record:
            continue
        gpus, gpu_type = parse_gres(record.get("Gres", ""))
        nodes.append(
            Node(
                name=record["NodeName"],
                cpus=int(record.get("CPUTot", "0") or 0),
                memory_mb=int(record.get("RealMemory", "0") or 0),
                gpus=gpus,
                gpu_type=gpu_type,
                partitions=tuple(p for p in record.get("Partitions", "").split(",") if p),
                features=_items(record.get("AvailableFeatures", "")),
            )
        )
    return nodes


def parse_qos(text: str) -> list[Qos]:
    """``sacctmgr --noheader --parsable2 show qos format=Name,MaxWall,MaxTRESPerJob``."""
    found = []
    for line in text.splitlines():
        name, _, rest = line.partition("|")
        wall, _, tres = rest.partition("|")
        nodes = next((int(item[5:]) for item in tres.split(",") if item.startswith("node=")), 0)
        if name:
            found.append(Qos(name, wall, nodes))
    return found


def _items(value: str) -> tuple[str, ...]:
    """A comma list as scontrol prints it (``(null)`` for none)."""
    return tuple(item for item in value.split(",") if item not in ("", "(null)"))


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = value`` lines."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip()] = value.strip()
    return found


def _run(argv: Sequence[str], env: Mapping[str, str]) -> str:
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=SCONTROL_TIMEOUT_S,
            env=dict(env),
            check=False,
        )
    except FileNotFoundError as err:
        raise DdpimgError(
            f"{argv[0]} is not on PATH: the probe reads the cluster from Slurm",
            hint="run ddpimg site probe on a login node of the cluster, or in a job there",
        ) from err
    except subprocess.TimeoutExpired as err:
        raise DdpimgError(
            f"{' '.join(argv)} did not answer within {SCONTROL_TIMEOUT_S:g} s",
            hint="the controller may be busy; try again",
        ) from err
    if proc.returncode != 0:
        raise DdpimgError(
            f"{' '.join(argv)} exited with status {proc.returncode}: {proc.stderr.strip()}",
            hint="run it by hand on the cluster to see why",
        )
    return proc.stdout


def read_slurm(env: Mapping[str, str]) -> SlurmFacts:
    """Ask Slurm (``scontrol``)."""
    commands = (
        ("scontrol", "show", "config"),
        ("scontrol", "show", "partition", "-o"),
        ("scontrol", "show", "node", "-o"),
    )
    config, partitions, nodes = (_run(argv, env) for argv in commands)
    settings = parse_config(config)
    qos_command = ("sacctmgr", "--noheader", "--parsable2", "show", "qos",
                   "format=Name,MaxWall,MaxTRESPerJob")  # fmt: skip
    try:  # where accounting is off or not readable, no QOS is known
        qos = tuple(parse_qos(_run(qos_command, env)))
    except DdpimgError:
        qos = ()
    return SlurmFacts(
        cluster_name=settings.get("ClusterName", ""),
        gres_types=_items(settings.get("GresTypes", "")),
        partitions=tuple(parse_partitions(partitions)),
        nodes=tuple(parse_nodes(nodes)),
        commands=tuple(" ".join(argv) for argv in commands),
        qos=qos,
    )
