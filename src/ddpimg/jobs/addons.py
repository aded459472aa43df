"""Add-ons in a job: ``ddpimg sbatch --addon FILE`` (repeatable; a site profile's and a job
file's ``addons`` list too), each mounted read-only at ``/opt/ddpimg/addons/NAME`` (NAME:
the file's name without ``.addon.sqsh``) the way the job's runtime can:

- apptainer, singularity: bound as an image, ``--bind FILE:/opt/ddpimg/addons/NAME:image-src=/``
  (the squashfs is mounted, nothing unpacked; LUMI's and CSC's guides bind squashfs this way);
- edf (the CSCS Container Engine): an EDF mount ``FILE:/opt/ddpimg/addons/NAME:sqsh``;
- pyxis, podman-hpc, docker, none: these cannot mount a squashfs file for a user (enroot
  needs privileges for it, NVIDIA/enroot#180, and a FUSE mount started in one job step dies
  with that step), so before the step each node unpacks it once onto its own disk
  (``unsquashfs``, which enroot uses for its own images; into ``--local-dir``), and the
  runtime binds that directory read-only; it is removed after the step. ``none`` points the
  job's own Python at it (``DDPIMG_ADDON_ROOT``; its environment needs ``ddpimg addon
  install-hook`` once).

At the job's start the batch script computes each file's sha256 (``DDPIMG_ADDONS``), which
every run's manifest.json records: the file that ran, not the one that was rendered for.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ddpimg.addon.sitepath import ROOT as TARGET_ROOT
from ddpimg.addon.sitepath import ROOT_VARIABLE, mount_name
from ddpimg.jobs.directives import SINGLE_QUOTED
from ddpimg.jobs.findings import ERROR, Finding
from ddpimg.jobs.spec import JobSpec

DIGESTS = "DDPIMG_ADDONS"
UNPACKED = "DDPIMG_ADDON_DIR"
MOUNT_RUNTIMES = ("apptainer", "singularity", "edf")
UNPACK_RUNTIMES = ("pyxis", "podman-hpc", "docker", "none")


def named_addons(spec: JobSpec) -> list[tuple[str, str]]:
    """(name, path as given) of each add-on."""
    return [(mount_name(path), path) for path in spec.addons]


def path_word(path: str) -> str:
    """A path as one shell word; a relative one from the job's working directory."""
    return shlex.quote(path) if path.startswith("/") else '"${PWD}"/' + shlex.quote(path)


def unpacked_mounts(spec: JobSpec) -> list[str]:
    """``HOST:TARGET:ro`` of each unpacked add-on, for the inside of double quotes (a valid
    name holds nothing the shell acts on); none for the runtimes that mount the file."""
    if spec.runtime not in UNPACK_RUNTIMES:
        return []
    return [f"${{{UNPACKED}}}/{name}:{target(name)}:ro" for name, _ in named_addons(spec)]


def target(name: str) -> str:
    return f"{TARGET_ROOT}/{name}"


def apptainer_binds(spec: JobSpec) -> list[str]:
    """``--bind`` values, quoted: each add-on mounted as a squashfs image."""
    return [
        path_word(path) + shlex.quote(f":{target(name)}:image-src=/")
        for name, path in named_addons(spec)
    ]


def edf_mounts(spec: JobSpec) -> list[str]:
    """EDF mounts (TOML strings, unquoted; the engine expands ${PWD})."""
    return [
        f"{path if path.startswith('/') else '${PWD}/' + path}:{target(name)}:sqsh"
        for name, path in named_addons(spec)
    ]


def unpacked_binds(spec: JobSpec) -> list[str]:
    """The unpacked add-ons' binds as shell words, for podman-hpc's and docker's --volume."""
    return [f'"{mount}"' for mount in unpacked_mounts(spec)]


