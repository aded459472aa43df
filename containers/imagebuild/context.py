"""What `docker build` gets: a clean copy of part of the tree, and facts about its source."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from .locks import CONTAINERS

# The tree minus .git, .nox, runs and caches.
CONTEXT = ("pyproject.toml", "README.md", "src", "site-profiles", "entrypoints", "containers")
CONTEXT_IGNORE = ("__pycache__", "*.pyc", "*.egg-info", "build", "*.sif")
# Where the Dockerfile's build stage looks for an extra CA bundle (build-inputs/README.md).
EXTRA_CA = CONTAINERS / "build-inputs" / "extra-ca.pem"


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def source_facts(root: Path = Path()) -> dict[str, str]:
    """REVISION (``-dirty`` when tracked files changed), SOURCE_DATE_EPOCH (the environment's,
    else the last commit's date), CREATED (that date, ISO 8601) and VERSION (pyproject's)."""
    revision = _git(root, "rev-parse", "HEAD")
    if revision and _git(root, "status", "--porcelain", "--untracked-files=no"):
        revision += "-dirty"
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or _git(root, "log", "-1", "--format=%ct") or "0"
    created = datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    # tomllib is 3.11+; nox may run on 3.10. The [project] version is the first one.
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)
    return {
        "REVISION": revision,
        "SOURCE_DATE_EPOCH": epoch,
        "CREATED": created,
        "VERSION": found.group(1) if found else "",
    }


def stage_context(directory: Path, extra_ca: Path | None = None, root: Path = Path()) -> None:
    """Copy CONTEXT from ``root`` into ``directory`` (without CONTEXT_IGNORE), and
    ``extra_ca`` to where the build stage reads it."""
    for name in CONTEXT:
        source = root / name
        if source.is_dir():
            ignore = shutil.ignore_patterns(*CONTEXT_IGNORE)
            shutil.copytree(source, directory / name, ignore=ignore)
        else:
            shutil.copy2(source, directory / name)
    if extra_ca is not None:
        shutil.copy2(extra_ca, directory / EXTRA_CA)
