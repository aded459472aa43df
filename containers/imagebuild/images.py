"""One `docker build` of containers/Dockerfile: its options (`nox -s image -- -h`), build
arguments and commands; the builds that CI's tests and the benchmarks make."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from platform import machine as host_machine
from typing import Any

from .aptlocks import DEBIAN_ARCH, apt_lock_of, missing_apt_lock
from .context import source_facts, stage_context
from .engine import engine, engine_answers, install_engine_packages
from .locks import (
    CONTAINERS,
    LOCAL_BASE,
    LOCAL_BASE_PYTHON,
    LOCKS,
    Platform,
    default_lock,
    default_tag,
    local_base,
    lock_file,
    missing_lock,
)
from .reproduce import compare_images, normalise
from .session import Session
from .wheels import WHEELHOUSE, wheelhouse

SMOKE_IMAGE = "ddpimg:cpu"


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
    apt_unlocked: bool = False  # the mirror's Debian packages of the day, not the base's lock
    drop_caches: bool = False  # remove the build stage and the layered image once used


# CI's image: the CPU flavour on the local base, from its own lock (torch's CPU build),
# mpi4py's wheel (compiling it would take a quarter of CI's time for the smoke part).
SMOKE_BUILD = ImageBuild("cpu", SMOKE_IMAGE, "cpu", local=True, mpi4py_wheel=True)
# The CUDA 13 GPU image (the default lock) as `nox -s flavours` builds it: CI's way, on the
# local base.
CUDA13_BUILD = ImageBuild("gpu", "ddpimg:gpu", "pypi", local=True, mpi4py_wheel=True)
# The CUDA 12.8 GPU image as `nox -s flavours` builds it: CI's way, on the local base.
CUDA12_BUILD = ImageBuild("gpu", "ddpimg:gpu-cu128", "pypi-cu128", local=True, mpi4py_wheel=True)
# The arm64 GPU image (GH200) as `nox -s flavours` builds it on CI's x86-64 machine: on the
# local arm64 base, its wheels installed by this machine's CPU, the rest under emulation.
ARM64_BUILD = ImageBuild("gpu", "ddpimg:gpu-arm64", "pypi-arm64", local=True, mpi4py_wheel=True)
# The images the bench part times: what `nox -s image -- FLAVOUR --local` makes.
BENCH_BUILDS = [
    ImageBuild(flavour, f"ddpimg:{flavour}", default_lock(flavour), local=True)
    for flavour in ("cpu", "gpu")
]


def image_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nox -s image --", allow_abbrev=False)
    parser.add_argument("flavour", choices=["cpu", "gpu"])
    parser.add_argument(
        "--tag", help="default: ddpimg:FLAVOUR, ddpimg:gpu-cu128 for pypi-cu128, -arm64 for ..."
    )
    parser.add_argument(
        "--torch",
        choices=sorted(LOCKS),
        help=f"lock (default: {default_lock('cpu')} for cpu, {default_lock('gpu')} for gpu)",
    )
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
    parser.add_argument(
        "--drop-caches",
        action="store_true",
        help="remove the build stage and the layered image once used (IMAGE-build, "
        "IMAGE-layers: the next build's cache) to free their disk",
    )
    parser.add_argument(
        "--apt-unlocked",
        action="store_true",
        help="install the Debian mirror's package versions of today instead of the base's "
        "lock (containers/lock/apt/): the image is then not reproducible",
    )
    return parser


def parse_image_options(posargs: Sequence[str]) -> ImageBuild:
    """The build `nox -s image -- POSARGS` makes."""
    ns = image_parser().parse_args(list(posargs))
    torch = ns.torch or default_lock(ns.flavour)
    return ImageBuild(
        flavour=ns.flavour,
        tag=ns.tag or default_tag(ns.flavour, torch),
        torch=torch,
        local=ns.local,
        no_cache=ns.no_cache,
        ds_build_ops=ns.ds_build_ops,
        cuda_arch_list=ns.cuda_arch_list,
        mpi4py_wheel=ns.mpi4py_wheel,
        extra_ca=ns.extra_ca,
        apt_unlocked=ns.apt_unlocked,
        drop_caches=ns.drop_caches,
    )


def foreign_platform(build: ImageBuild, machine: str) -> Platform | None:
    """The platform of ``build``'s lock when a machine whose CPU is ``machine``
    (platform.machine()) cannot run its programs itself; None when it can."""
    platform = LOCKS[build.torch].platform
    return platform if platform is not None and platform.machine != machine else None


def build_args(
    build: ImageBuild,
    facts: Mapping[str, str],
    wheels_url: str | None = None,
    machine: str = host_machine(),
) -> dict[str, str]:
    """The Dockerfile's build arguments for ``build`` on a ``machine`` CPU: ``facts``
    (context.source_facts), the flavour and lock, the bases, the options, and where the
    locked files are served.

    A local build for another CPU builds the venv on this machine's local base (the same
    Debian release, hence the same Python) with that platform's wheels (CROSS_PLATFORM, and
    mpi4py's wheel: nothing can be compiled for the other CPU there). APT_LOCK names the
    base's Debian lock (aptlocks.py), unless ``build.apt_unlocked``; a build stage on a CUDA
    devel image (--ds-build-ops) has none of its own (BUILD_APT_LOCK empty)."""
    args = dict(facts) | {"FLAVOUR": build.flavour, "TORCH_SOURCE": build.torch}
    lock = LOCKS[build.torch]
    if not build.apt_unlocked:
        args["APT_LOCK"] = apt_lock_of(build.flavour, build.local, lock.gpu_base)
    foreign = foreign_platform(build, machine)
    if build.local:
        base = local_base(lock.platform)
        args |= {"GPU_BASE": base, "CPU_BASE": base}
        if foreign is not None:
            args |= {"BUILD_FROM": LOCAL_BASE, "CROSS_PLATFORM": foreign.python}
            args["MPI4PY_BUILD"] = "wheel"
    elif lock.gpu_base is not None and build.flavour == "gpu":
        args["GPU_BASE"] = lock.gpu_base
    if build.ds_build_ops:
        args |= {"DS_BUILD_OPS": "1", "BUILD_FROM": build.ds_build_ops, "BUILD_APT_LOCK": ""}
    if build.cuda_arch_list:
        args["TORCH_CUDA_ARCH_LIST"] = build.cuda_arch_list
    if build.mpi4py_wheel:
        args["MPI4PY_BUILD"] = "wheel"
    if wheels_url is not None:
        args["WHEELS_URL"] = wheels_url
    return args


# What each tag was last built from here (build_inputs) and the image it gave: a session that
# builds an image another session of the same run already built (`nox -s smoke flavours`:
# ddpimg:cpu) takes that image as it is, without its wheelhouse or docker's cache checks.
BUILT_RECORD = WHEELHOUSE.parent / "built-images.json"


def build_inputs(context: Path, args: Mapping[str, str], base_ids: Sequence[str]) -> str:
    """A digest of everything a local build is made from: the staged context's files (the
    Dockerfile and the locks among them), the build arguments but the wheel server's URL
    (another port serves the same files), and the IDs of the base images."""
    digest = hashlib.sha256()
    for path in sorted(path for path in context.rglob("*") if path.is_file()):
        digest.update(f"{path.relative_to(context)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    for name, value in sorted(args.items()):
        if name != "WHEELS_URL":
            digest.update(f"{name}={value}\0".encode())
    for base in base_ids:
        digest.update(f"{base}\0".encode())
    return digest.hexdigest()


def image_id(tag: str) -> str | None:
    probe = ["docker", "image", "inspect", "--format", "{{.Id}}", tag]
    found = subprocess.run(probe, capture_output=True, text=True, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def built_from(tag: str, inputs: str, record: Path = BUILT_RECORD) -> str | None:
    """The ID of the image ``tag`` names if it was built here from ``inputs``; else None."""
    try:
        entry = json.loads(record.read_text()).get(tag, {})
    except (OSError, ValueError):
        return None
    current = image_id(tag)
    return current if current and entry == {"inputs": inputs, "id": current} else None


def record_build(tag: str, inputs: str, record: Path = BUILT_RECORD) -> None:
    try:
        entries = json.loads(record.read_text())
    except (OSError, ValueError):
        entries = {}
    entries[tag] = {"inputs": inputs, "id": image_id(tag)}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(entries, indent=1, sort_keys=True))


def build_stage_tag(tag: str) -> str:
    """The tag of an image's build stage: kept, it caches the next build's venv."""
    return f"{tag}-build"


def layered_tag(tag: str) -> str:
    """The tag of the image as `docker build` layered it, before it is made reproducible
    (reproduce.normalise): kept, it caches the next build's final stage."""
    return f"{tag}-layers"


