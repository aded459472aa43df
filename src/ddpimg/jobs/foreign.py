"""ddpimg inside an image it did not build: ``ddpimg sbatch --image SITE.sif --ddpimg-from DIR``.

A site's own PyTorch container (LUMI's AI containers with RCCL and the libfabric plugin, NGC
images at CSCS) keeps the vendor's stack; ddpimg, a pure-Python package, is installed beside
it once, into a virtual environment made with ``--system-site-packages`` over the image's
Python (docs/containers.md: "ddpimg in a site's own image"). The job then:

- binds DIR into the container at its own path (with the other binds) and starts
  ``DIR/bin/train`` (``DIR/bin/ddpimg``) instead of the image's ``train``;
- starts the step without the host's linker and Python variables
  (:data:`ddpimg.cleanenv.SOFTWARE_STACK`), so that inside the container the only ones set
  are the image's own;
- tells ``train`` to keep those (``--keep-env``): the module-free environment must not strip
  what the image's stack needs (its ``LD_LIBRARY_PATH``, its conda or venv variables).
"""

from __future__ import annotations

import shlex

from ddpimg.cleanenv import SOFTWARE_STACK
from ddpimg.jobs.findings import ERROR, WARNING, Finding
from ddpimg.jobs.spec import DEFAULT, JobSpec

WRAPPER = "without_host_stack"
KEEP_IMAGE_STACK = ",".join(SOFTWARE_STACK)
ENTRY_POINTS = ("train", "ddpimg")


def entry_point(word: str, ddpimg_from: str) -> str:
    """The command's first word with ddpimg taken from ``ddpimg_from`` (unchanged when it is
    not a bare ``train`` / ``ddpimg``)."""
    if not ddpimg_from or word not in ENTRY_POINTS:
        return word
    return f"{ddpimg_from.rstrip('/')}/bin/{word}"


def wrapper_lines(spec: JobSpec) -> list[str]:
    """The shell function the step's srun is started through (none without --ddpimg-from)."""
    if not spec.ddpimg_from:
        return []
    names = [pattern for pattern in SOFTWARE_STACK if "*" not in pattern]
    prefixes = [pattern.removesuffix("*") for pattern in SOFTWARE_STACK if "*" in pattern]
    loop = " ".join(f"${{!{prefix}@}}" for prefix in prefixes)
    return [
        "# --ddpimg-from: ddpimg runs on the image's own Python and libraries, so the step",
        "# starts without the host's (the image sets its own; train keeps them: --keep-env).",
        f"{WRAPPER}() {{",
        f"    unset {' '.join(names)}",
        "    local name",
        f'    for name in {loop}; do unset "$name"; done',
        '    exec "$@"',
        "}",
        "",
    ]


def srun_word(spec: JobSpec) -> str:
    """How the step's srun line starts."""
    return f"{WRAPPER} srun" if spec.ddpimg_from else "srun"


def keep_words(spec: JobSpec) -> list[str]:
    """train's ``--keep-env`` for the image's stack, quoted."""
    return ["--keep-env", shlex.quote(KEEP_IMAGE_STACK)] if spec.ddpimg_from else []


def check_foreign(spec: JobSpec, site_image: bool) -> list[Finding]:
    """Errors in using ``--ddpimg-from`` (``site_image``: the image is the site's own, which
    carries no ddpimg, so --ddpimg-from is needed)."""
    if not spec.ddpimg_from:
        if site_image:
            return [
                Finding(
                    ERROR,
                    f"the site's image {spec.image} is the site's own PyTorch container, "
                    "which does not carry ddpimg",
                    "install ddpimg for it once and pass --ddpimg-from DIR (docs/containers.md: "
                    "ddpimg in a site's own image), or --image a ddpimg image",
                )
            ]
        return []
    if spec.runtime == "none":
        return [
            Finding(
                ERROR,
                f"{spec.origin('ddpimg_from')} installs ddpimg into a container image, but "
                "--runtime none runs no image",
                f"--runtime apptainer (or the site's) with --image, or drop --ddpimg-from "
                f"and put {spec.ddpimg_from}/bin on PATH",
            )
        ]
    if spec.source("image") == DEFAULT:
        return [
            Finding(
                ERROR,
                f"{spec.origin('ddpimg_from')} without an image of the site's: "
                f"{spec.image} is ddpimg's own image, which carries ddpimg already",
                "--image SITE.sif (the site's PyTorch container ddpimg was installed for)",
            )
        ]
    words = spec.command[:1]
    if words and words[0] not in ENTRY_POINTS:
        return [
            Finding(
                WARNING,
                f"{spec.origin('ddpimg_from')} replaces train or ddpimg, but the command is "
                f"{words[0]}",
                f"start {spec.ddpimg_from}/bin/train yourself, or use train --script FILE",
            )
        ]
    return []
