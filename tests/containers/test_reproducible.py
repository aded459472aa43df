"""What one build of the image shows of its reproducibility (`nox -s smoke`; the twice-built
comparison is `nox -s image-repro`, run before each change to the image): one canonical
layer at the last commit's date, no file newer than it, no timestamp-based pyc, no log or
cache left, the Debian packages equal to their lock, and the tree digest of the build record
recomputed by `ddpimg doctor --verify`, which names a file changed in a container.

Everything inside the image is read in one container (CHECK): one walk of the file system,
then `doctor --verify` before and after a change. ``DDPIMG_TEST_IMAGE`` names the image.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.containers.recipes import CONTAINERS
from tests.containers.test_smoke import docker_env, docker_run
from tests.integration.runs import run

pytestmark = pytest.mark.docker

SITE = "/opt/ddpimg/venv/lib/python3.11/site-packages"
# What the container's runtime writes, not the image: Docker's own files (bind-mounted or
# made in the container's init layer, and the directories holding them) and the kernel's.
RUNTIME = {"/", "/etc", "/.dockerenv", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
           "/etc/mtab", "/dev", "/proc", "/sys"}  # fmt: skip
# Where a build leaves logs, caches and build directories; nothing may be there but apt's
# (empty) lock files.
LEFT_UNDER = ("/var/log", "/var/lib/apt/lists", "/var/cache/apt", "/var/cache/ldconfig",
              "/root/.cache", "/tmp", "/opt/ddpimg/build")  # fmt: skip
APT_LOCKS = ("/var/lib/apt/lists/lock", "/var/cache/apt/archives/lock")
# Inside the image as root: the walk's findings as one JSON line, the package set, then
# `ddpimg doctor --verify` on the image as built and after a pip-install-like change.
CHECK = f"""
set -u
python3 - <<'EOF'
import json, os
epoch = int(json.load(open("/etc/ddpimg/build-info.json"))["source_date_epoch"])
runtime = {sorted(RUNTIME)!r}
newer, pycs = [], []
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/dev", "/proc", "/sys")]
    for name in dirs + files:
        path = os.path.join(root, name)
        if path not in runtime and os.lstat(path).st_mtime > epoch:
            newer.append(path)
        if name.endswith(".pyc") and not os.path.islink(path):
            with open(path, "rb") as pyc:
                if int.from_bytes(pyc.read(16)[4:8], "little") == 0:
                    pycs.append(path)
left = []
for top in {LEFT_UNDER!r}:
    for root, dirs, files in os.walk(top):
        left += [os.path.join(root, f) for f in files]
left = [path for path in left if path not in {APT_LOCKS!r}]
print("WALK", json.dumps({{"newer": newer, "timestamp_pycs": pycs, "left": left}}))
EOF
dpkg-query -W -f '${{db:Status-Abbrev}} ${{Package}} ${{Version}}\\n' |
    awk '$1 == "ii" {{ print "DPKG", $2, $3 }}'
echo "BUILD_INFO $(tr -d '\\n' </etc/ddpimg/build-info.json)"
echo "LISTING $(sha256sum /etc/ddpimg/tree.txt)"
ddpimg doctor --verify; echo "CLEAN_EXIT $?"
echo x >>{SITE}/ddpimg/py.typed
mkdir {SITE}/timm && : >{SITE}/timm/__init__.py
ddpimg doctor --verify; echo "CHANGED_EXIT $?"
"""


@pytest.fixture(scope="module")
def checked(image: str) -> list[str]:
    """CHECK's output, lines."""
    proc = docker_run(image, ["sh", "-c", CHECK], options=["--user", "0"], timeout=600)
    return proc.stdout.splitlines()


@pytest.fixture(scope="module")
def build_info(checked: list[str]) -> dict[str, Any]:
    (line,) = [line for line in checked if line.startswith("BUILD_INFO ")]
    info: dict[str, Any] = json.loads(line.removeprefix("BUILD_INFO "))
    return info


def test_the_image_is_one_layer_made_at_the_last_commits_date(
    image: str, build_info: dict[str, Any]
) -> None:
    proc = run(["docker", "image", "inspect", image], docker_env(), timeout=60)
    inspected = json.loads(proc.stdout)[0]
    assert len(inspected["RootFS"]["Layers"]) == 1
    assert inspected["Created"] == build_info["build_date"]
    assert inspected["Created"] == inspected["Config"]["Labels"]["org.opencontainers.image.created"]


def test_no_file_is_newer_than_the_epoch_no_pyc_is_timestamp_based_nothing_is_left(
    checked: list[str],
) -> None:
    (walk,) = [json.loads(line[5:]) for line in checked if line.startswith("WALK ")]
    assert walk["newer"] == []
    assert walk["timestamp_pycs"] == []
    assert walk["left"] == []


def test_the_debian_packages_are_their_lock(checked: list[str], build_info: dict[str, Any]) -> None:
    apt_lock = build_info["apt_lock"]
    assert apt_lock["section"] == f"runtime-{build_info['flavour']}"
    lock = CONTAINERS / "lock" / "apt" / f"{apt_lock['name']}.txt"
    assert hashlib.sha256(lock.read_bytes()).hexdigest() == apt_lock["sha256"]
    locked = {
        tuple(line.split()[1:])
        for line in lock.read_text().splitlines()
        if line.startswith(f"{apt_lock['section']} ")
    }
    installed = {tuple(line.split()[1:]) for line in checked if line.startswith("DPKG ")}
    assert installed == locked


def test_verify_recomputes_the_recorded_tree_and_names_a_changed_file(
    checked: list[str], build_info: dict[str, Any]
) -> None:
    digest = build_info["tree"]["digest"]
    clean_end = checked.index("CLEAN_EXIT 0")
    assert checked[clean_end - 1].startswith(f"verify: tree {digest} (")
    assert checked[clean_end - 1].endswith("is the build record's")
    after = checked[clean_end + 1 :]
    assert after[-1] == "CHANGED_EXIT 4"
    assert any(line.startswith("verify: FAILED: tree sha256:") for line in after)
    assert f"verify: changed: {SITE}/ddpimg/py.typed" in after
    assert f"verify: added: {SITE}/timm" in after
    assert f"verify: added: {SITE}/timm/__init__.py" in after


def test_the_build_record_names_the_images_own_listing(
    checked: list[str], build_info: dict[str, Any]
) -> None:
    (line,) = [line.split() for line in checked if line.startswith("LISTING ")]
    assert line[2] == build_info["tree"]["listing"] == "/etc/ddpimg/tree.txt"
    assert f"sha256:{line[1]}" == build_info["tree"]["digest"]
    assert build_info["tree"]["roots"][0] == "/opt/ddpimg"
