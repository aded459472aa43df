"""Every developer and CI action on ddpimg is a session here; ``nox -l`` is the menu.

    nox                        lint and unit tests (the default sessions)
    nox -s integration         tests under real launchers: a private Slurm cluster, Open MPI,
                               torchrun, DeepSpeed (installs the Debian packages when root)
    nox -s demo                the main job: 2 local CPU workers, synthetic data, 1 epoch
    nox -s bench               benchmarks: vs plain PyTorch loops, overheads, scale, the image
    nox -s tests -- -k slurm   arguments after ``--`` go to pytest (or to ``train`` for demo)

What gets installed is written once, in ``requirements/train.txt`` (the training stack) and
``requirements/dev.txt`` (test and lint tools), and every session installs both: even lint,
because mypy judges the trainers against torch's own types, and without torch installed it
reports different errors than in a developer's environment. Virtual environments are reused
between runs; nox gives each session its own (~5.5 GB each, mostly torch's CUDA wheels).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

DEV_REQUIREMENTS = "requirements/dev.txt"
TRAIN_REQUIREMENTS = "requirements/train.txt"
DEMO_ARGS = ["--nproc-per-node", "2", "--data", "synthetic", "--epochs", "1", "--out", "runs/demo"]


def _install(session: nox.Session) -> None:
    """Install ddpimg (editable), the training stack and the dev tools."""
    session.install("-e", ".", "-r", TRAIN_REQUIREMENTS, "-r", DEV_REQUIREMENTS)


def _pytest(session: nox.Session, *args: str, engines: bool = False) -> None:
    """Run pytest with ``args`` then the session's positional arguments.

    Any non-zero exit fails the session, 5 ("no tests collected") included: a selection
    that matches nothing must not pass as green.
    """
    _install(session)
    if engines:
        if os.geteuid() == 0:
            session.run("bash", "tests/engines/install.sh", external=True)
        else:
            session.log("not root: not installing engine packages (tests/engines/install.sh)")
    session.run("pytest", *args, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Check style and types: ruff check, ruff format --check, mypy (strict)."""
    _install(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the unit tests (no launcher or engine started, GPU tests deselected)."""
    engine_dirs = ("--ignore=tests/integration", "--ignore=tests/multinode")
    _pytest(session, "tests", *engine_dirs, "-m", "not (gpu or docker)")


@nox.session(default=False)
def integration(session: nox.Session) -> None:
    """Run the integration tests under real launchers (Slurm, Open MPI, torchrun)."""
    _pytest(session, "tests/integration", "-p", "no:cacheprovider", engines=True)


@nox.session(default=False)
def multinode(session: nox.Session) -> None:
    """Run the multi-node tests on a Slurm cluster of network-namespace nodes (root)."""
    _pytest(session, "tests/multinode", "-p", "no:cacheprovider", engines=True)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """Run the main job: train on 2 local CPU workers, synthetic data, 1 epoch."""
    _install(session)
    session.run("train", *(session.posargs or DEMO_ARGS))


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks (docs/performance.md): -- [benchmarks/bench.py options] [--image-reuse]."""
    _install(session)
    args = list(session.posargs)
    reuse = "--image-reuse" in args
    if reuse:
        args.remove("--image-reuse")
    # Only the --parts option matters here: without it bench.py runs every part, the image
    # part included, hence the default.
    parts = argparse.ArgumentParser(add_help=False)
    parts.add_argument("--parts", default="image")
    if "image" not in parts.parse_known_args(args)[0].parts.split(","):
        session.run("python", "benchmarks/bench.py", *args)
        return
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as tmp:
        builds = Path(tmp) / "builds.json"
        started_engine = _bench_images(session, builds, rebuild=not reuse)
        try:
            session.run("python", "benchmarks/bench.py", "--image-builds", str(builds), *args)
        finally:
            if started_engine:
                _engine(session, "stop")


# ---- The image: containers/ (docs/containers.md) -------------------------------------------

CONTAINERS = Path("containers")
LOCK_INPUT = CONTAINERS / "requirements.in"


@dataclasses.dataclass(frozen=True)
class Lock:
    """How `nox -s lock` makes containers/lock/NAME.txt from LOCK_INPUT, and what an image
    built from it needs. The Dockerfile's TORCH_SOURCE names the lock."""

    index: str | None = None  # where torch comes from; None: PyPI's own wheels
    # Pins that replace LOCK_INPUT's (uv --override): another torch from the same input list.
    overrides: Path | None = None
    # GPU_BASE for the gpu flavour; None: the Dockerfile's default (CUDA 13). The CUDA base
    # must not be newer than torch's CUDA: the NVIDIA container runtime refuses to start an
    # image whose NVIDIA_REQUIRE_CUDA the host's driver does not meet.
    gpu_base: str | None = None
    tag_suffix: str = ""  # the default tag is ddpimg:FLAVOUR + this


# The CUDA 12.8 runtime base of the V100 / pre-580-driver flavour. The digest is that of the
# tag's multi-platform index; `docker buildx imagetools inspect TAG` shows it.
CUDA_12_8_BASE = (
    "nvidia/cuda:12.8.1-base-ubuntu24.04"
    "@sha256:133c78a0575303be34164d0b90137a042172bdf60696af01a3c424ab402d86e2"
)
# One lock per torch build; src/ddpimg/hardware/builds.py describes each one's hardware.
LOCKS: dict[str, Lock] = {
    "pypi": Lock(),  # PyPI's torch as requirements/train.txt pins it: CUDA 13, no V100
    # PyTorch's CPU wheels: a smaller cpu image. Not committed: its index is out of reach
    # from this project's machines; `nox -s lock -- cpu` makes it where it is reachable.
    "cpu": Lock(index="https://download.pytorch.org/whl/cpu"),
    # PyPI's last CUDA 12.8 torch: V100 (sm 7.0) and drivers older than 580.
    "pypi-cu128": Lock(
        overrides=CONTAINERS / "overrides" / "pypi-cu128.txt",
        gpu_base=CUDA_12_8_BASE,
        tag_suffix="-cu128",
    ),
}
# Both flavours' lock when none is named: the Dockerfile's TORCH_SOURCE default, committed,
# so that the Dockerfile's own example command works on a fresh checkout. Its torch (CUDA
# 13) runs on the CPU too; `--torch cpu` takes the smaller CPU build where that lock exists.
DEFAULT_LOCK = "pypi"
# The oldest Python among the bases (Debian 12: 3.11; Ubuntu 24.04: 3.12): the locks are
# universal from there on, with hashes for every platform's files.
LOCK_PYTHON = "3.11"
UV = "uv==0.13.8"
SPYTHON = "spython==0.3.14"
# The base image made by containers/engine.sh where no registry can be reached.
LOCAL_BASE = "ddpimg-base:bookworm"
# What `docker build` gets as context: the tree minus .git, .nox, runs and caches.
CONTEXT = ("pyproject.toml", "README.md", "src", "site-profiles", "entrypoints", "containers")
CONTEXT_IGNORE = ("__pycache__", "*.pyc", "*.egg-info", "build", "*.sif")
WHEELHOUSE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ddpimg/wheelhouse"
SMOKE_IMAGE = "ddpimg:cpu"
WHEEL_SERVER_PORT = 38751  # on 127.0.0.1, while a --local build runs


@dataclasses.dataclass(frozen=True)
class ImageBuild:
    """One `docker build` of containers/Dockerfile."""

    flavour: str
    tag: str
    torch: str  # a LOCKS name
    local: bool = False  # no registry: debootstrap base, locked files served from this machine
    no_cache: bool = False
    ds_build_ops: str | None = None  # a CUDA devel image to build the venv in, with the ops
    cuda_arch_list: str | None = None  # TORCH_CUDA_ARCH_LIST for those ops
    mpi4py_wheel: bool = False  # mpi4py's wheel instead of compiling it (Dockerfile MPI4PY_BUILD)
    extra_ca: Path | None = None


# CI's image: the CPU flavour on the local base, torch from PyPI (the default lock; its torch
# is the CUDA 13 build, the gpu flavour's: `nox -s flavours` reads that from it too), mpi4py's
# wheel (compiling it would take a quarter of CI's time for the smoke part).
SMOKE_BUILD = ImageBuild("cpu", SMOKE_IMAGE, "pypi", local=True, mpi4py_wheel=True)
# The CUDA 12.8 GPU image as `nox -s flavours` builds it: CI's way, on the local base.
CUDA12_BUILD = ImageBuild("gpu", "ddpimg:gpu-cu128", "pypi-cu128", local=True, mpi4py_wheel=True)

# The images the bench part times: what `nox -s image -- FLAVOUR --local` makes.
BENCH_BUILDS = [
    ImageBuild(flavour, f"ddpimg:{flavour}", "pypi", local=True) for flavour in ("cpu", "gpu")
]


def _bench_images(session: nox.Session, record: Path, rebuild: bool) -> bool:
    """Build BENCH_BUILDS without cache (``rebuild``) and write their times and sizes to
    ``record`` for benchmarks/parts/image.py; True when this started dockerd."""
    if not _engine_answers() and os.geteuid() != 0:
        record.write_text(json.dumps({"skipped": "no Docker engine, and starting one needs root"}))
        return False
    if os.geteuid() == 0:
        session.run("bash", "tests/engines/install.sh", external=True)
    ours = not _engine_answers()
    if ours:
        _engine(session, "start")
    results: dict[str, Any] = {}
    for build in BENCH_BUILDS:
        if rebuild:
            elapsed, size = _build_image(session, dataclasses.replace(build, no_cache=True))
            results[build.flavour] = {"tag": build.tag, "build_s": elapsed, "bytes": size}
        else:
            results[build.flavour] = {"tag": build.tag, "build_s": None}
    record.write_text(json.dumps(results))
    return ours


def _default_tag(flavour: str, torch: str) -> str:
    return f"ddpimg:{flavour}{LOCKS[torch].tag_suffix}"


def _image_options(posargs: Sequence[str]) -> ImageBuild:
    parser = argparse.ArgumentParser(prog="nox -s image --", allow_abbrev=False)
    parser.add_argument("flavour", choices=["cpu", "gpu"])
    parser.add_argument("--tag", help="default: ddpimg:FLAVOUR, ddpimg:gpu-cu128 for pypi-cu128")
    parser.add_argument("--torch", choices=sorted(LOCKS), help=f"lock (default: {DEFAULT_LOCK})")
    parser.add_argument(
        "--local",
        action="store_true",
        help="no registry: start dockerd if needed, build on the debootstrap base, serve the "
        "locked files from this machine to the build",
    )
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument(
        "--ds-build-ops",
        metavar="DEVEL_IMAGE",
        help="pre-build DeepSpeed's ops, building the venv in this CUDA devel image (same OS "
        "and Python as the base, e.g. nvidia/cuda:13.0.3-devel-ubuntu24.04)",
    )
    parser.add_argument("--cuda-arch-list", help="TORCH_CUDA_ARCH_LIST for --ds-build-ops")
    parser.add_argument(
        "--mpi4py-wheel", action="store_true", help="mpi4py's wheel instead of compiling it"
    )
    parser.add_argument("--extra-ca", type=Path, help="PEM file of a proxy's CA, for pip")
    ns = parser.parse_args(list(posargs))
    torch = ns.torch or DEFAULT_LOCK
    return ImageBuild(
        flavour=ns.flavour,
        tag=ns.tag or _default_tag(ns.flavour, torch),
        torch=torch,
        local=ns.local,
        no_cache=ns.no_cache,
        ds_build_ops=ns.ds_build_ops,
        cuda_arch_list=ns.cuda_arch_list,
        mpi4py_wheel=ns.mpi4py_wheel,
        extra_ca=ns.extra_ca,
    )


def _engine(session: nox.Session, *args: str) -> None:
    """containers/engine.sh: start dockerd (recording its PID), stop it, make the base image."""
    session.run("bash", str(CONTAINERS / "engine.sh"), *args, external=True)


def _engine_answers() -> bool:
    found = shutil.which("docker")
    if found is None:
        return False
    probe = subprocess.run([found, "info"], capture_output=True, timeout=60, check=False)
    return probe.returncode == 0


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _source_facts() -> dict[str, str]:
    """Revision, SOURCE_DATE_EPOCH (the last commit's date), creation date and version."""
    revision = _git("rev-parse", "HEAD")
    if revision and _git("status", "--porcelain", "--untracked-files=no"):
        revision += "-dirty"
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or _git("log", "-1", "--format=%ct") or "0"
    created = datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    # tomllib is 3.11+; nox may run on 3.10. The [project] version is the first one.
    found = re.search(r'^version = "([^"]+)"', Path("pyproject.toml").read_text(), re.MULTILINE)
    version = found.group(1) if found else ""
    return {
        "REVISION": revision,
        "SOURCE_DATE_EPOCH": epoch,
        "CREATED": created,
        "VERSION": version,
    }


def _stage_context(directory: Path, extra_ca: Path | None) -> None:
    for name in CONTEXT:
        source = Path(name)
        if source.is_dir():
            ignore = shutil.ignore_patterns(*CONTEXT_IGNORE)
            shutil.copytree(source, directory / name, ignore=ignore)
        else:
            shutil.copy2(source, directory / name)
    if extra_ca is not None:
        shutil.copy2(extra_ca, directory / CONTAINERS / "build-inputs" / "extra-ca.pem")


@contextlib.contextmanager
def _wheelhouse(session: nox.Session, lock_file: Path, mpi4py_wheel: bool) -> Iterator[str]:
    """The locked files in WHEELHOUSE (this machine's pip, its caches and indexes fetch them),
    served on 127.0.0.1 for the build's pip; the server stops when the block ends."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    session.run(
        "python", "-m", "pip", "download", "-qq", "--progress-bar", "off",
        "--no-deps", "--require-hashes", "--no-binary", ":none:" if mpi4py_wheel else "mpi4py",
        "-r", str(lock_file), "--dest", str(WHEELHOUSE),
    )  # fmt: skip
    # The URL is a build argument, part of the cache key of the step that installs the lock:
    # the same port every time keeps that step cached. Any free port when it is taken.
    for port in (WHEEL_SERVER_PORT, 0):
        server = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            cwd=WHEELHOUSE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        banner = server.stdout.readline() if server.stdout else ""
        match = re.search(r"port (\d+)", banner)
        if match is not None:
            break
        server.wait(timeout=30)
    else:
        session.error(f"the wheel server did not start: {banner!r}")
    try:
        url = f"http://127.0.0.1:{match.group(1)}/"
        session.log(f"serving {WHEELHOUSE} at {url} (PID {server.pid})")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def _build_stage_tag(tag: str) -> str:
    return f"{tag}-build"


def _image_size(tag: str) -> int:
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def _build_image(session: nox.Session, build: ImageBuild) -> tuple[float, int]:
    """`docker build` containers/Dockerfile for ``build``; the time taken and the size."""
    lock_file = CONTAINERS / "lock" / f"{build.torch}.txt"
    if not lock_file.is_file():
        session.error(
            f"{lock_file} does not exist: make it with `nox -s lock -- {build.torch}` where "
            f"{LOCKS[build.torch].index or 'PyPI'} is reachable, or build with --torch pypi"
        )
    if build.local:
        _engine(session, "start")
        _engine(session, "base", LOCAL_BASE)
    args = _source_facts() | {"FLAVOUR": build.flavour, "TORCH_SOURCE": build.torch}
    gpu_base = LOCKS[build.torch].gpu_base
    if build.local:
        args |= {"GPU_BASE": LOCAL_BASE, "CPU_BASE": LOCAL_BASE}
    elif gpu_base is not None and build.flavour == "gpu":
        args["GPU_BASE"] = gpu_base
    if build.ds_build_ops:
        args |= {"DS_BUILD_OPS": "1", "BUILD_FROM": build.ds_build_ops}
    if build.cuda_arch_list:
        args["TORCH_CUDA_ARCH_LIST"] = build.cuda_arch_list
    if build.mpi4py_wheel:
        args["MPI4PY_BUILD"] = "wheel"
    with contextlib.ExitStack() as stack:
        context = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ddpimg-context-")))
        _stage_context(context, build.extra_ca)
        command = ["docker", "build", "--file", str(context / CONTAINERS / "Dockerfile")]
        if build.local:
            # The build's pip reaches the wheel server on this machine's loopback.
            wheels = _wheelhouse(session, lock_file, build.mpi4py_wheel)
            args["WHEELS_URL"] = stack.enter_context(wheels)
            command += ["--network", "host"]
        for name, value in sorted(args.items()):
            command += ["--build-arg", f"{name}={value}"]
        started = time.monotonic()
        # The build stage gets a tag of its own (_build_stage_tag) so that the prune below
        # keeps it as the cache of the next build. The second run reuses what the first built
        # (even with --no-cache: its layers descend from the fresh ones, no older image).
        no_cache = ["--no-cache"] if build.no_cache else []
        for target in (
            [*no_cache, "--target", "build", "--tag", _build_stage_tag(build.tag)],
            ["--tag", build.tag],
        ):
            session.run(*command, *target, str(context), external=True)
        elapsed = time.monotonic() - started
    # What the tags named before (older images, their build stages) is dangling now.
    session.run("docker", "image", "prune", "--force", external=True, silent=True)
    size = _image_size(build.tag)
    session.log(f"built {build.tag} in {elapsed:.0f} s: {size / 1e9:.2f} GB ({size} bytes)")
    return elapsed, size


def _unreachable(url: str) -> str | None:
    """Why ``url`` cannot be fetched (None when it can)."""
    try:
        with urllib.request.urlopen(url, timeout=20):
            return None
    except (urllib.error.URLError, OSError) as err:
        return f"{url}: {getattr(err, 'reason', err)}"


@nox.session(default=False)
def lock(session: nox.Session) -> None:
    """Make containers/lock/NAME.txt, hashed, from containers/requirements.in: -- [NAME...]."""
    names = session.posargs or list(LOCKS)
    unknown = sorted(set(names) - set(LOCKS))
    if unknown:
        session.error(f"unknown lock {', '.join(unknown)}: choose from {', '.join(LOCKS)}")
    session.install(UV)
    skipped = []
    for name in names:
        index, overrides = LOCKS[name].index, LOCKS[name].overrides
        command = [
            "uv", "pip", "compile", "--quiet", str(LOCK_INPUT), "--universal",
            "--python-version", LOCK_PYTHON, "--generate-hashes", "--native-tls",
            "--custom-compile-command", f"nox -s lock -- {name}",
            "--output-file", str(CONTAINERS / "lock" / f"{name}.txt"),
        ]  # fmt: skip
        if overrides is not None:
            command += ["--override", str(overrides)]
        if index is not None:
            reason = _unreachable(f"{index}/torch/")
            if reason is not None:
                if session.posargs:
                    session.error(f"lock {name}: its index cannot be reached: {reason}")
                skipped.append(f"{name} ({reason})")
                continue
            command += ["--extra-index-url", index]  # uv: searched before --index-url
        session.run(*command)
    if skipped:
        session.warn(f"not made (index unreachable from here): {'; '.join(skipped)}")


@nox.session(default=False)
def image(session: nox.Session) -> None:
    """Build the image: -- cpu|gpu [--local] [--torch LOCK] [--tag T] [--no-cache] (see -- -h)."""
    _build_image(session, _image_options(session.posargs))


def _image_tests(
    session: nox.Session,
    builds: Sequence[ImageBuild],
    tests: str,
    env: dict[str, str],
    drop_build_stages: Sequence[ImageBuild] = (),
) -> None:
    """Build ``builds`` on this machine (no registry), then run pytest on ``tests`` with
    ``env`` naming the images; then remove the build stages of ``drop_build_stages`` and stop
    the dockerd this started, if it did."""
    # ddpimg without the training stack: the tests only read what the images wrote.
    session.install("-e", ".", "-r", DEV_REQUIREMENTS, SPYTHON)
    if os.geteuid() == 0:
        session.run("bash", "tests/engines/install.sh", external=True)
    ours = not _engine_answers()
    try:
        for build in builds:
            _build_image(session, build)
        session.run("pytest", tests, "-p", "no:cacheprovider", *session.posargs, env=env)
    finally:
        stages = [_build_stage_tag(build.tag) for build in drop_build_stages]
        if stages and _engine_answers():
            session.run("docker", "image", "rm", "--force", *stages, external=True, silent=True)
        if ours:
            _engine(session, "stop")


@nox.session(default=False)
def smoke(session: nox.Session) -> None:
    """Build the CPU image on this machine (no registry) and run the Docker smoke tests."""
    _image_tests(session, [SMOKE_BUILD], "tests/containers", {"DDPIMG_TEST_IMAGE": SMOKE_IMAGE})


@nox.session(default=False)
def flavours(session: nox.Session) -> None:
    """Build the CUDA 12.8 image here; check each image's torch against ddpimg.hardware.builds."""
    builds = [SMOKE_BUILD, CUDA12_BUILD]  # the first: cached when `nox -s smoke` ran before
    images = " ".join(build.tag for build in builds)
    # The CUDA 12.8 image's build stage (a second copy of its venv) would only cache the next
    # build, which CI never makes: ~6 GB freed. The image stays, for `docker run` and a SIF.
    _image_tests(
        session, builds, "tests/containers/test_flavours.py",
        {"DDPIMG_FLAVOUR_IMAGES": images}, drop_build_stages=[CUDA12_BUILD],
    )  # fmt: skip


@nox.session(name="image-repro", default=False)
def image_repro(session: nox.Session) -> None:
    """Build the CPU image twice (the second with --no-cache) and compare `pip freeze` inside."""
    first, second = SMOKE_IMAGE, f"{SMOKE_IMAGE}-repro"
    _build_image(session, SMOKE_BUILD)
    _build_image(session, dataclasses.replace(SMOKE_BUILD, tag=second, no_cache=True))
    freezes = []
    for tag in (first, second):
        freeze = session.run(
            "docker", "run", "--rm", tag, "python3", "-m", "pip", "freeze", "--all",
            external=True, silent=True,
        )  # fmt: skip
        freezes.append(str(freeze).splitlines())
    session.run(
        "docker", "image", "rm", second, _build_stage_tag(second), external=True, silent=True
    )  # fmt: skip
    session.run("docker", "image", "prune", "--force", external=True, silent=True)
    if freezes[0] != freezes[1]:
        diff = difflib.unified_diff(freezes[0], freezes[1], first, second, lineterm="")
        session.error("the installed package sets differ:\n" + "\n".join(diff))
    session.log(f"same {len(freezes[0])} packages in both builds:\n" + "\n".join(freezes[0]))


@nox.session(default=False, venv_backend="none")
def sif(session: nox.Session) -> None:
    """Build a SIF with Apptainer: -- [gpu|cpu|standalone] [--torch LOCK] (see -- -h)."""
    apptainer = shutil.which("apptainer") or shutil.which("singularity")
    if apptainer is None:
        session.skip(
            "apptainer is not installed (Debian 12 and PyPI do not package it): build the SIF "
            "where Apptainer exists, see docs/containers.md"
        )
    parser = argparse.ArgumentParser(prog="nox -s sif --", allow_abbrev=False)
    parser.add_argument("kind", nargs="?", default="gpu", choices=["gpu", "cpu", "standalone"])
    parser.add_argument("--torch", choices=sorted(LOCKS), help=f"lock (default: {DEFAULT_LOCK})")
    ns = parser.parse_args(session.posargs)
    lock = LOCKS[ns.torch or DEFAULT_LOCK]
    build_args: list[str] = []
    if ns.kind == "standalone":
        facts = _source_facts()
        recipe = CONTAINERS / "ddp-standalone.def"
        output = f"ddp-standalone{lock.tag_suffix}.sif"
        build_args = [
            f"REVISION={facts['REVISION']}",
            f"SOURCE_DATE_EPOCH={facts['SOURCE_DATE_EPOCH']}",
        ]
        if ns.torch:  # the .def's defaults are DEFAULT_LOCK's
            build_args.append(f"TORCH_SOURCE={ns.torch}")
        if lock.gpu_base is not None:
            build_args.append(f"GPU_BASE={lock.gpu_base}")
    else:
        # ddp.def from the image `nox -s image -- KIND --torch LOCK` tagged.
        recipe = CONTAINERS / "ddp.def"
        tag = _default_tag(ns.kind, ns.torch or DEFAULT_LOCK)
        name = tag.removeprefix("ddpimg:").removeprefix("gpu")  # "", "-cu128", "cpu"
        output = f"ddp{name if not name or name.startswith('-') else '-' + name}.sif"
        build_args = [f"IMAGE={tag}"]
    with tempfile.TemporaryDirectory() as tmp:
        if ns.kind == "cpu":  # the same recipe; only its title names the flavour
            text = recipe.read_text(encoding="utf-8").replace("ddpimg (gpu)", "ddpimg (cpu)")
            recipe = Path(tmp) / "ddp.def"
            recipe.write_text(text, encoding="utf-8")
        options = [word for arg in build_args for word in ("--build-arg", arg)]
        session.run(apptainer, "build", "--force", *options, output, str(recipe), external=True)
    session.run(apptainer, "test", output, external=True)


def _gpu_missing() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi is not on PATH"
    probe = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0 or "GPU" not in probe.stdout:
        return f"`nvidia-smi -L` lists no GPU: {(probe.stderr or probe.stdout).strip()[-200:]}"
    return None


@nox.session(name="gpu-check", default=False)
def gpu_check(session: nox.Session) -> None:
    """GPU checks of the GPU flavour (GPU seen, NCCL all-reduce, bf16 step); skips without one."""
    reason = _gpu_missing()
    if reason is not None:
        session.skip(f"no GPU: {reason}")
    script = "/opt/ddpimg/scripts/gpu_check.py"
    target = session.posargs[0] if session.posargs else "ddpimg:gpu"
    if target.endswith(".sif"):
        apptainer = shutil.which("apptainer") or shutil.which("singularity") or "apptainer"
        session.run(apptainer, "exec", "--nv", target, "python3", script, external=True)
    elif target == "host":
        _install(session)
        session.run("python", str(CONTAINERS / "scripts" / "gpu_check.py"))
    else:
        session.run(
            "docker", "run", "--rm", "--gpus", "all", "--ipc", "host", target, "python3", script,
            external=True,
        )  # fmt: skip
