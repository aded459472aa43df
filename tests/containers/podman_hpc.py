"""NERSC's podman-hpc on this machine, for the smoke tests: its configuration, and the image
loaded into its store from docker.

podman-hpc (PyPI) is a Python wrapper of podman; here it drives Debian 12's podman 4.3. What
it needs on such a machine, all in a directory of its own: a configuration file (the podman
binary, its ``fuse-overlayfs-wrap`` mount program, its modules, the OCI hook it installs with
``python -m podman_hpc.configure_hooks``, and a store in that directory), ``USER`` set, and a
``containers.conf`` naming runc and no default ulimits: crun cannot run under cgroups v1 /
hybrid, and podman's default ulimits exceed what a process without CAP_SYS_RESOURCE may set.

The image comes from docker (``docker save`` to a file, then ``podman-hpc load``, not a second
build). The save takes about a minute and runs first; the load takes minutes more (the 6.5 GB
archive into podman's store), so it runs in the background while the other tests run, and the
podman test waits for it.
``podman-hpc migrate`` (the squashed images NERSC's compute nodes run from) is not tried: it
runs a statically linked ``mksquashfs.static`` inside the image, which Debian does not ship.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LOAD_TIMEOUT_S = 900
SAVE_TIMEOUT_S = 600
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""


def configure(root: Path) -> dict[str, str]:
    """Configure podman-hpc under ``root``; the environment it runs in."""
    bindir = Path(sys.executable).parent
    hooks = root / "hooks.d"
    subprocess.run(
        [sys.executable, "-m", "podman_hpc.configure_hooks", "--hooksd", str(hooks)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    config = root / "podman_hpc.yaml"
    config.write_text(
        f'podman_bin: "{shutil.which("podman")}"\n'
        f'mount_program: "{bindir / "fuse-overlayfs-wrap"}"\n'
        f'modules_dir: "{Path(sys.prefix) / "etc" / "podman_hpc" / "modules.d"}"\n'
        f'hooks_dir: "{hooks}"\n'
        f'graph_root: "{root / "storage"}"\n'
        f'run_root: "{root / "run"}"\n',
        encoding="utf-8",
    )
    conf = root / "containers.conf"
    conf.write_text(CONTAINERS_CONF, encoding="utf-8")
    return dict(os.environ) | {
        "PATH": os.pathsep.join([str(bindir), os.environ.get("PATH", "")]),
        "USER": os.environ.get("USER", "root"),
        "PODMANHPC_CONFIG_FILE": str(config),
        "CONTAINERS_CONF": str(conf),
    }


SPACE_FACTOR = 2.5  # the saved archive + the unpacked layers + room for the containers


def _check_space(image: str, root: Path) -> None:
    """Fail at once, saying how much is missing, when the store's file system cannot hold
    the load (else podman fails minutes later with a bare "no space left on device")."""
    size = int(
        subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", image],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    free = shutil.disk_usage(root).free
    needed = int(SPACE_FACTOR * size)
    assert free >= needed, (
        f"podman-hpc load of {image} ({size / 1e9:.1f} GB) needs about {needed / 1e9:.1f} GB "
        f"free under {root.parent}, which has {free / 1e9:.1f} GB: free some space (docker "
        "images, old worktrees) or point TMPDIR elsewhere"
    )


class Store:
    """podman-hpc configured in a temporary directory, ``image`` loading into its store in
    the background from the moment it is made; :meth:`close` removes everything."""

    def __init__(self, image: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(
            prefix="ddpimg-podman-hpc-", ignore_cleanup_errors=True
        )
        self.root = Path(self._tmp.name)
        self.env = configure(self.root)
        _check_space(image, self.root)
        # The image is saved to a file before anything else runs, not piped into the load
        # while the other tests start and remove containers: piped, docker save failed here
        # once ("open .../overlay2/.../merged/...: no such file or directory"; overlay2
        # without native diff reads the layers through a mount).
        archive = self.root / "image.tar"
        saved = subprocess.run(
            ["docker", "save", "--output", str(archive), image],
            capture_output=True,
            text=True,
            timeout=SAVE_TIMEOUT_S,
            check=False,
        )
        assert saved.returncode == 0, f"docker save {image} failed:\n{saved.stderr[-2000:]}"
        self._archive = archive
        self._load = subprocess.Popen(
            ["podman-hpc", "load", "--input", str(archive)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            text=True,
        )
        self._loaded: str | None = None

    def wait(self) -> dict[str, str]:
        """Wait for the load; podman-hpc's environment. Fails naming what went wrong."""
        if self._loaded is None:
            output, _ = self._load.communicate(timeout=LOAD_TIMEOUT_S)
            self._archive.unlink()
            assert self._load.returncode == 0, f"podman-hpc load failed:\n{output[-2000:]}"
            self._loaded = output
        return self.env

    def close(self) -> None:
        if self._load.poll() is None:
            self._load.kill()
            self._load.wait(timeout=60)
        subprocess.run(
            ["podman-hpc", "system", "reset", "--force"],
            env=self.env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        self._tmp.cleanup()
