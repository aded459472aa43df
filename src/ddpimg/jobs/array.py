"""A sweep as one Slurm array job (``ddpimg sbatch --sweep``): each array task runs one point.

The batch shell picks its task's point from a ``case`` on ``SLURM_ARRAY_TASK_ID`` (the
point's index in the sweep): the point's own train options, its directory under the sweep's
(``--out``) and, for a script, the script with the point's values, as one bash array that
the training step's command line ends with. The first task to start writes the sweep's
``sweep.json`` (its content is in the script, single-quoted). A task is requeued alone on
preemption, by its own id (``JOB_A_I``, the job body's rule), and continues in its own
directory with ``--resume auto``.

The indices are the points' places in the sweep, so a sweep submitted again runs only what
did not complete (``--array=1,3``) with each point at its place. ``array_spec`` writes them
the way ``#SBATCH --array`` takes them, with ``%K`` for ``--max-parallel``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ddpimg.sweep.spec import SWEEP_FILE

POINT = "point"
POINT_WORD = '"${point[@]}"'
OUT_WORD = '"$out"'


@dataclass(frozen=True)
class ArrayPoint:
    """One task: its index, the point's name and its words after the shared options (the
    point's options; ``--out`` and the script are added here)."""

    index: int
    name: str
    options: tuple[str, ...]
    script: tuple[str, ...]


@dataclass(frozen=True)
class ArrayJob:
    """A sweep's array: its name, its directory (relative to the job's directory, or
    absolute), ``sweep.json``'s text, and the tasks to run."""

    sweep: str
    directory: str
    document: str
    points: tuple[ArrayPoint, ...]

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(point.index for point in self.points)


def array_spec(indices: Sequence[int], max_parallel: int | None = None) -> str:
    """``0-3``, ``1,3,5-7``, with ``%K`` for at most K at once: ``#SBATCH --array=``'s form."""
    ordered = sorted(set(indices))
    if not ordered:
        raise ValueError("an array needs at least one index")
    parts: list[str] = []
    start = previous = ordered[0]
    for index in [*ordered[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    throttle = f"%{max_parallel}" if max_parallel else ""
    return ",".join(parts) + throttle


def point_lines(array: ArrayJob) -> list[str]:
    """The batch shell's choice of its task's point, and ``sweep.json`` written once."""
    directory = shlex.quote(array.directory)
    lines = [
        f"# Sweep {array.sweep}: each array task trains one point, in a directory of its own",
        f"# under {array.directory} (sweep.json there lists every point); a task that is",
        "# preempted is requeued alone and goes on in its own directory.",
        'case "${SLURM_ARRAY_TASK_ID:-}" in',
    ]
    for point in array.points:
        out = shlex.quote(f"{array.directory}/{point.name}")
        words = [*(shlex.quote(w) for w in point.options), "--out", OUT_WORD]
        words += [shlex.quote(w) for w in point.script]
        lines.append(f"    {point.index}) out={out}; {POINT}=({' '.join(words)}) ;;")
    lines += [
        '    *) echo "ddpimg: array task ${SLURM_ARRAY_TASK_ID:-(none)} is not a point of '
        f'sweep {array.sweep}" >&2; exit 2 ;;',
        "esac",
        f"mkdir -p {directory}",
        f"if [ ! -e {directory}/{SWEEP_FILE} ]; then",
        f"    printf '%s\\n' {shlex.quote(array.document)} > {directory}/"
        f'{SWEEP_FILE}."$SLURM_JOB_ID" &&',
        f'        mv -f {directory}/{SWEEP_FILE}."$SLURM_JOB_ID" {directory}/{SWEEP_FILE}',
        "fi",
        "",
    ]
    return lines
