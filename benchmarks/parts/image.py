"""The image: sizes and build times of the CPU and GPU flavours, and how long
``docker run --rm IMAGE train --help`` takes against ``train --help`` from the host venv.

The builds are made by ``nox -s bench`` (the build machinery lives in containers/imagebuild/:
the base image, the wheel server, the build arguments), which hands their times and sizes over in a
JSON file (``--image-builds``). Run on its own, this part measures the images that exist.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from parts.common import PYTHON, Row, log

FLAVOURS = ("cpu", "gpu")


def docker_missing() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return "docker is not installed"
    probe = subprocess.run([docker, "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"no Docker engine answers ({probe.stderr.strip()[-120:]})"
    return None


def image_size(tag: str) -> int | None:
    probe = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(probe.stdout.strip()) if probe.returncode == 0 else None


def _seconds(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - began


def run(builds_file: Path | None, count: int) -> tuple[list[Row], dict[str, Any]]:
    builds: dict[str, Any] = json.loads(builds_file.read_text()) if builds_file else {}
    if "skipped" in builds:
        return [("image sizes, build times, start time", f"skipped: {builds['skipped']}", "")], {
            "skipped": builds["skipped"]
        }
    missing = docker_missing()
    if missing is not None:
        row = ("image sizes, build times, start time", f"skipped: {missing}", "run as root")
        return [row], {"skipped": missing}
    rows: list[Row] = []
    record: dict[str, Any] = {"builds": builds}
    tags = {f: builds.get(f, {}).get("tag", f"ddpimg:{f}") for f in FLAVOURS}
    for flavour, tag in tags.items():
        size = image_size(tag)
        build_s = builds.get(flavour, {}).get("build_s")
        if build_s is not None:
            built = f"built in {build_s:.0f} s (no cache)"
        elif flavour in builds:
            built = "build not timed (--image-reuse)"
        else:
            built = "build not timed (run through `nox -s bench`)"
        result = "not built" if size is None else f"{size / 1e9:.2f} GB, {built}"
        rows.append((f"image {tag} ({flavour} flavour)", result, ""))
        record[flavour] = {"tag": tag, "bytes": size, "build_s": build_s}
    host = str(Path(PYTHON).parent / "train")
    commands = {"host venv: train --help": [host, "--help"]}
    commands |= {
        f"docker run --rm {tag} train --help": ["docker", "run", "--rm", tag, "train", "--help"]
        for tag in tags.values()
        if image_size(tag) is not None
    }
    for command in commands.values():
        _seconds(command)  # page cache, the image's layers mounted once
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(count):
        for name, command in commands.items():
            times[name].append(_seconds(command))
    log(f"start times: {times}")
    base = statistics.median(times["host venv: train --help"])
    for name, values in times.items():
        median = statistics.median(values)
        rows.append(
            (
                f"{name} (median of {count}, interleaved)",
                f"{median:.2f} s" + ("" if name.startswith("host") else f" = {median / base:.1f}x"),
                "",
            )
        )
    record["start_s"] = times
    return rows, record
