"""The draft profile, decided from what the probe found: each value with its source.

A value the probe measured or read from Slurm cites how (``probed: DATE on NODES: ...``);
one it could not decide is still written, marked ``unverified: WHY; ask the site: ...``, so
that a person knows which question to ask. Pure: the facts come in, :class:`Fact` s go out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddpimg.probe.network import Attempt
from ddpimg.probe.node import LocalDir, NodeFacts
from ddpimg.probe.runtimes import RuntimeFound
from ddpimg.probe.slurm import Node, SlurmFacts

UNVERIFIED = "unverified: "
# Host-name rules tried for the master address, in this order (ddpimg.site.master).
NODE_FORMS = ("{node}", "{node}i")
PREFERRED_KINDS = ("infiniband",)
SLINGSHOT_PREFIX = "hsn"
GIB = 1 << 30


@dataclass(frozen=True)
class Fact:
    """One profile key: ``key`` dotted (``job.partition``, ``partitions.gpu``), its value, and
    its ``[sources]`` entry."""

    key: str
    value: object
    source: str


@dataclass(frozen=True)
class Findings:
    """Everything the probe found, for :func:`draft_facts`."""

    name: str
    date: str
    slurm: SlurmFacts | None
    runtimes: tuple[RuntimeFound, ...]
    nodes: tuple[NodeFacts, ...]  # one per node that probed; the first is rank 0's
    attempts: tuple[Attempt, ...]
    shared_dirs: tuple[str, ...]  # node-local candidates another node saw into
    on_compute_nodes: bool  # False: run on a login node, no task on another node

    def probed(self, how: str) -> str:
        where = ", ".join(node.node for node in self.nodes) or "this host"
        return f"probed: {self.date} on {where}: {how}"


def draft_facts(found: Findings) -> list[Fact]:
    """Every key of the draft, with its source."""
    facts = [Fact("site.name", found.name, ""), Fact("site.description", _description(found), "")]
    if found.slurm is not None:
        facts += _slurm_facts(found, found.slurm)
    facts += _runtime_facts(found)
    facts += _network_facts(found)
    facts += _local_dir_facts(found)
    facts += _hardware_facts(found)
    return facts


def _description(found: Findings) -> str:
    cluster = found.slurm.cluster_name if found.slurm and found.slurm.cluster_name else "cluster"
    return f"{cluster}: drafted by ddpimg site probe on {found.date}"


def _most_common(values: Iterable[int]) -> int:
    counted = Counter(values).most_common(1)
    return counted[0][0] if counted else 0


def _slurm_facts(found: Findings, slurm: SlurmFacts) -> list[Fact]:
    facts: list[Fact] = []
    read = found.probed("scontrol show config, partition, node")
    if slurm.cluster_name:
        facts.append(Fact("match.slurm_cluster_names", [slurm.cluster_name], read))
    for partition in slurm.partitions:
        limits: dict[str, object] = {}
        if partition.max_time:
            limits["max_time"] = partition.max_time
        if partition.max_nodes:
            limits["max_nodes"] = partition.max_nodes
        if partition.min_nodes > 1:
            limits["min_nodes"] = partition.min_nodes
        facts.append(Fact(f"partitions.{partition.name}", limits, read))
    qos_read = found.probed("sacctmgr show qos")
    for qos in slurm.qos:
        limits = {"max_time": qos.max_time} if qos.max_time else {}
        if qos.max_nodes:
            limits["max_nodes"] = qos.max_nodes
        facts.append(Fact(f"qos.{qos.name}", limits, qos_read))
    gpu_nodes = [node for node in slurm.nodes if node.gpus]
    chosen = _partition(slurm, gpu_nodes)
    if chosen:
        why = "the default partition" if _is_default(slurm, chosen) else "the first partition"
        what = " with GPU nodes" if gpu_nodes else ""
        facts.append(Fact("job.partition", chosen, found.probed(f"{why}{what}")))
    if not gpu_nodes:
        return facts
    here = [node for node in gpu_nodes if chosen in node.partitions] or gpu_nodes
    gpus = _most_common(node.gpus for node in here)
    cpus = _most_common(node.cpus for node in here if node.gpus == gpus)
    facts.append(Fact("job.gpus_per_node", gpus, found.probed(f"Gres=gpu:...:{gpus} of the nodes")))
    all_types = sorted({t for node in gpu_nodes for t in node.gpu_type.split(",") if t})
    here_types = sorted({t for node in here for t in node.gpu_type.split(",") if t})
    if all_types:
        facts.append(Fact("job.gpu_types", all_types, found.probed("the nodes' Gres GPU types")))
    if len(here_types) == 1:
        facts.append(
            Fact("job.gpu_type", here_types[0], found.probed(f"the GPU type of partition {chosen}"))
        )
    facts.append(
        Fact(
            "job.gpu_request",
            "gres",
            f"{UNVERIFIED}Slurm has GresTypes={','.join(slurm.gres_types) or 'gpu'}, so "
            "--gres=gpu:TYPE:N is understood; ask the site: --gres or --gpus-per-node?",
        )
    )
    if cpus >= gpus:
        facts.append(
            Fact(
                "job.cpus_per_task",
                cpus // gpus,
                found.probed(f"CPUTot={cpus} / {gpus} GPUs a node, one rank per GPU"),
            )
        )
    return facts


def _is_default(slurm: SlurmFacts, name: str) -> bool:
    return any(p.name == name and p.default for p in slurm.partitions)


def _partition(slurm: SlurmFacts, gpu_nodes: Sequence[Node]) -> str:
    """The default partition if it has GPU nodes (or none has), else the first that has."""
    with_gpus = {name for node in gpu_nodes for name in node.partitions}
    default = next((p.name for p in slurm.partitions if p.default), "")
    if default and (not gpu_nodes or default in with_gpus):
        return default
    return next((p.name for p in slurm.partitions if p.name in with_gpus), default)


def _runtime_facts(found: Findings) -> list[Fact]:
    if not found.runtimes:
        return [
            Fact(
                "container.runtime",
                "none",
                f"{UNVERIFIED}no apptainer, singularity or podman-hpc on PATH and no container "
                "option in `srun --help`; ask the site: which container runtime do jobs use?",
            )
        ]
    first = found.runtimes[0]
    if len(found.runtimes) == 1:
        return [Fact("container.runtime", first.name, found.probed(first.how))]
    others = "; ".join(f"{r.name} ({r.how})" for r in found.runtimes)
    return [
        Fact(
            "container.runtime",
            first.name,
            f"{UNVERIFIED}several found: {others}; ask the site: which one for multi-node GPU "
            "jobs?",
        )
    ]


def _network_facts(found: Findings) -> list[Fact]:
    if not found.on_compute_nodes or not found.attempts:
        question = (
            f"{UNVERIFIED}not measured (the probe ran on one node); run `srun -N2 "
            "--ntasks-per-node 1 ddpimg site probe --out FILE` in a job, or ask the site: "
            "which host name reaches another compute node over the fast network?"
        )
        return [Fact("network.master_addr", "{node}", question)]
    working = _working_interfaces(found)
    facts: list[Fact] = []
    if working:
        facts.append(
            Fact("network.interfaces", working, found.probed(_interface_story(found, working)))
        )
    rule, story = _master_rule(found, working)
    facts.append(
        Fact("network.master_addr", rule, found.probed(story) if rule else _no_rule(found))
    )
    if not rule:
        facts[-1] = Fact("network.master_addr", "{node}", _no_rule(found))
    facts.append(_transport(found, working))
    return facts


def _attempts_by_form(found: Findings, form: str) -> list[Attempt]:
    return [a for a in found.attempts if a.form == form]


def _interface_of(found: Findings, node: str, address: str) -> str:
    if not address:
        return ""
    for facts in found.nodes:
        if facts.node == node:
            for interface in facts.interfaces:
                if interface.address == address:
                    return interface.name
    return ""


def _working_interfaces(found: Findings) -> list[str]:
    """Interfaces whose address every other node reached, fabric kinds first, then by the
    rate measured."""
    names = {
        attempt.form.removeprefix("interface:")
        for attempt in found.attempts
        if attempt.form.startswith("interface:")
    }
    working = []
    for name in sorted(names):
        tries = _attempts_by_form(found, f"interface:{name}")
        if tries and all(attempt.reached for attempt in tries):
            working.append(name)
    kinds = {i.name: i.kind for node in found.nodes for i in node.interfaces}
    rates = {
        name: min(a.mbytes_per_s for a in _attempts_by_form(found, f"interface:{name}"))
        for name in working
    }
    return sorted(
        working, key=lambda name: (kinds.get(name) not in PREFERRED_KINDS, -rates[name], name)
    )


def _interface_story(found: Findings, working: list[str]) -> str:
    parts = []
    for attempt in found.attempts:
        if attempt.form.startswith("interface:"):
            name = attempt.form.removeprefix("interface:")
            result = (
                f"reached, {attempt.mbytes_per_s:.0f} MB/s" if attempt.reached else attempt.outcome
            )
            parts.append(f"{attempt.prober} -> {attempt.peer} {name} ({attempt.address}): {result}")
    return "TCP exchange between the tasks: " + "; ".join(parts)


def _forms(found: Findings) -> list[str]:
    forms = list(NODE_FORMS)
    domains = {n.fqdn.split(".", 1)[1] for n in found.nodes if "." in n.fqdn}
    forms += [f"{{node}}.{domain}" for domain in sorted(domains)]
    return forms


def _master_rule(found: Findings, working: list[str]) -> tuple[str, str]:
    """The first host-name rule that reaches every other node over a working interface, or
    ``interface:NAME`` of the best working interface; ("", why) when none does."""
    tried = []
    for form in _forms(found):
        tries = _attempts_by_form(found, form)
        if not tries:
            continue
        over = {_interface_of(found, a.peer, a.address) for a in tries}
        described = "; ".join(
            f"{a.prober} -> {a.host}: {a.address or '-'}"
            f" ({_interface_of(found, a.peer, a.address) or 'no interface of the node'}), "
            f"{a.outcome}"
            for a in tries
        )
        tried.append(f"{form}: {described}")
        if all(a.reached for a in tries) and over <= set(working):
            return form, "host names resolved and reached by TCP: " + " | ".join(tried)
    if working:
        story = " | ".join(tried) or "no host-name rule tried"
        return f"interface:{working[0]}", (
            f"no host-name rule reached every node over a working interface ({story}); rank 0 "
            f"publishes its {working[0]} address"
        )
    return "", ""


def _no_rule(found: Findings) -> str:
    return (
        f"{UNVERIFIED}no host name and no interface address of one node reached the others "
        f"(probed {found.date}); ask the site: which network do compute nodes reach each "
        "other on, and by which host name?"
    )


def _transport(found: Findings, working: list[str]) -> Fact:
    kinds = {i.name: i.kind for node in found.nodes for i in node.interfaces}
    if any(kinds.get(name) == "infiniband" or name.startswith("ib") for name in working):
        return Fact(
            "fabric.transport",
            "ib",
            f"{UNVERIFIED}an InfiniBand interface carried the probe's TCP; whether NCCL uses "
            "IB verbs is what `ddpimg doctor --site THIS` on two nodes checks",
        )
    if any(name.startswith(SLINGSHOT_PREFIX) for name in working):
        return Fact(
            "fabric.transport",
            "ofi",
            f"{UNVERIFIED}Slingshot-named interfaces ({SLINGSHOT_PREFIX}*); ask the site where "
            "its aws-ofi-nccl plugin is",
        )
    return Fact(
        "fabric.transport",
        "socket",
        found.probed("no InfiniBand or Slingshot interface between the nodes: TCP sockets"),
    )


def _local_dir_facts(found: Findings) -> list[Fact]:
    if not found.nodes:
        return []
    first = found.nodes[0]
    everywhere = {d.path for d in first.local_dirs}
    for node in found.nodes[1:]:
        everywhere &= {d.path for d in node.local_dirs}
    local = [
        d
        for d in first.local_dirs
        if d.path in everywhere and not d.network and d.path not in found.shared_dirs
    ]
    if not local:
        return []
    disks = sorted((d for d in local if not d.ram), key=lambda d: -d.free_bytes)
    chosen: LocalDir = disks[0] if disks else max(local, key=lambda d: d.free_bytes)
    seen = (
        "not seen by the other nodes"
        if found.on_compute_nodes
        else "on the login node, not a compute node"
    )
    how = f"{chosen.how}: {chosen.fstype}, {chosen.free_bytes / GIB:.0f} GiB free, {seen}"
    kind = "ram" if chosen.ram else "disk"
    if not found.on_compute_nodes:
        source = f"{UNVERIFIED}{how}; ask the site: which node-local space do jobs get?"
        return [Fact("job.local_dir", chosen.how, source), Fact("job.local_dir_kind", kind, source)]
    source = found.probed(how)
    if chosen.ram:
        source = (
            f"{UNVERIFIED}{how}: only memory-backed node-local space was found; ask the "
            "site: do the nodes have a local disk?"
        )
    return [Fact("job.local_dir", chosen.how, source), Fact("job.local_dir_kind", kind, source)]


def _hardware_facts(found: Findings) -> list[Fact]:
    from ddpimg.hardware.builds import BUILDS
    from ddpimg.hardware.compat import GpuInfo, build_fits

    first = found.nodes[0] if found.nodes else None
    gpu = first.gpu if first else None
    if first is None or gpu is None or not found.on_compute_nodes:
        where = "on the login node" if not found.on_compute_nodes else "on the compute nodes"
        return [
            Fact(
                "hardware.build",
                "",
                f"{UNVERIFIED}no GPU visible to the probe {where} (no nvidia-smi, no /dev/kfd); "
                "ask the site: which GPUs and which driver do the GPU nodes have?",
            )
        ]
    facts = [Fact("hardware.gpus", gpu.name, found.probed(f"{gpu.how}: {gpu.count} x {gpu.name}"))]
    capability = None
    if gpu.capability:
        major, _, minor = gpu.capability.partition(".")
        capability = (int(major), int(minor or 0))
        facts.append(
            Fact("hardware.arch", f"sm_{major}{minor or 0}", found.probed(f"{gpu.how} compute_cap"))
        )
    info = GpuInfo(
        vendor="nvidia" if gpu.vendor == "nvidia" else "amd",
        name=gpu.name,
        capability=capability,
        driver_version=gpu.driver,
    )
    fitting = [b for b in BUILDS.values() if b.machine == first.machine and build_fits(b, info)]
    if fitting:
        how = f"{first.machine}, driver {gpu.driver or '?'}: the first flavour that fits"
        facts.append(Fact("hardware.build", fitting[0].name, found.probed(how)))
    else:
        facts.append(
            Fact(
                "hardware.build",
                "",
                f"{UNVERIFIED}no flavour of ddpimg's fits {gpu.name} on {first.machine} with "
                f"driver {gpu.driver or '?'}; ask the site whether a newer driver is planned",
            )
        )
    return facts
