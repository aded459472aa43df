"""NERSC's podman-hpc on this machine, for the multi-node test of a site's own image
(tests/multinode/test_site_image.py, tests/multinode/stock_image.py): its configuration.

podman-hpc (PyPI) is a Python wrapper of podman; here it drives Debian 12's podman 4.3. What
it needs on such a machine, all in a directory of its own: a configuration file (the podman
binary, its ``fuse-overlayfs-wrap`` mount program, its modules, the OCI hook it installs with
``python -m podman_hpc.configure_hooks``, and a store in that directory), ``USER`` set, and a
``containers.conf`` naming runc and no default ulimits: crun cannot run under cgroups v1 /
hybrid, and podman's default ulimits exceed what a process without CAP_SYS_RESOURCE may set.

``podman-hpc migrate`` (the squashed images NERSC's compute nodes run from) is not tried: it
runs a statically linked ``mksquashfs.static`` inside the image, which Debian does not ship.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
