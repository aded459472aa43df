"""Add-ons on Python's path, after the environment's own packages, and the package set an
add-on is made for. Standard library only, and cheap: a copy of this file is the hook that
every interpreter of the image runs at start-up (``install_hook``), so it imports nothing
that Python's start-up has not imported already, and with no add-on mounted it costs one
``listdir``.

Why a ``.pth`` file: ``site`` executes its ``import`` lines while it builds ``sys.path``,
for every interpreter of the environment (``train``, ``python``, ``torchrun``,
``deepspeed``, a DataLoader worker), whatever its command line, and ``python -I`` (the
image's entrypoints) keeps it. ``PYTHONPATH`` would put the add-ons *before* the image's
packages, and is removed for the training process anyway (``ddpimg.cleanenv``).

Each add-on mounted at ``ROOT/NAME`` (``$DDPIMG_ADDON_ROOT`` instead of ``/opt/ddpimg/addons``
where the job has no container, ``ddpimg sbatch --runtime none``) holds ``site-packages/``
and the identity of the package set it was made for (``PACKAGE_SET_FILE``). An add-on made
for this environment's package set is appended to ``sys.path`` once ``site`` has added every
site directory (``on_start`` says how), with ``site.addsitedir``: its own ``.pth`` files are
processed. One made for another package set is left off, with one warning line on stderr
unless the process is ddpimg itself, which refuses to start with an error of its own
(``ddpimg.addon.mounted``).

The package set is what the environment's Python sees in its site directories: every
distribution's name and version (from the names of their ``.dist-info`` / ``.egg-info``
directories: no file is opened), but ddpimg's own, with the Python version, its bytecode
tag and the platform. Its identity is a sha256 over that, so an image rebuilt with the same
packages takes the same add-ons, and one with another torch refuses them.
"""

from __future__ import annotations

import os
import sys

ROOT = "/opt/ddpimg/addons"
ROOT_VARIABLE = "DDPIMG_ADDON_ROOT"
SUFFIX = ".addon.sqsh"  # what ddpimg addon build writes: NAME.addon.sqsh
SITE_DIR = "site-packages"
PACKAGE_SET_FILE = "package-set"
HOOK_MODULE = "_ddpimg_addons"
# Sorted after the environment's other .pth files (site processes them in name order): a path
# that one of them appends comes before the add-ons too.
PTH_NAME = "zz-ddpimg-addons.pth"
SELF = "ddpimg"  # not part of the package set: a new ddpimg takes the same add-ons
MAX_NAME = 64
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_SITE_NAMES = ("site-packages", "dist-packages")
_METADATA_SUFFIXES = (".dist-info", ".egg-info")

# What the hook did in this process: names added, and (name, why) left off.
added: list[str] = []
skipped: list[tuple[str, str]] = []
_ran: list[bool] = []


