"""``ddpimg addon image FILE... [--tag T]``: Docker and podman on a laptop mount no squashfs
without root, so the add-ons go into an image of their own: the base image plus one layer
per add-on, unpacked at ``/opt/ddpimg/addons/NAME`` (owned by root: read-only for the
image's user), with ``DDPIMG_ADDONS`` naming each file's sha256 for the runs' manifests.

The add-ons are unpacked in a build stage of the base image itself (its ``unsquashfs``),
where ``ddpimg addon check`` refuses one made for another package set before the image is
made; only the unpacked trees reach the final image. Plain Dockerfile syntax: Docker's
classic builder and podman build it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ddpimg.addon.errors import AddonError
from ddpimg.addon.mounted import DIGESTS_VARIABLE, digests
from ddpimg.addon.sitepath import ROOT, mount_name, valid_name
from ddpimg.addon.sources import sha256_of
from ddpimg.addon.squashfs import is_squashfs
from ddpimg.errors import printable

BUILD_TIMEOUT_S = 1800.0
INSPECT_TIMEOUT_S = 60.0
STAGE_DIR = "/tmp/ddpimg-addons"
FILES_DIR = "/tmp/ddpimg-addon-files"
LABEL = "org.ddpimg.addons"


def default_tag(base: str, names: Sequence[str]) -> str:
    """``ddpimg:cpu`` + timm -> ``ddpimg:cpu-timm``; ``myimage`` -> ``myimage:timm``."""
    joined = "-".join(names)
    last = base.rsplit("/", 1)[-1]
    return f"{base}-{joined}" if ":" in last else f"{base}:{joined}"


def dockerfile(base: str, files: Sequence[tuple[str, str]], told: str) -> str:
    """The Dockerfile: ``files`` are (name, file name in the context); ``told``: the
    ``DDPIMG_ADDONS`` value of the new image."""
    # Unpacked by the image's user into a directory of its own (COPY's are root's).
    unpack = "".join(
        f" \\\n    && unsquashfs -no-progress -no-xattrs -dest {STAGE_DIR}/{name} "
        f"{FILES_DIR}/{filename} >/dev/null"
        for name, filename in files
    )
    lines = [
        "# Made by `ddpimg addon image`: the base image plus one layer per add-on.",
        f"FROM {base} AS unpacked",
        *(f"COPY {filename} {FILES_DIR}/" for _, filename in files),
        f"RUN mkdir -p {STAGE_DIR}{unpack} \\",
        f"    && DDPIMG_ADDON_ROOT={STAGE_DIR} ddpimg addon check",
        f"FROM {base}",
        *(
            f"COPY --from=unpacked --chown=0:0 {STAGE_DIR}/{name} {ROOT}/{name}"
            for name, _ in files
        ),
        f"ENV {DIGESTS_VARIABLE}={told}",
        f'LABEL {LABEL}="{told}"',
    ]
    return "\n".join(lines) + "\n"


def choose_engine(given: str | None) -> str:
    for name in [given] if given else ["docker", "podman"]:
        if name and shutil.which(name):
            return name
    raise AddonError(
        "neither docker nor podman is on PATH" if not given else f"{given} is not on PATH",
        hint="ddpimg addon image builds a Docker or podman image; on a cluster mount the add-on "
        "with ddpimg sbatch --addon FILE instead",
    )


def base_digests(engine: str, base: str) -> dict[str, str]:
    """The add-ons the base image already names (an image made by this command)."""
    proc = subprocess.run(
        [engine, "image", "inspect", "--format", "{{json .Config.Env}}", base],
        capture_output=True,
        text=True,
        timeout=INSPECT_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise AddonError(
            f"{engine} does not know the base image {printable(base)}: "
            f"{printable(proc.stderr.strip()[-300:])}",
            hint="give the image the add-ons were built in with --base (build or load it first)",
        )
    try:
        entries = json.loads(proc.stdout) or []
    except ValueError:
        entries = []
    env = dict(str(entry).partition("=")[::2] for entry in entries if isinstance(entry, str))
    return digests(env)


def build_image(addons: Sequence[Path], base: str, tag: str | None, engine_name: str | None) -> str:
    """Build the image; its tag."""
    engine = choose_engine(engine_name)
    named: list[tuple[str, Path]] = []
    for path in addons:
        name = mount_name(path.name)
        if not valid_name(name) or not is_squashfs(path):
            raise AddonError(
                f"{printable(str(path))} is not an add-on (NAME.addon.sqsh, a squashfs file)",
                hint="give the file ddpimg addon build wrote",
            )
        if name in (other for other, _ in named):
            raise AddonError(f"two add-ons named {name}", hint="give each add-on once")
        named.append((name, path))
    told = base_digests(engine, base)
    for name, path in named:
        told[name] = sha256_of(path)
    value = ",".join(f"{name}={digest}" for name, digest in sorted(told.items()))
    tag = tag or default_tag(base, [name for name, _ in named])
    with tempfile.TemporaryDirectory(prefix="ddpimg-addon-image-") as scratch:
        context = Path(scratch)
        files = []
        for name, path in named:
            filename = f"{name}.addon.sqsh"
            shutil.copyfile(path, context / filename)
            files.append((name, filename))
        (context / "Dockerfile").write_text(dockerfile(base, files, value), encoding="utf-8")
        try:
            proc = subprocess.run(
                [engine, "build", "--tag", tag, str(context)],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise AddonError(
                f"{engine} build took more than {BUILD_TIMEOUT_S:g} s", hint="try again"
            ) from err
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise AddonError(
            f"{engine} build of {tag} from {base} failed:\n"
            + "\n".join(f"  | {printable(line)}" for line in said),
            hint="the base must be the image the add-ons were built in, with squashfs-tools "
            "(ddpimg's images have it)",
        )
    return tag