def docker_commands(
    build: ImageBuild, context: Path, args: Mapping[str, str], machine: str = host_machine()
) -> list[list[str]]:
    """The two `docker build` commands of ``build`` from the staged ``context`` on a
    ``machine`` CPU: the build stage, tagged (build_stage_tag) to be the next build's cache,
    then the image as the builder layers it (layered_tag), which reproduce.normalise then
    rewrites. The second reuses what the first built (even with --no-cache: its layers
    descend from the fresh ones, no older image).

    A build for another CPU names its platform, so that docker pulls the bases' images for
    it and emulates every step; except a local one, whose base images are made for their
    CPUs here (the classic builder then refuses to copy between stages of two platforms)."""
    command = ["docker", "build", "--file", str(context / CONTAINERS / "Dockerfile")]
    foreign = foreign_platform(build, machine)
    if foreign is not None and not build.local:
        command += ["--platform", foreign.docker]
    if build.local:
        command += ["--network", "host"]  # the build's pip reaches the wheel server
    for name, value in sorted(args.items()):
        command += ["--build-arg", f"{name}={value}"]
    no_cache = ["--no-cache"] if build.no_cache else []
    return [
        [
            *command,
            *no_cache,
            "--target",
            "build",
            "--tag",
            build_stage_tag(build.tag),
            str(context),
        ],
        [*command, "--tag", layered_tag(build.tag), str(context)],
    ]


