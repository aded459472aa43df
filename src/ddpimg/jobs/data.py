"""Where a job's training data sits: bound from a squashfs image, or staged to node-local disk.

Parallel file systems serve many small reads badly; the sites' guides say to read a dataset
from one packed file, or to copy it to each node's own disk first. ``ddpimg sbatch`` does
either for ``train --data``:

- ``--data-image FILE``: a squashfs image (``mksquashfs`` of ``ddpimg data pack``'s shards)
  mounted read-only inside the container at ``/data`` by Apptainer / SingularityCE
  (``--bind FILE:/data:image-src=/``, as LUMI's and CSC's guides show) or by the CSCS
  Container Engine (an EDF mount ``FILE:/data:sqsh``); the kernel reads one file. Other
  runtimes cannot mount an image file: stage instead.
- ``--stage-data DIR``: before the training step, one task per node copies DIR to
  ``--local-dir`` (the site's node-local directory; default ``$TMPDIR``, else ``/tmp``)
  with ``cp -rp``, which keeps the modification times the dataset's index checks, so the
  copy needs no new index; the step reads the copy (bound into the container at the same
  path) and the copies are removed after the step. A requeued job stages again: it may get
  other nodes.

Either way the train command's ``--data`` is set to where the data is: a ``--data`` the
user gave must be that place, or (for staging) the directory staged.
"""

from __future__ import annotations

import shlex

from ddpimg.jobs.command import TRAIN, TrainCommand
from ddpimg.jobs.directives import SINGLE_QUOTED
from ddpimg.jobs.findings import ERROR, Finding
from ddpimg.jobs.spec import JobSpec

IMAGE_TARGET = "/data"
IMAGE_RUNTIMES = ("apptainer", "singularity", "edf")
STAGED = "DDPIMG_DATA"
# The copy's path, job-level: expanded by the batch shell; double quotes keep it one word.
STAGED_WORD = f'"${{{STAGED}}}"'


def data_word(spec: JobSpec) -> str | None:
    """The shell word train's ``--data`` gets, or None when the job leaves it as given."""
    if spec.data_image:
        return IMAGE_TARGET
    if spec.stage_data:
        return STAGED_WORD
    return None


def image_bind(spec: JobSpec) -> str | None:
    """Apptainer's bind of the squashfs image, quoted, or None."""
    if not spec.data_image:
        return None
    return shlex.quote(f"{spec.data_image}:{IMAGE_TARGET}:image-src=/")


def image_mount(spec: JobSpec) -> str | None:
    """The Container Engine's EDF mount of the squashfs image (unquoted: it goes into the EDF
    as a TOML string), or None. The engine expands ${PWD} in a relative path's stead."""
    if not spec.data_image:
        return None
    image = spec.data_image
    path = image if image.startswith("/") else "${PWD}/" + image.removeprefix("./")
    return f"{path}:{IMAGE_TARGET}:sqsh"


def staged_bind(target_too: bool) -> str:
    """The staged copy's bind, host path = path inside (``HOST:TARGET`` when ``target_too``)."""
    return f'"${{{STAGED}}}:${{{STAGED}}}"' if target_too else STAGED_WORD


def check_data(spec: JobSpec) -> list[Finding]:
    """Errors in how ``spec`` places its data."""
    if not (spec.data_image or spec.stage_data):
        return []
    option = "--data-image" if spec.data_image else "--stage-data"
    if spec.data_image and spec.stage_data:
        return [
            Finding(
                ERROR,
                "--data-image and --stage-data both given",
                "give one: a squashfs image to mount, or a directory to copy to each node",
            )
        ]
    command = TrainCommand(spec.command)
    if command.kind != TRAIN or command.script:
        return [
            Finding(
                ERROR,
                f"{option} sets train's --data, but the job's command is not a bundled trainer "
                f"({' '.join(spec.command[:3])} ...)",
                f"drop {option} and bind or copy the data in your own script",
            )
        ]
    if spec.data_image and spec.runtime not in IMAGE_RUNTIMES:
        return [
            Finding(
                ERROR,
                f"--data-image needs apptainer, singularity or the CSCS Container Engine "
                f"(edf) to mount the image, but the job's runtime is {spec.runtime}",
                f"copy the dataset to each node instead: --stage-data DIR (the unpacked "
                f"shards), or --runtime {IMAGE_RUNTIMES[0]}",
            )
        ]
    given = command.option("--data")
    allowed = (IMAGE_TARGET,) if spec.data_image else (spec.stage_data,)
    if given is not None and given.rstrip("/") not in {a.rstrip("/") for a in allowed}:
        place = IMAGE_TARGET if spec.data_image else "the node-local copy"
        return [
            Finding(
                ERROR,
                f"the command's --data {given} is not where {option} puts the data ({place})",
                f"drop --data from the command (ddpimg sbatch sets it), or give --data "
                f"{allowed[0]}",
            )
        ]
    return []


def staging_lines(spec: JobSpec) -> list[str]:
    """Script lines before the training step that copy the data to every node."""
    if not spec.stage_data:
        return []
    source = shlex.quote(spec.stage_data.rstrip("/") or "/")
    # `--`: a directory whose name starts with a dash is not an option.
    copy = shlex.quote('mkdir -p -- "$1" && cp -rp -- "$0"/. "$1"/')
    return [
        "# --stage-data: copy the dataset to each node's own disk once, before training;",
        "# cp -p keeps the modification times the dataset's index checks, so the copy needs",
        "# no new index. The step reads the copy, bound into the container at the same path.",
        # local_dir may name variables of the node (ddpimg.shellpath), hence double quotes.
        f'export {STAGED}="{spec.local_dir}/ddpimg-data-${{SLURM_JOB_ID}}"',
        SINGLE_QUOTED,
        f"srun --nodes={spec.step_nodes} --ntasks-per-node=1 --ntasks={spec.step_nodes} "
        f'bash -c {copy} {source} "${{{STAGED}}}" || {{',
        f"    printf 'ddpimg: staging %s to %s failed\\n' {source} \"${{{STAGED}}}\" >&2",
        "    exit 1",
        "}",
        "",
    ]


def cleanup_lines(spec: JobSpec) -> list[str]:
    """Script lines after the training step that remove the node-local copies."""
    if not spec.stage_data:
        return []
    return [
        "# Remove the staged copies: node-local space is not this job's alone.",
        f"srun --nodes={spec.step_nodes} --ntasks-per-node=1 --ntasks={spec.step_nodes} "
        f'rm -rf -- "${{{STAGED}}}"',
        "",
    ]
