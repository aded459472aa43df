"""NERSC's podman-hpc on this machine, for the smoke tests: its configuration, and the image
loaded into its store from docker.

podman-hpc (PyPI) is a Python wrapper of podman; here it drives Debian 12's podman 4.3. What
it needs on such a machine, all in a directory of its own: a configuration file (the podman
binary, its ``fuse-overlayfs-wrap`` mount program, its modules, the OCI hook it installs with
``python -m podman_hpc.configure_hooks``, and a store in that directory), ``USER`` set, and a
``containers.conf`` naming runc and no default ulimits: crun cannot run under cgroups v1 /
hybrid, and podman's default ulimits exceed what a process without CAP_SYS_RESOURCE may set.

The image comes from docker (``docker save | podman-hpc load``, not a second build). The
load takes minutes (the 6.5 GB image through the docker daemon, then into podman's store), so
it starts in the background when the test session starts and the podman test waits for it.
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


class Store:
    """podman-hpc configured in a temporary directory, ``image`` loading into its store in
    the background from the moment it is made; :meth:`close` removes everything."""

    def __init__(self, image: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(
            prefix="ddpimg-podman-hpc-", ignore_cleanup_errors=True
        )
        self.root = Path(self._tmp.name)
        self.env = configure(self.root)
        self._save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        self._load = subprocess.Popen(
            ["podman-hpc", "load"],
            stdin=self._save.stdout,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            text=True,
        )
        assert self._save.stdout is not None
        self._save.stdout.close()  # the load holds the pipe now
        self._loaded: str | None = None

    def wait(self) -> dict[str, str]:
        """Wait for the load; podman-hpc's environment. Fails naming what went wrong."""
        if self._loaded is None:
            output, _ = self._load.communicate(timeout=LOAD_TIMEOUT_S)
            saved = self._save.wait(timeout=60)
            assert saved == 0, f"docker save exited {saved}"
            assert self._load.returncode == 0, f"podman-hpc load failed:\n{output[-2000:]}"
            self._loaded = output
        return self.env

    def close(self) -> None:
        for proc in (self._load, self._save):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
        subprocess.run(
            ["podman-hpc", "system", "reset", "--force"],
            env=self.env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        self._tmp.cleanup()