def image_size(tag: str) -> int:
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def image_ids(tags: Sequence[str]) -> dict[str, str | None]:
    """The ID each of ``tags`` names now (None: none)."""
    return {tag: image_id(tag) for tag in tags}


def drop_replaced(session: Session, before: Mapping[str, str | None]) -> None:
    """Remove the images ``before`` (tag -> ID) named that a rebuild has replaced under their
    tags: an older image and its untagged parents, by ID. Never `docker image prune`: on a
    machine others build on too, a dangling image may be theirs. An image still in use (a
    container, another tag) stays."""
    for tag, old in before.items():
        if old is not None and image_id(tag) != old:
            session.run("sh", "-c", f"docker image rm {old} >/dev/null 2>&1 || true",
                        external=True, silent=True)  # fmt: skip


def build_image(
    session: Session,
    build: ImageBuild,
    facts: Mapping[str, str] | None = None,
    sources: Path = Path(),
) -> tuple[float, int]:
    """`docker build` containers/Dockerfile for ``build``, then make the image reproducible
    (reproduce.normalise, at the last commit's date); the time taken and the size. ``facts``:
    context.source_facts() (read now when not given); ``sources``: the tree whose files make
    the build context (the checkout by default). With ``build.drop_caches`` the build
    stage and the layered image go as soon as they are used (a machine that never builds
    again, like CI's, needs the disk)."""
    facts = dict(facts or source_facts())
    reason = missing_lock(build.torch)
    if reason is not None:
        session.error(reason)
    platform = LOCKS[build.torch].platform
    machine = host_machine()
    foreign = foreign_platform(build, machine)
    # A local build for another CPU: its venv is built by this machine's (build_args).
    cross = foreign if build.local else None
    if cross is not None and build.ds_build_ops:
        session.error(
            f"--ds-build-ops: DeepSpeed's ops cannot be compiled for {cross.machine} on this "
            f"{machine} machine; build the {build.torch} image on a {cross.machine} one"
        )
    if not build.apt_unlocked:
        apt_lock = apt_lock_of(build.flavour, build.local, LOCKS[build.torch].gpu_base)
        arches = {platform.arch if platform else DEBIAN_ARCH.get(machine, machine)}
        if cross is not None:
            arches.add(DEBIAN_ARCH.get(machine, machine))  # the build stage runs here
        for arch in sorted(arches):
            apt_reason = missing_apt_lock(apt_lock, arch)
            if apt_reason is not None:
                session.error(apt_reason)
    if cross is not None and not build.mpi4py_wheel:
        session.log(f"a {cross.machine} build here takes mpi4py's wheel (MPI4PY_BUILD=wheel)")
        build = dataclasses.replace(build, mpi4py_wheel=True)
    if foreign is not None:
        # Its steps run under qemu-user, registered with the kernel (engine.sh emulator).
        engine(session, "emulator", foreign.arch)
    bases = []
    if build.local:
        engine(session, "start")
        if cross is not None:
            engine(session, "base", LOCAL_BASE)  # where the venv is built
            bases.append(LOCAL_BASE)
        engine(session, "base", local_base(platform), *([platform.arch] if platform else []))
        bases.append(local_base(platform))
    before = image_ids([build.tag, build_stage_tag(build.tag), layered_tag(build.tag)])
    with contextlib.ExitStack() as stack:
        context = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ddpimg-context-")))
        stage_context(context, build.extra_ca, root=sources)
        # Only a local build knows all its inputs (a registry's base may have moved on).
        inputs = None
        if build.local and not build.no_cache:
            base_ids = [image_id(base) or base for base in bases]
            args = build_args(build, facts, None, machine)
            inputs = build_inputs(context, args, base_ids)
            ready = built_from(build.tag, inputs)
            if ready is not None:
                size = image_size(build.tag)
                session.log(f"{build.tag} is already built from these inputs ({ready}): kept")
                return 0.0, size
        wheels_url = None
        if build.local:
            target = cross.pip_args(LOCAL_BASE_PYTHON) if cross is not None else []
            wheels = wheelhouse(session, lock_file(build.torch), build.mpi4py_wheel, target)
            wheels_url = stack.enter_context(wheels)
        args = build_args(build, facts, wheels_url, machine)
        started = time.monotonic()
        for command in docker_commands(build, context, args, machine):
            session.run(*command, external=True)
        built = time.monotonic()
    if build.drop_caches:
        remove_images(session, [build_stage_tag(build.tag)])
    digest = normalise(layered_tag(build.tag), build.tag, int(facts["SOURCE_DATE_EPOCH"]))
    if build.drop_caches:
        remove_images(session, [layered_tag(build.tag)])
    elapsed = time.monotonic() - started
    drop_replaced(session, before)
    if inputs is not None:
        record_build(build.tag, inputs)
    size = image_size(build.tag)
    session.log(
        f"built {build.tag} in {elapsed:.0f} s (docker build {built - started:.0f} s, one "
        f"reproducible layer {elapsed - (built - started):.0f} s): {size / 1e9:.2f} GB ({size} "
        f"bytes), digest {digest}"
    )
    return elapsed, size


