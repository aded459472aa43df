"""Node ranges: ``ddpimg sbatch --nodes MIN-MAX`` asks Slurm for MIN to MAX nodes, so that a
job requeued after it lost a node can start again on the nodes that are left.

The script's training step then uses the nodes it got (``srun --nodes=$SLURM_JOB_NUM_NODES``)
and ``train --resume auto`` continues from the last checkpoint on that many (every strategy
loads its checkpoints at another world size). That keeps the loss trajectory only when the
global batch stays the same on every node count in the range (``train --global-batch-size
G``, divisible by the ranks of each, and by ranks x ``--micro-batch-size`` when the ranks
accumulate): ``check_node_range`` makes these errors before anything is written. A model
with synchronised BatchNorm and micro-batches normalises over micro-batch x ranks samples,
which changes with the nodes: a warning says so.
"""

from __future__ import annotations

import math
import os
import re

from ddpimg.errors import JobError
from ddpimg.jobs.command import TRAIN, TrainCommand
from ddpimg.jobs.findings import ERROR, WARNING, Finding
from ddpimg.jobs.spec import JobSpec

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def parse_nodes(text: str, where: str) -> tuple[int, int]:
    """``"3"`` -> (3, 3); ``"2-3"`` -> (2, 3), as sbatch's ``--nodes`` writes a range."""
    match = _RANGE.fullmatch(text.strip())
    if match is None:
        raise JobError(
            f"{where}: {text!r} is not a node count N or a range MIN-MAX",
            hint="--nodes 2, or --nodes 2-4 to let Slurm start the job on 2 to 4 nodes",
        )
    low = int(match.group(1))
    high = int(match.group(2) or low)
    if not 1 <= low <= high:
        raise JobError(
            f"{where}: {text!r}: the range must go from at least 1 up (MIN <= MAX)",
            hint="--nodes 2-4: at least 2 nodes, at most 4",
        )
    return low, high


def check_node_range(spec: JobSpec) -> list[Finding]:
    """Errors for a node range the training cannot follow (see the module docstring)."""
    if not spec.node_range:
        return []
    command = TrainCommand(spec.command)
    if command.kind != TRAIN or command.script:
        return []
    where = f"--nodes {spec.min_nodes}-{spec.nodes}"
    counts = range(spec.min_nodes, spec.nodes + 1)
    ranks = [count * spec.ranks_per_node for count in counts]
    findings: list[Finding] = []
    micro_text = command.option("--micro-batch-size")
    micro = int(micro_text) if micro_text and micro_text.isdigit() and int(micro_text) else 1
    if micro > 1 and _synchronised_batchnorm(command):
        findings.append(
            Finding(
                WARNING,
                f"{where}: train resnet with --micro-batch-size {micro} and synchronised "
                f"BatchNorm normalises over {micro} x the ranks' samples, which changes with "
                "the nodes: a checkpoint of one node count is refused on another (an "
                "architecture with BatchNorm)",
                hint="add --no-sync-batchnorm (statistics of each rank's micro-batch: the same "
                "on any node count), or drop --micro-batch-size",
            )
        )
    text = command.option("--global-batch-size")
    if not text or not text.isdigit():
        findings.append(
            Finding(
                ERROR,
                f"{where}: the command gives no --global-batch-size, so the global batch "
                "(--batch-size x ranks) would change with the nodes Slurm gives, and a job "
                "requeued on fewer nodes would not resume (another configuration)",
                hint=f"add train --global-batch-size G, with G divisible by "
                f"{', '.join(map(str, ranks))} (the ranks of each node count)",
            )
        )
        return findings
    global_batch = int(text)
    units = [rank * micro for rank in ranks]
    uneven = [count for count, unit in zip(counts, units, strict=True) if global_batch % unit]
    if uneven:
        of = f" x --micro-batch-size {micro}" if micro > 1 else ""
        findings.append(
            Finding(
                ERROR,
                f"{where}: --global-batch-size {global_batch} is not divisible by the ranks{of} "
                "of "
                + ", ".join(
                    f"{count} nodes ({count * spec.ranks_per_node * micro})" for count in uneven
                ),
                hint="a global batch every rank count of the range divides, e.g. "
                f"{math.lcm(*units)}, or a narrower range",
            )
        )
    return findings


def _synchronised_batchnorm(command: TrainCommand) -> bool:
    """Whether the command (``train resnet ...`` or ``ddpimg train resnet ...``) trains resnet
    with BatchNorm over the ranks (its default)."""
    first = 2 if command.words and os.path.basename(command.words[0]) == "ddpimg" else 1
    positional = [word for word in command.head[first : first + 1] if not word.startswith("-")]
    return positional == ["resnet"] and "--no-sync-batchnorm" not in command.head