def mount_name(filename: str) -> str:
    """``timm.addon.sqsh`` -> ``timm``: the add-on's directory under ROOT."""
    name = filename.rsplit("/", 1)[-1]
    for suffix in (SUFFIX, ".sqsh", ".squashfs"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def valid_name(name: str) -> bool:
    """An add-on's name: letters, digits, '.', '_' and '-', starting with a letter or digit,
    at most MAX_NAME characters (it is a directory name and a word of the batch script)."""
    return (
        0 < len(name) <= MAX_NAME
        and name[0].isascii()
        and name[0].isalnum()
        and all(char in _NAME_CHARACTERS for char in name)
    )


def addon_root(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """Where add-ons are mounted: ``$DDPIMG_ADDON_ROOT``, else ``/opt/ddpimg/addons``."""
    env = os.environ if environ is None else environ
    return env.get(ROOT_VARIABLE) or ROOT


def mounted(root: str) -> list[tuple[str, str]]:
    """(name, directory) of every add-on under ``root``, by name: a directory with a valid
    name holding ``site-packages``."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(root, name)
        if valid_name(name) and os.path.isdir(os.path.join(path, SITE_DIR)):
            found.append((name, path))
    return found


def canonical_name(name: str) -> str:
    """A distribution's name as PEP 503 compares them: ``PyYAML``, ``pyyaml`` -> ``pyyaml``."""
    out: list[str] = []
    for char in name.lower():
        if char not in "-_.":
            out.append(char)
        elif not out or out[-1] != "-":
            out.append("-")
    return "".join(out)


def site_dirs(root: str | None = None) -> list[str]:
    """The environment's site directories, in path order: ``site.getsitepackages()`` and the
    entries of ``sys.path`` named site-packages or dist-packages (a layered venv's), but the
    user's site (``~/.local``) and the add-ons'."""
    import site

    addons = os.path.join(root or addon_root(), "")
    user = getattr(site, "USER_SITE", None)
    candidates = [*sys.path, *site.getsitepackages()]
    found: list[str] = []
    for entry in candidates:
        if not entry or os.path.basename(entry.rstrip("/")) not in _SITE_NAMES:
            continue
        path = os.path.abspath(entry)
        if path in found or path == user or os.path.join(path, "").startswith(addons):
            continue
        if os.path.isdir(path):
            found.append(path)
    return found


def distributions(dirs: list[str]) -> dict[str, str]:
    """{canonical name: version} of the distributions in ``dirs`` (the first of a name wins,
    as an import would), from their metadata directories' names; ddpimg's left out."""
    found: dict[str, str] = {}
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in names:
            parsed = _metadata_name(entry)
            if parsed is None:
                continue
            name, version = parsed
            if name != SELF and name not in found:
                found[name] = version
    return found


def _metadata_name(entry: str) -> tuple[str, str] | None:
    """(canonical name, version) from ``name-version.dist-info`` or
    ``Name-version[-pyX.Y].egg-info``; None for anything else."""
    for suffix in _METADATA_SUFFIXES:
        if entry.endswith(suffix):
            parts = entry[: -len(suffix)].split("-")
            if len(parts) >= 2 and parts[0] and parts[1]:
                return canonical_name(parts[0]), parts[1].replace("_", "-")
    return None


def interpreter() -> dict[str, str]:
    """The interpreter an add-on's bytecode and extensions are for."""
    machine = os.uname().machine if hasattr(os, "uname") else "unknown"
    return {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "implementation": str(sys.implementation.cache_tag),
        "platform": f"{sys.platform}-{machine}",
    }


def package_set_id(facts: dict[str, str], packages: dict[str, str]) -> str:
    """The identity of a package set: sha256 over the interpreter's facts and every
    ``name==version``, sorted, one a line."""
    lines = [f"{key}={facts[key]}" for key in sorted(facts)]
    lines += [f"{name}=={packages[name]}" for name in sorted(packages)]
    return _sha256("\n".join(lines).encode("utf-8"))


def _sha256(data: bytes) -> str:
    """sha256 hex of ``data`` from CPython's built-in module where it has one: importing
    hashlib (OpenSSL) would be most of what the start-up hook costs."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # CPython 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]  # 3.11
        except ImportError:  # pragma: no cover - a Python without them
            from hashlib import sha256
    return str(sha256(data).hexdigest())


def current_package_set(root: str | None = None) -> tuple[str, dict[str, str], dict[str, str]]:
    """(identity, interpreter facts, packages) of this environment."""
    facts = interpreter()
    packages = distributions(site_dirs(root))
    return package_set_id(facts, packages), facts, packages


def read_package_set(addon: str) -> str:
    """The identity an add-on directory says it was made for ('' when it says none)."""
    try:
        with open(os.path.join(addon, PACKAGE_SET_FILE), encoding="ascii") as stream:
            text = stream.read(200)
    except (OSError, UnicodeDecodeError):
        return ""
    return text.strip()


def _is_ddpimg() -> bool:
    """Whether this interpreter runs ddpimg (``python -m ddpimg``, the ``train`` and
    ``ddpimg`` scripts), which reports a refused add-on itself."""
    argv = list(getattr(sys, "orig_argv", []))[1:]
    for i, word in enumerate(argv):
        if word == "-m":
            return i + 1 < len(argv) and argv[i + 1] == SELF
        if word == "-c":
            return False
        if not word.startswith("-"):
            return os.path.basename(word) in ("train", SELF)
    return False


def on_start() -> None:
    """What the ``.pth`` line runs: nothing when no add-on is mounted; else ``extend`` once
    ``site`` has put every site directory on the path. ``site`` runs a venv's ``.pth``
    files twice, the first time before it knows the venv's prefixes, and a venv over a
    system Python (``--system-site-packages``) adds the system's directories after its
    own: so the add-ons are appended at the first import made outside ``site``'s work on
    the site directories (its ``import sitecustomize``, at the latest)."""
    if _ran or not mounted(addon_root()):
        return
    _ran.append(True)
    sys.meta_path.insert(0, _AfterSite)


class _AfterSite:
    """A meta path finder that finds nothing: its first call outside ``site``'s setup
    removes it and runs ``extend``."""

    @staticmethod
    def find_spec(fullname: str, path: object = None, target: object = None) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_filename.endswith("site.py") and code.co_name in _SITE_SETUP:
                return None
            frame = frame.f_back  # type: ignore[assignment]
        if _AfterSite in sys.meta_path:
            sys.meta_path.remove(_AfterSite)
            extend()
        return None


_SITE_SETUP = ("addsitedir", "addpackage", "addsitepackages", "addusersitepackages", "venv")


def extend() -> None:
    """Append the add-ons made for this environment to ``sys.path``, after its site
    directories, each with ``site.addsitedir`` (its own ``.pth`` files processed)."""
    import site

    root = addon_root()
    identity = ""
    for name, path in mounted(root):
        wanted = read_package_set(path)
        if not identity:
            identity = current_package_set(root)[0]
        if wanted != identity:
            why = (
                f"made for package set {wanted[:12] or '(none)'}, this environment's is "
                f"{identity[:12]}"
            )
            skipped.append((name, why))
            if not _is_ddpimg():
                print(
                    f"ddpimg: warning: add-on {name} ({path}) is not on the path: {why}; "
                    "build it again in this image (ddpimg addon build --lock ...)",
                    file=sys.stderr,
                )
            continue
        site.addsitedir(os.path.join(path, SITE_DIR))
        added.append(name)


def install_hook(target: str | None = None) -> list[str]:
    """Write the hook (this file as ``_ddpimg_addons.py`` and the ``.pth`` that imports it)
    into ``target``, by default this interpreter's site-packages; the files written."""
    import sysconfig

    directory = target or sysconfig.get_paths()["purelib"]
    module = os.path.join(directory, HOOK_MODULE + ".py")
    with open(__file__, encoding="utf-8") as stream:
        source = stream.read()
    with open(module, "w", encoding="utf-8") as stream:
        stream.write(source)
    pth = os.path.join(directory, PTH_NAME)
    with open(pth, "w", encoding="utf-8") as stream:
        stream.write(f"import {HOOK_MODULE}; {HOOK_MODULE}.on_start()\n")
    return [module, pth]