def remove_images(session: Session, tags: Sequence[str]) -> None:
    """`docker image rm` the images of ``tags`` that exist."""
    present = [tag for tag in tags if image_exists(tag)]
    if present:
        session.run("docker", "image", "rm", *present, external=True, silent=True)


def image_exists(tag: str) -> bool:
    probe = ["docker", "image", "inspect", tag]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@contextlib.contextmanager
def images_built(
    session: Session, builds: Sequence[ImageBuild], drop_build_stages: Sequence[ImageBuild] = ()
) -> Iterator[None]:
    """Build ``builds`` here (the engines' packages first, when root), removing the build
    stage of each of ``drop_build_stages`` as soon as it is built (the next build needs the
    disk); stop the dockerd this started when the block ends."""
    install_engine_packages(session)
    ours = not engine_answers()
    stages = [
        tag(build.tag) for build in drop_build_stages for tag in (build_stage_tag, layered_tag)
    ]
    try:
        for build in builds:
            dropped = build in drop_build_stages
            build_image(session, dataclasses.replace(build, drop_caches=dropped))
            # (An image kept from an earlier session may still have its caches.)
            if build in drop_build_stages:
                remove_images(session, [build_stage_tag(build.tag), layered_tag(build.tag)])
        yield
    finally:
        left = [tag for tag in stages if engine_answers() and image_exists(tag)]
        if left:
            session.run("docker", "image", "rm", "--force", *left, external=True, silent=True)
        if ours:
            engine(session, "stop")


