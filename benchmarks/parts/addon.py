"""Add-ons (docs/addons.md): what an add-on of a realistic requirements file costs to build
and weighs, and what importing from a mounted add-on costs against the image's own packages.

- build: ``ddpimg addon build -r REQUIREMENTS --image IMAGE`` from the host (the user's pip
  settings passed in, the packages from the registry), then again from its lock (no
  resolution): the times, the add-on's size packed and unpacked, and whether the two builds
  gave one sha256; then ``ddpimg addon image`` (the laptop's way).
- import: in containers of the image, ``COUNT`` rounds, each configuration once a round,
  the time of ``python -c pass`` (what the start-up hook adds with an add-on mounted) and
  the time to import the add-on's packages after torch (``IMPORTS``, in-process) with the
  add-on
  (a) mounted from its squashfs with squashfuse (an unprivileged mount, as Apptainer makes
  one without setuid), (b) a layer of the image (``ddpimg addon image``), (c) copied into the
  image's own site-packages (what a derived image would have).

Needs Docker, squashfuse, root (the FUSE mount is bound into containers) and the registry;
``--addon-image`` names the image (default ``ddpimg:cpu``).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from parts.common import PYTHON, Row, log
from parts.image import docker_missing, image_size

REQUIREMENTS = [
    "timm", "einops", "hydra-core", "sentencepiece", "kornia", "open-clip-torch",
    "scikit-learn", "peft",
]  # fmt: skip
IMPORTS = "timm, kornia, sklearn.linear_model, open_clip, hydra, peft, sentencepiece"
NAME = "bench"
BUILD_TIMEOUT_S = 3600
# One container per configuration; inside, a Python that times the others.
DRIVER = """
import json, subprocess, sys, time
count = int(sys.argv[1])
imports = sys.argv[2]
timed = (
    "import time, torch\\n"
    "began = time.perf_counter()\\n"
    f"import {imports}\\n"
    "print(time.perf_counter() - began)\\n"
)
out = {"pass_s": [], "import_s": []}
for round in range(count + 1):
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    passed = time.perf_counter() - began
    inner = float(subprocess.run([sys.executable, "-c", timed], check=True,
                                 capture_output=True, text=True).stdout) if imports else 0.0
    if round:  # the first round warms the page cache
        out["pass_s"].append(passed)
        out["import_s"].append(inner)
print(json.dumps(out))
"""
OWN_DOCKERFILE = """\
FROM {layered}
USER root
RUN cp -a /opt/ddpimg/addons/{name}/site-packages/. \\
        /opt/ddpimg/venv/lib/python3.11/site-packages/ \\
    && rm -rf /opt/ddpimg/addons/{name}
