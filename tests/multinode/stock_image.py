"""A stock Python image that is not ddpimg's, for tests/multinode/test_site_image.py: Debian
12 (debootstrap, no registry) with CPU torch installed into its Python, imported into
podman-hpc's store; then ddpimg installed into it the documented way (docs/containers.md:
"ddpimg in a site's own image"): a venv made with --system-site-packages over the image's Python,
with the add-on start-up hook (``ddpimg addon install-hook``). The image has squashfs-tools, so
that add-ons are built in it (tests/multinode/test_site_image.py).

torch is the CPU build the machine's pip finds (its configured indexes and wheel
directories), installed from outside into the image's own site-packages directory: Debian's
python3 is 3.11, as the host's, so the cp311 wheels are the image's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.containers.podman_hpc import configure

REPO = Path(__file__).resolve().parents[2]
TAG = "localhost/stock-torch:test"
TORCH = "torch==2.13.0+cpu"  # the CPU build (no CUDA libraries: a small image)
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # Debian's python3 reads it
DEBOOTSTRAP_TIMEOUT_S = 900
PIP_TIMEOUT_S = 900
PODMAN_TIMEOUT_S = 600


def _run(argv: list[str], timeout: float, **options: object) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, **options
    )  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{argv[:4]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return str(proc.stdout)


def build_stock_image(work: Path, store: Path) -> dict[str, str]:
    """Make the image (its root file system under ``work``) in a podman-hpc store under
    ``store``, a short path (podman limits its run root to 50 characters); podman-hpc's
    environment."""
    rootfs = work / "rootfs"
    mirror = _run(["bash", str(REPO / "containers" / "debian-mirror.sh")], 60).strip()
    # squashfs-tools: ddpimg addon build packs add-ons in the image it builds them for.
    _run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,squashfs-tools",
          "bookworm", str(rootfs), mirror], DEBOOTSTRAP_TIMEOUT_S)  # fmt: skip
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--only-binary=:all:",
          "--target", str(rootfs / SITE_PACKAGES), TORCH, "numpy"], PIP_TIMEOUT_S)  # fmt: skip
    env = configure(store)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    _run(["podman-hpc", "import", "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
          "-", TAG], PODMAN_TIMEOUT_S, stdin=tar.stdout, env=env)  # fmt: skip
    tar.wait(timeout=60)
    _run(["rm", "-rf", str(rootfs)], 300)
    return env


def remove_store(env: dict[str, str]) -> None:
    """Remove the store's images and containers (its directory is the caller's)."""
    subprocess.run(["podman-hpc", "system", "reset", "--force"], env=env, capture_output=True,
                   timeout=PODMAN_TIMEOUT_S, check=False)  # fmt: skip


def install_ddpimg(env: dict[str, str], venv: Path, dist: Path) -> None:
    """ddpimg into ``venv`` over the image's Python: the documented command, with podman-hpc."""
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "-w", str(dist), str(REPO)], PIP_TIMEOUT_S)  # fmt: skip
    wheel = next(dist.glob("ddpimg-*.whl"))
    # For add-ons (docs/containers.md, docs/addons.md): the hook, so that the venv's Python
    # sees mounted add-ons, and not the venv's own setuptools, older than the image's (torch
    # requires a newer one), which it would hide.
    install = (
        'python3 -m venv --system-site-packages "$0" && "$0"/bin/pip install --no-index "$1" '
        '&& "$0"/bin/ddpimg addon install-hook && "$0"/bin/pip uninstall --yes --quiet setuptools'
    )
    _run(["podman-hpc", "run", "--rm", "--volume", f"{venv.parent}:{venv.parent}",
          "--volume", f"{dist}:{dist}", TAG, "sh", "-c", install, str(venv), str(wheel)],
         PODMAN_TIMEOUT_S, env=env)  # fmt: skip
