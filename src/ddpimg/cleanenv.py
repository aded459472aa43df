"""Which host variables the training process must not inherit.

A job started from a login shell carries the host's module system, its Python, conda and
library paths. Inside a container (or a clean venv) they break imports and dynamic linking:
LD_LIBRARY_PATH pulls in the host's libstdc++ or libnccl, PYTHONPATH shadows the image's
torch. LD_* and PYTHON* act when a process starts, so the entrypoint computes this once and
re-executes itself without them before importing anything heavy.

Launcher and device variables (SLURM_*, PMI*, OMPI_*, *_VISIBLE_DEVICES, NCCL_*) are always kept;
so is anything the profile exports or the user names in ``--keep-env`` / ``DDPIMG_KEEP_ENV``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

# The Python and library variables of a software stack: the host's must not reach the
# training process, but in a site's own image (ddpimg installed into it, `ddpimg sbatch
# --ddpimg-from`) they are the image's and must stay (ddpimg.jobs.foreign).
SOFTWARE_STACK: tuple[str, ...] = (
    # Dynamic linking.
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    # Python, virtual environments and conda.
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONSTARTUP",
    "VIRTUAL_ENV",
    "VIRTUAL_ENV_PROMPT",
    "CONDA_*",
    "_CE_CONDA",
    "_CE_M",
)

# fnmatch patterns of host variables removed by default.
DEFAULT_REMOVE: tuple[str, ...] = (
    # Environment Modules / Lmod, including the shell functions bash exports for `module`.
    "LOADEDMODULES",
    "MODULEPATH",
    "MODULEPATH_*",
    "MODULESHOME",
    "MODULES_*",
    "MODULE_VERSION*",
    "LMOD_*",
    "__LMOD_*",
    "_LMFILES_",
    "_ModuleTable*",
    "BASH_FUNC_module*",
    "BASH_FUNC_ml*",
    # The host's linker and Python settings.
    *SOFTWARE_STACK,
)

# Never removed, whatever a pattern above or in a profile says.
ALWAYS_KEEP: tuple[str, ...] = (
    "SLURM_*",
    "SLURMD_*",
    "PMI*",
    "PMIX_*",
    "OMPI_*",
    "MV2_*",
    "PALS_*",
    "*_VISIBLE_DEVICES",
    "NCCL_*",
    "DDPIMG_*",
)

# Library directories that belong to the container runtime, not to the host: Apptainer's
# `--nv` binds the host driver into /.singularity.d/libs and puts that on LD_LIBRARY_PATH;
# CUDA base images put the NVIDIA container toolkit's directories there. Dropping them would
# lose libcuda.
RUNTIME_LIBRARY_DIRS: tuple[str, ...] = (
    "/.singularity.d/libs",
    "/usr/local/nvidia/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/cuda/compat",
)


@dataclass(frozen=True)
class CleanEnvironment:
    """The outcome: names to remove, and variables whose value is rewritten."""

    removed: tuple[str, ...]  # sorted; includes LD_LIBRARY_PATH when any host entry was dropped
    rewritten: tuple[tuple[str, str], ...]  # e.g. LD_LIBRARY_PATH reduced to runtime dirs

    def apply(self, env: Mapping[str, str]) -> dict[str, str]:
        """A new environment without the removed variables and with the rewritten ones."""
        cleaned = {k: v for k, v in env.items() if k not in self.removed}
        cleaned.update(self.rewritten)
        return cleaned


def matches_pattern(name: str, pattern: str) -> bool:
    """``fnmatchcase(name, pattern)``, without a regular expression for the usual patterns.

    fnmatch compiles one expression per pattern, and compiling the thirty-odd patterns above
    cost more than the rest of ``ddpimg env``. A plain name, a prefix (``LMOD_*``), a suffix
    (``*_VISIBLE_DEVICES``) or one ``*`` inside are compared as strings; a pattern with ``?``,
    ``[`` or several ``*`` goes to fnmatchcase.
    """
    if "?" in pattern or "[" in pattern:
        return fnmatchcase(name, pattern)
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    if len(parts) == 2:
        head, tail = parts
        return len(name) >= len(head) + len(tail) and name.startswith(head) and name.endswith(tail)
    return fnmatchcase(name, pattern)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(matches_pattern(name, pattern) for pattern in patterns)


def _runtime_library_path(value: str, extra_dirs: tuple[str, ...] = ()) -> str:
    dirs = RUNTIME_LIBRARY_DIRS + extra_dirs
    kept = [
        entry
        for entry in value.split(":")
        if entry and any(entry.rstrip("/") == d or entry.startswith(d + "/") for d in dirs)
    ]
    return ":".join(kept)


def _with_library_dirs(value: str, library_dirs: tuple[str, ...]) -> str:
    """``value`` with the site's fabric library directories in front (once each)."""
    entries = [entry for entry in value.split(":") if entry]
    return ":".join([*(d for d in library_dirs if d not in entries), *entries])


def parse_keep_list(value: str) -> tuple[str, ...]:
    """``DDPIMG_KEEP_ENV`` or one ``--keep-env``: comma- or whitespace-separated names or
    fnmatch patterns."""
    return tuple(p for p in value.replace(",", " ").split() if p)


def clean_environment(
    env: Mapping[str, str],
    extra_remove: Iterable[str] = (),
    keep: Iterable[str] = (),
    library_dirs: Iterable[str] = (),
) -> CleanEnvironment:
    """Decide which host variables the training process loses. Pure.

    ``library_dirs`` (the profile's ``fabric.library_paths``) are kept on LD_LIBRARY_PATH
    and put in front when missing: the dynamic linker reads LD_LIBRARY_PATH when a process
    starts, so the change takes the same re-exec as a removal.
    """
    remove_patterns = DEFAULT_REMOVE + tuple(extra_remove)
    keep_patterns = ALWAYS_KEEP + tuple(keep)
    fabric_dirs = tuple(library_dirs)
    removed: list[str] = []
    rewritten: list[tuple[str, str]] = []
    for name in sorted(env):
        if name == "LD_LIBRARY_PATH" and fabric_dirs:
            continue  # below
        if _matches(name, keep_patterns) or not _matches(name, remove_patterns):
            continue
        if name == "LD_LIBRARY_PATH":
            kept = _runtime_library_path(env[name])
            if kept == env[name]:
                continue  # nothing from the host on it
            if kept:
                rewritten.append((name, kept))
        removed.append(name)
    if fabric_dirs:
        value = env.get("LD_LIBRARY_PATH", "")
        host_kept = _matches("LD_LIBRARY_PATH", keep_patterns) or not _matches(
            "LD_LIBRARY_PATH", remove_patterns
        )
        base = value if host_kept else _runtime_library_path(value, fabric_dirs)
        if base != value:
            removed.append("LD_LIBRARY_PATH")  # host entries dropped
        wanted = _with_library_dirs(base, fabric_dirs)
        if wanted != value:
            rewritten.append(("LD_LIBRARY_PATH", wanted))
    return CleanEnvironment(removed=tuple(sorted(removed)), rewritten=tuple(rewritten))