def bench_images(session: Session, record: Path, rebuild: bool) -> bool:
    """Build BENCH_BUILDS without cache (``rebuild``) and write their times and sizes to
    ``record`` for benchmarks/parts/image.py; True when this started dockerd (the caller
    stops it with engine(session, "stop") when done)."""
    if not engine_answers() and os.geteuid() != 0:
        record.write_text(json.dumps({"skipped": "no Docker engine, and starting one needs root"}))
        return False
    install_engine_packages(session)
    ours = not engine_answers()
    if ours:
        engine(session, "start")
    results: dict[str, Any] = {}
    for build in BENCH_BUILDS:
        if rebuild:
            elapsed, size = build_image(session, dataclasses.replace(build, no_cache=True))
            results[build.flavour] = {"tag": build.tag, "build_s": elapsed, "bytes": size}
        else:
            results[build.flavour] = {"tag": build.tag, "build_s": None}
    record.write_text(json.dumps(results))
    return ours


# How many differing files `nox -s image-repro` prints (all of them are counted).
REPRO_LINES = 200


def check_reproducible(session: Session, posargs: Sequence[str] = ()) -> None:
    """Build an image twice from this commit, the second time with --no-cache (as TAG-repro,
    removed when it matches), and compare the two digests; when they differ, list the files
    (and settings) that do and fail. ``posargs``: `nox -s image`'s options (default: CI's
    image, SMOKE_BUILD; e.g. `gpu --local --drop-caches` for a GPU one on a small disk)."""
    first = parse_image_options(posargs) if posargs else SMOKE_BUILD
    second = dataclasses.replace(first, tag=f"{first.tag}-repro", no_cache=True, drop_caches=True)
    # One commit's revision and date, and one copy of the sources, for both: a commit landing
    # or a file edited in the checkout while they run (minutes each) would make the second
    # build another tree's, a difference that is not the build's.
    facts = source_facts()
    with tempfile.TemporaryDirectory(prefix="ddpimg-sources-") as snapshot:
        stage_context(Path(snapshot))
        build_image(session, first, facts, Path(snapshot))
        build_image(session, second, facts, Path(snapshot))
    digests = [image_id(build.tag) for build in (first, second)]
    if digests[0] == digests[1]:
        session.run("docker", "image", "rm", second.tag, external=True, silent=True)
        session.log(f"{first.tag} and a --no-cache rebuild have one digest: {digests[0]}")
        return
    lines = compare_images(first.tag, second.tag)
    shown = "\n".join(lines[:REPRO_LINES])
    more = f"\n... and {len(lines) - REPRO_LINES} more" if len(lines) > REPRO_LINES else ""
    session.error(
        f"two builds of one commit differ: {first.tag} is {digests[0]}, {second.tag} (kept for "
        f"a look; `docker image rm {second.tag}` removes it) is {digests[1]}; "
        f"{len(lines)} differences:\n{shown}{more}"
    )
