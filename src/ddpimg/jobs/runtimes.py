"""How each task of the training step starts the image, runtime by runtime
(:data:`ddpimg.site.container.RUNTIMES`): the GPU flag, the binds, how the environment gets
in, and the site's own options (``container.options``, only with the site's own runtime).

========================  ==================================================================
runtime                   the step's tasks run
========================  ==================================================================
``apptainer``             ``apptainer exec --nv --bind A,B IMAGE.sif COMMAND`` (``--rocm``
                          for AMD); the host environment passes in by itself
``singularity``           the same with SingularityCE's ``singularity`` (LUMI)
``podman-hpc``            ``podman-hpc shared-run --gpu --network=host --ipc=host
                          --user=0:0 --env 'SLURM_*' --volume ... TAG COMMAND`` (NERSC: one
                          container per node, each task exec'ed into it; rootless, so the
                          container's uid 0 is the user)
``pyxis``                 srun itself starts enroot: ``srun --container-image=./IMAGE.sqsh
                          --container-mounts=... --container-workdir=...``; pyxis passes
                          the task's environment and enroot's hook the GPUs
``edf``                   srun itself, with the CSCS Container Engine: ``srun
                          --environment=FILE``; the script writes FILE (image, mounts,
                          working directory, the site's annotations such as the aws-ofi-nccl
                          hook) before the step
``docker``                ``docker run --rm --network=host --ipc=host --user ... --env NAME
                          ... --volume ... TAG COMMAND``: docker passes no host variable by
                          itself, so every one ddpimg reads is named
``none``                  the command itself, from the job's environment
========================  ==================================================================

Every runtime binds the job's working directory and ``spec.binds`` (the site's file systems,
the fabric's host paths, ``--bind``) the same way, and the node-local copy of
``--stage-data`` at its own path; apptainer, singularity and edf also mount ``--data-image``
(``ddpimg.jobs.data``). Add-ons (``--addon``) are mounted at /opt/ddpimg/addons/NAME by
apptainer, singularity and edf, and bound from their copy unpacked on each node by the
others (``ddpimg.jobs.addons``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ddpimg.jobs.addons import (
    DIGESTS,
    apptainer_binds,
    edf_mounts,
    unpacked_binds,
    unpacked_mounts,
)
from ddpimg.jobs.data import STAGED, image_bind, image_mount, staged_bind
from ddpimg.jobs.spec import JobSpec
from ddpimg.site.fabric import split_bind
from ddpimg.site.model import SiteProfile
from ddpimg.tomlfile import toml_string
from ddpimg.topology.slurm import SLURM_VARIABLES

# Docker passes no host variables into a container: these are the ones ddpimg reads there.
DOCKER_ENV = tuple(sorted({name for names in SLURM_VARIABLES.values() for name in names}))
DOCKER_ENV_PER_LINE = 4
WORKDIR = '"${PWD}"'
WORKDIR_BIND = '"${PWD}:${PWD}"'
EDF_FILE = '"${PWD}/ddpimg-${SLURM_JOB_ID}.toml"'
EDF_END = "EDF"


@dataclass(frozen=True)
class Invocation:
    """What a runtime adds to the step: ``srun_options`` (pyxis and the Container Engine
    are srun options), ``prefix`` (lines of words before the command: the runtime's own
    command), ``preamble`` (script lines before the step) and ``comments`` (why)."""

    srun_options: tuple[str, ...] = ()
    prefix: tuple[tuple[str, ...], ...] = ()
    preamble: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()


def invocation(spec: JobSpec, profile: SiteProfile) -> Invocation:
    """How ``spec``'s tasks start the image on ``profile``'s site."""
    options = profile.container.options if spec.runtime == profile.container.runtime else ()
    render = _RENDERERS[spec.runtime]
    return render(spec, profile, tuple(shlex.quote(option) for option in options))


def _host_and_target(bind: str) -> str:
    return shlex.quote(":".join(split_bind(bind)))


def _apptainer(spec: JobSpec, profile: SiteProfile, options: Sequence[str]) -> Invocation:
    words = [spec.runtime, "exec"]
    flag = "--nv" if spec.gpu_vendor == "nvidia" else "--rocm"
    if spec.gpus_requested:
        words.append(flag)
    if spec.binds:
        words += ["--bind", shlex.quote(",".join(spec.binds))]
    for bind in (image_bind(spec), spec.stage_data and staged_bind(target_too=False)):
        if bind:
            words += ["--bind", bind]
    for bind in apptainer_binds(spec):
        words += ["--bind", bind]
    words += [*options, shlex.quote(spec.image)]
    comments = [
        f"# {spec.runtime} passes the host environment (SLURM_*) into the container; the working",
        "# directory and $HOME are bound by default"
        + (", --bind adds the site's file systems." if spec.binds else "."),
    ]
    if spec.gpus_requested:
        comments.append(f"# {flag} makes the host's GPU driver visible inside.")
    if spec.addons:
        comments.append("# image-src=/ mounts each add-on's squashfs read-only, unpacking nothing.")
    return Invocation(prefix=(tuple(words),), comments=tuple(comments))


def _docker(spec: JobSpec, profile: SiteProfile, options: Sequence[str]) -> Invocation:
    run = ["docker", "run", "--rm", "--network=host", "--ipc=host", '--user="$(id -u):$(id -g)"']
    if spec.gpus_requested:
        run += (
            ["--gpus=all"]
            if spec.gpu_vendor == "nvidia"
            else ["--device=/dev/kfd", "--device=/dev/dri"]
        )
    envs = [f"--env {name}" for name in (*DOCKER_ENV, *([DIGESTS] if spec.addons else []))]
    env_lines = [
        tuple(envs[i : i + DOCKER_ENV_PER_LINE]) for i in range(0, len(envs), DOCKER_ENV_PER_LINE)
    ]
    volumes = _volumes(spec)
    return Invocation(
        prefix=(tuple(run), *env_lines, (*volumes, *options, shlex.quote(spec.image))),
        comments=(
            "# docker passes no host variables: --env names the ones ddpimg reads. Host network",
            "# and IPC for the rendezvous and shared memory; your user, so that you own the run.",
        ),
    )


def _volumes(spec: JobSpec) -> list[str]:
    volumes = [f"--volume {WORKDIR_BIND}", f"--workdir {WORKDIR}"]
    volumes += [f"--volume {_host_and_target(path)}" for path in spec.binds]
    if spec.stage_data:
        volumes.append(f"--volume {staged_bind(target_too=True)}")
    volumes += [f"--volume {bind}" for bind in unpacked_binds(spec)]
    return volumes


def _podman_hpc(spec: JobSpec, profile: SiteProfile, options: Sequence[str]) -> Invocation:
    # shared-run: one container per node, each task `exec`ed into it, which podman-hpc's own
    # help calls the way to start a container from srun (`run` would start one per task).
    run = ["podman-hpc", "shared-run"]
    if spec.gpus_requested:
        run += (
            ["--gpu"] if spec.gpu_vendor == "nvidia" else ["--device=/dev/kfd", "--device=/dev/dri"]
        )
    run += ["--network=host", "--ipc=host", "--user=0:0", "--env 'SLURM_*'"]
    if spec.addons:
        run.append(f"--env {DIGESTS}")
    comments = [
        "# podman-hpc shared-run starts one container per node and execs each task into it; the",
        "# image must be on the compute nodes first: `podman-hpc migrate IMAGE` (or pull) it",
        "# on the login node. --env 'SLURM_*' gives ddpimg the step; rootless podman maps the",
        "# container's uid 0 to you, so the run's files are yours; host network and IPC for the",
        "# rendezvous and shared memory.",
    ]
    if spec.gpus_requested and spec.gpu_vendor == "nvidia":
        comments.append(
            "# --gpu: podman-hpc's module that binds the host's GPU driver and devices."
        )
    return Invocation(
        prefix=(tuple(run), (*_volumes(spec), *options, shlex.quote(spec.image))),
        comments=tuple(comments),
    )


def _double_quoted(text: str) -> str:
    """``text`` for the inside of double quotes: what bash acts on there, escaped."""
    for char in ("\\", '"', "$", "`"):
        text = text.replace(char, "\\" + char)
    return text


def _pyxis(spec: JobSpec, profile: SiteProfile, options: Sequence[str]) -> Invocation:
    # One double-quoted word: the job's variables expand in it, the binds are escaped.
    staged = [f"${{{STAGED}}}:${{{STAGED}}}"] if spec.stage_data else []
    binds = [_double_quoted(":".join(split_bind(bind))) for bind in spec.binds]
    mounts = '"' + ",".join(["${PWD}:${PWD}", *binds, *staged, *unpacked_mounts(spec)]) + '"'
    return Invocation(
        srun_options=(
            f"--container-image={shlex.quote(spec.image)}",
            f"--container-mounts={mounts}",
            f"--container-workdir={WORKDIR}",
            *options,
        ),
        comments=(
            "# pyxis starts each task in the enroot image (the srun options above), with the",
            "# task's environment; enroot's NVIDIA hook makes the allocated GPUs visible.",
        ),
    )


def edf_lines(spec: JobSpec, profile: SiteProfile) -> list[str]:
    """The Container Engine's environment definition (TOML) of the step."""
    mounts = ["${PWD}", *(":".join(split_bind(bind)) for bind in spec.binds)]
    if spec.stage_data:  # exported by the script; the engine expands it
        mounts.append(f"${{{STAGED}}}")
    squashfs = image_mount(spec)
    if squashfs:
        mounts.append(squashfs)
    mounts += edf_mounts(spec)
    # An absolute path: the engine expands ${PWD}, the job's working directory.
    image = spec.image if spec.image.startswith("/") else "${PWD}/" + spec.image.removeprefix("./")
    lines = [
        f"image = {toml_string(image)}",
        f"mounts = [{', '.join(toml_string(mount) for mount in mounts)}]",
        'workdir = "${PWD}"',
    ]
    annotations = profile.container.annotations if spec.runtime == profile.container.runtime else ()
    if annotations:
        lines += ["", "[annotations]"]
        # Names are dotted bare keys (ddpimg.site.schema checks them): they need no quotes.
        lines += [f"{name} = {toml_string(value)}" for name, value in annotations]
    return lines


def _edf(spec: JobSpec, profile: SiteProfile, options: Sequence[str]) -> Invocation:
    preamble = (
        "# The Container Engine's environment definition file (EDF) of the step: the image,",
        "# the file systems and the working directory (the engine expands ${...} itself), and",
        "# the site's hooks. Written at each start, so a requeued job writes the same file.",
        f"edf={EDF_FILE}",
        f"cat > \"$edf\" <<'{EDF_END}'",
        *edf_lines(spec, profile),
        EDF_END,
        "",
    )
    return Invocation(
        srun_options=('--environment="$edf"', *options),
        preamble=preamble,
        comments=(
            "# --environment starts each task in the EDF's container, with the task's",
            "# environment; the engine's hooks add the GPUs and the network stack.",
        ),
    )


def _none(spec: JobSpec, profile: SiteProfile, options: Sequence[str]) -> Invocation:
    return Invocation(
        comments=("# --runtime none: train from the job's own environment (PATH), no container.",)
    )


_RENDERERS = {
    "apptainer": _apptainer,
    "singularity": _apptainer,
    "docker": _docker,
    "podman-hpc": _podman_hpc,
    "pyxis": _pyxis,
    "edf": _edf,
    "none": _none,
}