def addon_lines(spec: JobSpec) -> list[str]:
    """Script lines before the step: each add-on's sha256 (and, for the runtimes that cannot
    mount a squashfs, the copy unpacked on every node)."""
    if not spec.addons:
        return []
    lines = [
        "# Add-ons (ddpimg addon build): mounted read-only at /opt/ddpimg/addons/NAME, after",
        "# the image's own packages. Their sha256, taken now, goes into every run's manifest.",
        f"{DIGESTS}=",
    ]
    for name, path in named_addons(spec):
        word = path_word(path)
        lines += [
            f"sum=$(sha256sum < {word}) || {{",
            f"    printf 'ddpimg: add-on %s cannot be read\\n' {word} >&2",
            "    exit 1",
            "}",
            f'{DIGESTS}="${{{DIGESTS}:+${{{DIGESTS}}},}}{name}=${{sum%% *}}"',
        ]
    lines += [f"export {DIGESTS}", ""]
    if spec.runtime in UNPACK_RUNTIMES:
        lines += _unpack_lines(spec)
    return lines


def _unpack_lines(spec: JobSpec) -> list[str]:
    why = {
        "pyxis": "enroot cannot mount a squashfs file for a user, NVIDIA/enroot#180",
        "podman-hpc": "podman cannot mount a squashfs file for a user",
        "docker": "docker cannot mount a squashfs file",
        "none": "no container mounts it",
    }[spec.runtime]
    pairs = " ".join(f"{shlex.quote(name)} {path_word(path)}" for name, path in named_addons(spec))
    unpack = shlex.quote(
        'command -v unsquashfs >/dev/null || { echo "ddpimg: unsquashfs (squashfs-tools) is '
        'not on $(hostname -s)" >&2; exit 1; }; rm -rf -- "$0" && mkdir -p -- "$0" && '
        'while [ "$#" -gt 1 ]; do unsquashfs -no-progress -no-xattrs -dest "$0/$1" "$2" '
        ">/dev/null || exit 1; shift 2; done"
    )
    lines = [
        f"# Each node unpacks the add-ons once onto its own disk ({why});",
        "# the step binds them read-only, and they are removed after it.",
        f'export {UNPACKED}="{spec.local_dir}/ddpimg-addons-${{SLURM_JOB_ID}}"',
        SINGLE_QUOTED,
        f"srun --nodes={spec.step_nodes} --ntasks-per-node=1 --ntasks={spec.step_nodes} "
        f'bash -c {unpack} "${{{UNPACKED}}}" {pairs} || {{',
        "    echo 'ddpimg: unpacking the add-ons on the nodes failed' >&2",
        "    exit 1",
        "}",
    ]
    if spec.runtime == "none":
        lines += [
            "# No container: the job's own Python finds them here (ddpimg addon install-hook),",
            "# and not the user's site (~/.local), which would come before them.",
            f'export {ROOT_VARIABLE}="${{{UNPACKED}}}" PYTHONNOUSERSITE=1',
        ]
    return [*lines, ""]


def addon_cleanup_lines(spec: JobSpec) -> list[str]:
    """Script lines after the step: the unpacked copies removed."""
    if not spec.addons or spec.runtime not in UNPACK_RUNTIMES:
        return []
    return [
        "# Remove the unpacked add-ons: node-local space is not this job's alone.",
        f"srun --nodes={spec.step_nodes} --ntasks-per-node=1 --ntasks={spec.step_nodes} "
        f'rm -rf -- "${{{UNPACKED}}}"',
        "",
    ]


def check_addons(spec: JobSpec, submit: bool) -> list[Finding]:
    """Errors in the job's add-ons: two with one name; with ``submit``, a file that is not
    there or is no squashfs."""
    from ddpimg.addon.sitepath import valid_name
    from ddpimg.addon.squashfs import is_squashfs

    findings: list[Finding] = []
    seen: dict[str, str] = {}
    for name, path in named_addons(spec):
        if not valid_name(name):
            findings.append(
                Finding(
                    ERROR,
                    f"--addon {path}: {name!r} is no add-on name (letters, digits, '.', '_', '-')",
                    "give the NAME.addon.sqsh file ddpimg addon build wrote",
                )
            )
        elif name in seen:
            findings.append(
                Finding(
                    ERROR,
                    f"--addon {path} and --addon {seen[name]} are both add-on {name}",
                    "give each add-on once (a site profile's job.addons count too)",
                )
            )
        seen.setdefault(name, path)
        if submit and not is_squashfs(Path(path)):
            findings.append(
                Finding(
                    ERROR,
                    f"--addon {path}: no squashfs file there",
                    "give the NAME.addon.sqsh file ddpimg addon build wrote (a relative path "
                    "is from the directory you submit in)",
                )
            )
    return findings
