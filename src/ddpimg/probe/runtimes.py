"""Which container runtimes a cluster offers: the commands on PATH (apptainer, singularity,
podman-hpc, docker) and srun's own plugins (pyxis' ``--container-image``, the CSCS
Container Engine's ``--environment``), which ``srun --help`` lists."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

SRUN_HELP_TIMEOUT_S = 30.0
# In the order a draft prefers them when several exist (a site's documentation decides).
COMMANDS = ("apptainer", "singularity", "podman-hpc")
SRUN_PLUGINS = (("pyxis", "--container-image"), ("edf", "--environment"))


@dataclass(frozen=True)
class RuntimeFound:
    name: str  # a name of ddpimg.site.container.RUNTIMES
    how: str  # where it was found


def find_runtimes(env: Mapping[str, str]) -> list[RuntimeFound]:
    path = env.get("PATH")
    found = []
    for name in COMMANDS:
        where = shutil.which(name, path=path)
        if where:
            found.append(RuntimeFound(name, f"{where} on PATH"))
    srun = shutil.which("srun", path=path)
    if srun:
        try:
            proc = subprocess.run(
                [srun, "--help"],
                capture_output=True,
                text=True,
                timeout=SRUN_HELP_TIMEOUT_S,
                env=dict(env),
                check=False,
            )
            help_text = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            help_text = ""
        for name, option in SRUN_PLUGINS:
            if option in help_text:
                found.append(RuntimeFound(name, f"`srun --help` lists {option}"))
    return found
