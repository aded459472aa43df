"""The login node checked before anything is staged: Slurm's commands and ddpimg are there,
and the site resolves. Each thing missing is named, with what would fix it.

ddpimg there is the one on the PATH of a non-interactive ssh command (which is not always an
interactive shell's: a module or a virtual environment activated in ~/.bashrc may not be),
or the command ``--remote-ddpimg`` gives (``~/venv/bin/ddpimg``). The site is the one its
``ddpimg env`` resolves with ``--site`` (a profile's name, or a file there), or, with ``auto``,
on its own (``DDPIMG_SITE``, then the profiles' ``[match]`` rules): a login node that matches
no profile is an error, since ``generic`` knows none of a site's rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddpimg.errors import DdpimgError, printable
from ddpimg.remote import programs
from ddpimg.remote.transport import Completed, Transport
from ddpimg.untrusted import parse_json

AUTO = "auto"
GENERIC = "generic"
NEEDED = ("sbatch", "scontrol", "scancel", "tar", "sha256sum")
MAX_VALUE = 4096
ENV_LIMIT = 1 << 20


@dataclass(frozen=True)
class LoginNode:
    """What the login node has: the words that run ddpimg there, the profile its ddpimg
    resolves (``site``: the name; ``site_arg``: what to pass as ``--site``, None for auto)."""

    host: str
    ddpimg: tuple[str, ...]
    site: str
    site_arg: str | None
    home: str
    where: str  # which ddpimg runs there, for the user: its path on PATH, or --remote-ddpimg


def parse_facts(text: str) -> dict[str, str]:
    """``NAME VALUE`` lines of ``programs.probe``: the first of each name, printable and
    bounded, the rest ignored."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name and name not in facts and value.isprintable() and len(value) <= MAX_VALUE:
            facts[name] = value
    return facts


def check_login(transport: Transport, remote_ddpimg: Sequence[str] | None, site: str) -> LoginNode:
    """The login node's facts, or a DdpimgError naming what is missing there."""
    host = transport.host
    facts = parse_facts(transport.run(programs.probe(), "what the login node has").text)
    path = facts.get("path", "")
    missing = [name for name in NEEDED if not facts.get(f"which-{name}")]
    if missing:
        raise DdpimgError(
            f"{host}: {', '.join(missing)} not found on the login node (PATH={printable(path)})",
            hint="is it a login node of a Slurm cluster? Give one whose ssh commands find "
            "sbatch, scontrol, scancel, tar and sha256sum",
        )
    ddpimg = tuple(remote_ddpimg) if remote_ddpimg else ("ddpimg",)
    if remote_ddpimg is None and not facts.get("which-ddpimg"):
        raise DdpimgError(
            f"{host}: ddpimg is not on the login node's PATH for ssh commands "
            f"(PATH={printable(path)})",
            hint="install it there (pip install --user ddpimg, or in a virtual environment) and "
            "give its path with --remote-ddpimg ~/venv/bin/ddpimg, or put its directory on PATH "
            "in a file non-interactive shells read (~/.bashrc before its interactive check)",
        )
    home = facts.get("home", "")
    site_arg = None if site == AUTO else site_on_login_node(site, home)
    argv = ["env", "--json"] + ([] if site_arg is None else ["--site", site_arg])
    answer = transport.run(
        programs.ddpimg_command(ddpimg, argv), "ddpimg env on the login node", limit=ENV_LIMIT
    )
    resolved = _resolved_site(host, ddpimg, site, answer)
    if site == AUTO and resolved == GENERIC:
        raise DdpimgError(
            f"{host}: the login node matches no site profile (its ddpimg resolves {GENERIC}, "
            "which knows none of the site's network, image or preemption rules)",
            hint=f"give --site NAME, or draft this cluster's profile on the login node with "
            f"`ddpimg site probe --out ~/mycluster.toml` and give --site ~/mycluster.toml "
            f"(--site {GENERIC} to go on without one)",
        )
    on_path = facts.get("which-ddpimg", "")
    where = f"ddpimg {on_path}" if remote_ddpimg is None else f"ddpimg {' '.join(ddpimg)}"
    return LoginNode(host, ddpimg, resolved, site_arg, home, where)


def site_on_login_node(site: str, home: str) -> str:
    """``--site`` as the login node's ddpimg takes it wherever it runs: a profile's name as
    it is, a file's path (``x.toml``, ``~/x.toml``, ``dir/x``) under the home there."""
    is_file = "/" in site or site.endswith(".toml")
    if not is_file or site.startswith("/") or not home.startswith("/"):
        return site
    relative = site[2:] if site.startswith("~/") else site
    return f"{home.rstrip('/')}/{relative}"


def _resolved_site(host: str, ddpimg: Sequence[str], site: str, answer: Completed) -> str:
    named = "its own choice" if site == AUTO else f"--site {printable(site)}"
    if answer.status == 127 or (answer.status != 0 and "not found" in answer.error_text):
        raise DdpimgError(
            f"{host}: {printable(' '.join(ddpimg))} cannot be run on the login node "
            f"({remote_said(answer)})",
            hint="give the path of ddpimg there with --remote-ddpimg",
        )
    if answer.status != 0:
        raise DdpimgError(
            f"{host}: the login node cannot resolve the site ({named}): {remote_said(answer)}",
            hint="give --site a profile the login node's ddpimg knows (ddpimg site probe "
            "drafts one there), or a profile file's path on the login node",
        )
    try:
        data = parse_json(answer.stdout)
    except ValueError:
        data = None
    found = data.get("site") if isinstance(data, Mapping) else None
    if not isinstance(found, str) or not found.isprintable() or not 0 < len(found) <= 200:
        raise DdpimgError(
            f"{host}: ddpimg env --json on the login node did not name a site",
            hint="check the ddpimg installed there: ddpimg env --json",
        )
    return found


def remote_said(answer: Completed, count: int = 3) -> str:
    """A failed remote program's last error lines, escaped, on one line."""
    lines = [line.strip() for line in answer.error_text.splitlines() if line.strip()][-count:]
    return " / ".join(printable(line[:500]) for line in lines) or f"exit status {answer.status}"