USER ddp
"""


def _ddpimg(*args: str, timeout: float = BUILD_TIMEOUT_S) -> tuple[float, str]:
    began = time.perf_counter()
    proc = subprocess.run(
        [PYTHON, "-m", "ddpimg", *args], capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"ddpimg {' '.join(args[:3])} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - began, proc.stdout


def _summary(stdout: str) -> dict[str, str]:
    return dict(line.split(None, 1) for line in stdout.splitlines() if line.strip())


def _times(options: list[str], image: str, count: int, imports: str) -> dict[str, list[float]]:
    proc = subprocess.run(
        ["docker", "run", "--rm", *options, image, "python3", "-c", DRIVER, str(count), imports],
        capture_output=True, text=True, check=False, timeout=3600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"timing in {image} {options} failed: {proc.stderr[-1500:]}")
    result: dict[str, list[float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _missing() -> str | None:
    missing = docker_missing()
    if missing is None and shutil.which("squashfuse") is None:
        missing = "squashfuse is not installed"
    return missing


def run(image: str, count: int) -> tuple[list[Row], dict[str, Any]]:
    missing = _missing() or (None if image_size(image) is not None else f"no image {image}")
    if missing is not None:
        return [("add-on build and import", f"skipped: {missing}", "")], {"skipped": missing}
    rows: list[Row] = []
    record: dict[str, Any] = {"image": image, "requirements": REQUIREMENTS, "imports": IMPORTS}
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-addon-") as scratch:
        work = Path(scratch)
        work.chmod(0o755)
        requirements = work / f"{NAME}.txt"
        requirements.write_text("".join(f"{name}\n" for name in REQUIREMENTS))
        addon = work / f"{NAME}.addon.sqsh"
        build_s, out = _ddpimg("addon", "build", "-r", str(requirements), "--image", image,
                               "-o", str(addon))  # fmt: skip
        first = _summary(out)
        addon.rename(work / "first.sqsh")
        again_s, out = _ddpimg("addon", "build", "--lock", str(work / f"{NAME}.lock"),
                               "--image", image, "-o", str(addon))  # fmt: skip
        again = _summary(out)
        same = first["sha256"] == again["sha256"]
        packages = first["packages"].split(", ")
        log(f"built {first['size']} in {build_s:.0f} s, again in {again_s:.0f} s")
        rows += [
            (f"add-on of {len(REQUIREMENTS)} requirements ({', '.join(REQUIREMENTS)}): "
             f"{len(packages)} packages the image lacks", f"{first['size']}", ""),
            ("build from the requirements (resolve, download, build, pack; --image)",
             f"{build_s:.0f} s", ""),
            ("build again from its lock (no resolution)",
             f"{again_s:.0f} s; sha256 {'the same' if same else 'DIFFERS'}", "the same"),
        ]  # fmt: skip
        record |= {"first": first, "again": again, "build_s": build_s, "lock_build_s": again_s,
                   "same_sha256": same}  # fmt: skip
        layered = f"{image}-bench-addon"
        own = f"{image}-bench-own"
        mount = work / "mount"
        mount.mkdir()
        try:
            image_s, _ = _ddpimg("addon", "image", str(addon), "--base", image, "--tag", layered)
            rows.append(("ddpimg addon image (one layer more)", f"{image_s:.0f} s", ""))
            (work / "own").mkdir()
            (work / "own" / "Dockerfile").write_text(OWN_DOCKERFILE.format(layered=layered,
                                                                          name=NAME))  # fmt: skip
            subprocess.run(["docker", "build", "-t", own, str(work / "own")], check=True,
                           capture_output=True, timeout=1800)  # fmt: skip
            # allow_other: the containers' user is not the one who mounts (root may say so
            # without /etc/fuse.conf's user_allow_other).
            subprocess.run(["squashfuse", "-o", "allow_other", str(addon), str(mount)],
                           check=True, timeout=60)  # fmt: skip
            configs = {
                "no add-on": ([], image, ""),
                "squashfuse mount": (
                    ["--volume", f"{mount}:/opt/ddpimg/addons/{NAME}:ro"],
                    image,
                    IMPORTS,
                ),
                "image layer": ([], layered, IMPORTS),
                "image's own site-packages": ([], own, IMPORTS),
            }
            # Interleaved: each round times every configuration once (a container each, its
            # first run warming the page cache), so a change of load hits them alike.
            results: dict[str, dict[str, list[float]]] = {
                name: {"pass_s": [], "import_s": []} for name in configs
            }
            for _ in range(count):
                for name, (options, tag, imports) in configs.items():
                    for key, values in _times(options, tag, 1, imports).items():
                        results[name][key] += values
        finally:
            subprocess.run(["fusermount", "-u", str(mount)], check=False, capture_output=True)
            subprocess.run(["docker", "rmi", layered, own], check=False, capture_output=True)
    record["times"] = results
    base_pass = statistics.median(results["no add-on"]["pass_s"])
    mounted_pass = statistics.median(results["squashfuse mount"]["pass_s"])
    rows.append((
        f"python -c pass: no add-on vs one mounted (the hook; median of {count})",
        f"{base_pass * 1000:.0f} ms vs {mounted_pass * 1000:.0f} ms "
        f"(+{(mounted_pass - base_pass) * 1000:.0f} ms)", "",
    ))  # fmt: skip
    own_import = statistics.median(results["image's own site-packages"]["import_s"])
    for name in ("squashfuse mount", "image layer", "image's own site-packages"):
        median = statistics.median(results[name]["import_s"])
        rows.append((
            f"import {IMPORTS} after torch, {name} (median of {count}, interleaved)",
            f"{median:.2f} s = {median / own_import:.2f}x the image's own", "",
        ))  # fmt: skip
    return rows, record


if __name__ == "__main__":  # pragma: no cover - `python benchmarks/parts/addon.py IMAGE`
    for row in run(sys.argv[1] if len(sys.argv) > 1 else "ddpimg:cpu", 5)[0]:
        print(row)
