"""The container runtimes a site may use, as data: each one's name, the form of image
reference it takes, and what it is. Pure: no torch, no os.environ.

A profile's ``[container]`` section names the site's runtime (``container.runtime``) and,
optionally, the image reference it expects; ``ddpimg sbatch`` renders that runtime's own
invocation (:mod:`ddpimg.jobs.runtimes`). The image defaults to the site's flavour
(``hardware.build``) named in the runtime's form by :func:`ddpimg.imagenames.image_names`.
"""

from __future__ import annotations

from typing import NamedTuple

from ddpimg.imagenames import ImageNames


class Runtime(NamedTuple):
    """One runtime: ``image_form`` is the :class:`~ddpimg.imagenames.ImageNames` field its
    image reference takes (``sif``, ``tag``, ``sqsh``), "" when it runs no image."""

    name: str
    image_form: str
    about: str


RUNTIMES: dict[str, Runtime] = {
    runtime.name: runtime
    for runtime in (
        Runtime("apptainer", "sif", "apptainer exec IMAGE.sif in each task"),
        Runtime("singularity", "sif", "SingularityCE's singularity exec (LUMI)"),
        Runtime("podman-hpc", "tag", "NERSC's podman-hpc shared-run (Perlmutter)"),
        Runtime("pyxis", "sqsh", "enroot through Slurm's pyxis plugin: srun --container-image"),
        Runtime(
            "edf",
            "sqsh",
            "an environment definition file and srun --environment (CSCS Container Engine)",
        ),
        Runtime("docker", "tag", "docker run (one machine, CI, laptops)"),
        Runtime("none", "", "no container: the job's own environment (a venv install)"),
    )
}
DEFAULT_RUNTIME = "apptainer"
# Images that are files on the cluster's file system, which --submit checks.
FILE_IMAGE_FORMS = ("sif", "sqsh")


def image_reference(runtime: str, names: ImageNames) -> str:
    """The image an ``runtime`` task starts when none is given: the flavour's name in the
    runtime's form (pyxis takes a file only when its path has a ``/``)."""
    form = RUNTIMES[runtime].image_form
    if not form:
        return ""
    reference: str = getattr(names, form)
    return f"./{reference}" if runtime == "pyxis" else reference
