"""``ddpimg addon build --image IMAGE``: the build run inside the image, from the host,
through the local engine (docker, podman, podman-hpc, apptainer, singularity).

An add-on is built with the image's own Python, so the build itself runs in the image; this
module only makes the container see what the build needs, each host path bound at the same
path (under ``/ddpimg-host`` when it lies in a system directory the image has its own of):

- the requirements file and the files it includes, or the lock (read-only);
- the output directory, where the add-on and its lock are written (as the calling user);
- ``--find-links`` directories (read-only);
- the user's pip settings, which a container's pip never sees by itself (its configuration
  files are the image's, and Docker passes no variable): the effective index, extra
  indexes, find-links, trusted hosts, certificate, client certificate, proxy and timeouts of
  the host's ``pip config list`` and ``PIP_*`` variables become ``PIP_*`` variables of the
  container, the proxy variables are passed as they are, and every local file or directory
  they name is bound read-only (a ``file://`` index with the directory above it, where its
  files usually lie). The host's pip constraints are not passed: the image's packages are
  the add-on's constraints.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddpimg.addon.build import BuildRequest, addon_name
from ddpimg.addon.errors import AddonError
from ddpimg.addon.lockfile import read_lock
from ddpimg.addon.requirements import included_files
from ddpimg.addon.sitepath import SUFFIX
from ddpimg.errors import printable

ENGINES = ("docker", "podman", "podman-hpc", "apptainer", "singularity")
SIF_ENGINES = ("apptainer", "singularity")
HOST_PREFIX = "/ddpimg-host"
# Directories an image has its own of: a host path there is bound under HOST_PREFIX.
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt/ddpimg", "/proc",
               "/root", "/run", "/sbin", "/sys", "/usr", "/var")  # fmt: skip
PIP_CONFIG_TIMEOUT_S = 60.0
BUILD_TIMEOUT_S = 4 * 3600.0
# pip's settings that say where packages come from and how to reach them: config key ->
# whether its value names local paths (a list of them, for the list-valued ones).
PIP_KEYS = {
    "index-url": "url",
    "extra-index-url": "urls",
    "find-links": "urls",
    "trusted-host": "",
    "cert": "path",
    "client-cert": "path",
    "proxy": "",
    "default-timeout": "",
    "timeout": "",
    "retries": "",
    "no-index": "",
}
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                   "no_proxy", "ALL_PROXY", "all_proxy")  # fmt: skip
CERT_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE")
# pip's own order: a PIP_* variable over the install command's section over [global].
_PRECEDENCE = (":env:", "install", "global")


def container_path(path: str) -> str:
    """Where a host path is bound in the container."""
    absolute = os.path.abspath(path)
    if any(absolute == top or absolute.startswith(top + "/") for top in SYSTEM_DIRS):
        return HOST_PREFIX + absolute
    return absolute


@dataclass
class Binds:
    """Host paths to bind, each once, read-only unless written."""

    read_only: dict[str, str] = field(default_factory=dict)
    writable: dict[str, str] = field(default_factory=dict)

    def add(self, path: str, *, write: bool = False) -> str:
        """Bind ``path`` (made absolute); its path in the container."""
        absolute = os.path.abspath(path)
        target = container_path(absolute)
        (self.writable if write else self.read_only)[absolute] = target
        return target

    def items(self) -> list[tuple[str, str, bool]]:
        out = [(host, target, True) for host, target in sorted(self.writable.items())]
        return out + [
            (host, target, False)
            for host, target in sorted(self.read_only.items())
            if host not in self.writable
        ]


def host_pip_settings(listing: str, env: Mapping[str, str], binds: Binds) -> dict[str, str]:
    """The ``PIP_*`` variables that give a container's pip the host's effective settings
    (from ``pip config list``'s ``listing``), local paths bound through ``binds``."""
    sections: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        head, equals, text = line.partition("=")
        scope, dot, key = head.rpartition(".")
        if equals and dot:
            sections.setdefault(scope, {})[key] = _unquote(text)
    out: dict[str, str] = {}
    for key, kind in PIP_KEYS.items():
        found = [sections[s][key] for s in _PRECEDENCE if key in sections.get(s, {})]
        if not found:
            continue
        value = found[0]
        if kind == "path":
            value = binds.add(value) if os.path.exists(value) else value
        elif kind in ("url", "urls"):
            value = " ".join(_bound_location(item, binds) for item in value.split())
        out["PIP_" + key.upper().replace("-", "_")] = value
    for name in PROXY_VARIABLES:
        if env.get(name):
            out[name] = env[name]
    for name in CERT_VARIABLES:
        if env.get(name) and os.path.isfile(env[name]):
            out[name] = binds.add(env[name])
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _bound_location(item: str, binds: Binds) -> str:
    """An index or find-links location with a local path bound: a directory as it is, a
    ``file://`` index with the directory above it (where its files usually lie)."""
    if item.startswith("file://"):
        path = item[len("file://") :]
        if os.path.isdir(path):
            parent = os.path.dirname(os.path.abspath(path).rstrip("/"))
            target = binds.add(parent)
            return "file://" + target + path[len(parent) :]
        return item
    if "://" not in item and os.path.exists(item):
        return binds.add(item)
    return item


def pip_config_listing(env: Mapping[str, str]) -> str:
    """``pip config list`` of this host's pip ("" without one)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=PIP_CONFIG_TIMEOUT_S,
            env=dict(env),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def choose_engine(given: str | None, image: str) -> str:
    """--engine, else apptainer/singularity for a .sif, else docker, else podman."""
    if given:
        if shutil.which(given) is None:
            raise AddonError(f"--engine {given}: {given} is not on PATH", hint="install it")
        return given
    candidates = SIF_ENGINES if image.endswith(".sif") else ("docker", "podman")
    for name in candidates:
        if shutil.which(name):
            return name
    raise AddonError(
        f"--image {printable(image)}: none of {', '.join(candidates)} is on PATH to run it",
        hint="install one, or run ddpimg addon build inside the image yourself",
    )


def container_command(
    engine: str,
    image: str,
    binds: Binds,
    env: Mapping[str, str],
    argv: Sequence[str],
) -> list[str]:
    """The engine's command line that runs ``argv`` in ``image``."""
    if engine in SIF_ENGINES:
        command = [engine, "exec", "--cleanenv"]
        for host, target, write in binds.items():
            command += ["--bind", f"{host}:{target}" + ("" if write else ":ro")]
        for name, value in sorted(env.items()):
            command += ["--env", f"{name}={value}"]
        return [*command, image, *argv]
    command = [engine, "run", "--rm", "--network=host"]
    if engine == "docker":
        # Files written to the host's output directory are the caller's; the image's home
        # (/tmp) is the pip cache's.
        command += [f"--user={os.getuid()}:{os.getgid()}", "--env=HOME=/tmp"]
    else:  # rootless podman: the container's root is the caller
        command += ["--user=0:0"]
    for host, target, write in binds.items():
        command += ["--volume", f"{host}:{target}" + ("" if write else ":ro")]
    for name, value in sorted(env.items()):
        command += ["--env", f"{name}={value}"]
    return [*command, image, *argv]


def build_in_image(args: argparse.Namespace) -> int:
    """Run ``ddpimg addon build`` (these arguments, without --image) in ``args.image``."""
    image: str = args.image
    engine = choose_engine(args.engine, image)
    binds = Binds()
    inner = ["addon", "build"]
    request = BuildRequest(
        args.requirements, args.lock, args.name, args.output, tuple(args.find_links), args.no_index
    )
    name = addon_name(request)
    if args.requirements is not None:
        for path in included_files(args.requirements):
            binds.add(str(path.parent))
        inner += ["-r", container_path(str(args.requirements))]
    else:
        name = name or read_lock(args.lock).name
        binds.add(str(args.lock.parent))
        inner += ["--lock", container_path(str(args.lock))]
    output = (args.output or Path(f"{name}{SUFFIX}")).absolute()
    output.parent.mkdir(parents=True, exist_ok=True)
    binds.add(str(output.parent), write=True)
    inner += ["-o", container_path(str(output)), "--name", name]
    for directory in args.find_links:
        inner += ["--find-links", binds.add(directory)]
    if args.no_index:
        inner.append("--no-index")
    if args.ddpimg_from:
        binds.add(args.ddpimg_from)
        ddpimg = [os.path.join(os.path.abspath(args.ddpimg_from), "bin", "ddpimg")]
    else:
        ddpimg = ["ddpimg"]
    env = host_pip_settings(pip_config_listing(os.environ), os.environ, binds)
    command = container_command(engine, image, binds, env, [*ddpimg, *inner])
    print(f"ddpimg: addon {name}: building in {image} with {engine}: {shlex.join(command)}",
          file=sys.stderr, flush=True)  # fmt: skip
    try:
        proc = subprocess.run(command, timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as err:
        raise AddonError(
            f"the build in {image} ran longer than {BUILD_TIMEOUT_S / 3600:g} hours",
            hint="an add-on is for a few packages",
        ) from err
    if proc.returncode == 0 and not output.exists():
        raise AddonError(
            f"the build in {image} ended well but {output} is not there",
            hint=f"check that {engine} binds {output.parent} writable for you",
        )
    return proc.returncode
