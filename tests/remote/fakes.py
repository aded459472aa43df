"""A login node for the unit tests: the remote programs run by a local ``sh`` (through the
same base64 wrapper ssh carries), in a home directory of the test's, with fake Slurm commands
first on PATH and the ddpimg under test after them. No ssh, no Slurm: what only the real
engines can show is in tests/multinode/test_remote.py."""

from __future__ import annotations

import sys
from pathlib import Path

import ddpimg
from ddpimg.remote.programs import command_line
from ddpimg.remote.transport import ProcessTransport

FAKE_SBATCH = """\
#!/bin/sh
# sbatch --parsable FILE: keeps the script, answers the next job id.
cp "$2" "$HOME/.fake/submitted.sh"
printf '%s\\n' "$(cat "$HOME/.fake/next-id" 2>/dev/null || echo 4242)"
"""
FAKE_SCONTROL = """\
#!/bin/sh
# scontrol show job -o ID: the line the test wrote, else Slurm's answer for a job it forgot.
if [ -s "$HOME/.fake/job" ]; then cat "$HOME/.fake/job"; exit 0; fi
echo "slurm_load_jobs error: Invalid job id specified" >&2
exit 1
"""
FAKE_SCANCEL = """\
#!/bin/sh
printf '%s\\n' "$@" >> "$HOME/.fake/cancelled"
"""


class LocalLogin(ProcessTransport):
    """The fake login node: ``home`` is its user's home, ``bin`` its fake commands."""

    def __init__(self, root: Path, host: str = "login", path: str | None = None) -> None:
        super().__init__(host)
        self.home = root / "home"
        self.bin = root / "bin"
        self.fake = self.home / ".fake"
        self.fake.mkdir(parents=True, exist_ok=True)
        self.bin.mkdir(exist_ok=True)
        for name, text in (
            ("sbatch", FAKE_SBATCH),
            ("scontrol", FAKE_SCONTROL),
            ("scancel", FAKE_SCANCEL),
        ):
            self.install(name, text)
        venv = Path(sys.executable).parent
        self.path = path or f"{self.bin}:{venv}:/usr/bin:/bin"
        self.programs: list[str] = []

    def install(self, name: str, text: str) -> None:
        (self.bin / name).write_text(text)
        (self.bin / name).chmod(0o755)

    def argv(self, program: str) -> list[str]:
        self.programs.append(program)
        source = str(Path(ddpimg.__file__).resolve().parent.parent)
        env = [f"HOME={self.home}", f"PATH={self.path}", f"PYTHONPATH={source}"]
        return ["env", "-i", *env, "/bin/sh", "-c", f"cd && {command_line(program)}"]

    def job(self, line: str) -> None:
        """What the fake scontrol answers from now on ("" : Slurm forgot the job)."""
        (self.fake / "job").write_text(line + "\n" if line else "")
