"""``ddpimg addon build``: requirements (or a lock) -> NAME.addon.sqsh and NAME.lock, with
the image's own Python, in steps that each say what they do:

1. the package set: what the image has (``ddpimg.addon.packageset``);
2. resolve (``-r``): the requirements checked against it, then resolved by pip under the
   image's packages as constraints; the lock written from what pip chose and the files'
   sha256. With ``--lock``: the lock read, its package set compared with the image's;
3. download: exactly the locked files, hash-checked;
4. build: source distributions into wheels with the image's own tools and torch;
5. install: the wheels into the add-on's own site-packages, nothing into the image;
6. compile and check: hash-checked bytecode, nothing the image would hide;
7. pack: a reproducible squashfs; then its size, packages and sha256.

Nothing is written where ``-o`` points before the add-on is complete: the squashfs is
renamed into place, then the lock beside it.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddpimg.addon import lockfile, pipcalls, sources, squashfs, tree
from ddpimg.addon.errors import AddonError
from ddpimg.addon.lockfile import Lock, Locked
from ddpimg.addon.metadata import AddonInfo, write_info
from ddpimg.addon.packageset import PackageSet, current
from ddpimg.addon.requirements import FromImage, check_against_image, read_requirements
from ddpimg.addon.sitepath import SITE_DIR, SUFFIX, site_dirs, valid_name
from ddpimg.errors import printable
from ddpimg.fsio import write_text_atomic
from ddpimg.remote.tree import describe_size


@dataclass(frozen=True)
class BuildRequest:
    requirements: Path | None
    lock: Path | None
    name: str | None
    output: Path | None
    find_links: tuple[str, ...] = ()
    no_index: bool = False


@dataclass(frozen=True)
class Built:
    """What was made: the add-on, its lock, and what it holds."""

    path: Path
    lock_path: Path
    info: AddonInfo
    sha256: str
    size: int
    unpacked_files: int
    unpacked_bytes: int
    from_image: tuple[FromImage, ...]
    image: PackageSet
    seconds: float

    def summary(self) -> list[str]:
        lines = [
            f"add-on    {self.path}   (mounted as /opt/ddpimg/addons/{self.info.name})",
            f"lock      {self.lock_path}",
            f"size      {describe_size(self.size)} ({describe_size(self.unpacked_bytes)} in "
            f"{self.unpacked_files:,} files unpacked)",
            f"packages  {self.info.package_words()}",
        ]
        if self.from_image:
            used = ", ".join(f"{item.requirement.name} {item.version}" for item in self.from_image)
            lines.append(f"image's   {used} (required, taken from the image)")
        lines += [
            f"for       package set {self.image.describe()}",
            f"sha256    {self.sha256}",
            f"took      {self.seconds:.1f} s",
        ]
        return lines


def addon_name(request: BuildRequest) -> str:
    """The add-on's name: --name, else -o's file name without .addon.sqsh, else the lock's,
    else the requirements file's stem."""
    if request.name:
        name = request.name
    elif request.output is not None:
        name = request.output.name.removesuffix(SUFFIX).removesuffix(".sqsh")
    elif request.requirements is not None:
        name = request.requirements.name.split(".", 1)[0]
    else:
        name = ""  # the lock's, read later
    if name and not valid_name(name):
        raise AddonError(
            f"add-on name {printable(name)!r}: use letters, digits, '.', '_' and '-', starting "
            "with a letter or digit (it becomes /opt/ddpimg/addons/NAME)",
            hint="name it with --name NAME, or -o NAME.addon.sqsh",
        )
    return name


class Steps:
    """Progress lines on stderr: ``ddpimg: addon NAME: [12.3 s] resolving ...``."""

    def __init__(self, name: str, say: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.start = time.monotonic()
        self._say = say or (lambda text: print(text, file=sys.stderr, flush=True))

    def __call__(self, text: str) -> None:
        elapsed = time.monotonic() - self.start
        self._say(f"ddpimg: addon {self.name}: [{elapsed:5.1f} s] {text}")


def build(request: BuildRequest, say: Callable[[str], None] | None = None) -> Built:
    """Build the add-on ``request`` asks for (the module's docstring)."""
    name = addon_name(request)
    lock_given = lockfile.read_lock(request.lock) if request.lock is not None else None
    if lock_given is not None:
        name = name or lock_given.name
    step = Steps(name, say)
    image = current()
    step(f"package set {image.describe()}")
    output = (request.output or Path(f"{name}{SUFFIX}")).absolute()
    lock_path = request.lock or output.with_name(f"{name}{lockfile.SUFFIX}")
    with tempfile.TemporaryDirectory(prefix="ddpimg-addon-") as scratch:
        run = _Run(name, image, pipcalls.Pip.for_build(request.find_links, request.no_index),
                   Path(scratch), step)  # fmt: skip
        if lock_given is not None:
            lock = run.from_lock(lock_given)
        elif request.requirements is not None:
            lock = run.resolve(request.requirements)
        else:
            raise AddonError("nothing to build from", hint="give -r REQUIREMENTS or --lock LOCK")
        info, files, size = run.make_tree(lock)
        output.parent.mkdir(parents=True, exist_ok=True)
        squashfs.pack(run.root, output)
    if lock_given is None:
        write_text_atomic(lock_path, lock.text())
    digest = sources.sha256_of(output)
    step("done")
    return Built(
        path=output,
        lock_path=lock_path,
        info=info,
        sha256=digest,
        size=output.stat().st_size,
        unpacked_files=files,
        unpacked_bytes=size,
        from_image=tuple(run.from_image),
        image=image,
        seconds=time.monotonic() - step.start,
    )


class _Run:
    """One build's steps, sharing the image, pip and the scratch directory."""

    def __init__(
        self, name: str, image: PackageSet, pip: pipcalls.Pip, work: Path, step: Steps
    ) -> None:
        self.name = name
        self.image = image
        self.pip = pip
        self.work = work
        self.step = step
        self.downloads = work / "downloads"
        self.downloads.mkdir()
        self.root = work / "tree"
        self.from_image: list[FromImage] = []

    def resolve(self, requirements: Path) -> Lock:
        """The lock of ``requirements`` against the image, its files downloaded."""
        given = read_requirements(requirements)
        self.from_image = check_against_image(given, self.image)
        self.step(
            f"resolving {len(given)} requirement{'s' * (len(given) != 1)} against the image's "
            f"{len(self.image.packages)} packages (pip, the image's versions as constraints)"
        )
        clean = self.work / "requirements.txt"
        clean.write_text("".join(f"{item.text}\n" for item in given), encoding="utf-8")
        resolved = pipcalls.resolve(self.pip, clean, given, self.image, self.work)
        if not resolved:
            taken = ", ".join(f"{item.requirement.name} {item.version}" for item in self.from_image)
            raise AddonError(
                f"nothing to add: the image satisfies every requirement of "
                f"{printable(str(requirements))}" + (f" ({taken})" if taken else ""),
                hint="use the image as it is; an add-on holds only packages the image lacks",
            )
        added = ", ".join(f"{item.name} {item.version}" for item in resolved)
        self.step(f"resolved: adds {added}; downloading")
        pins = self.work / "download.txt"
        pins.write_text("".join(f"{r.name}=={r.version}\n" for r in resolved), encoding="utf-8")
        pipcalls.download(self.pip, pins, self.downloads, hashed=False)
        announced = {item.name: item.sha256 for item in resolved if item.sha256}
        files = sources.match_files(
            self.downloads, {item.name: item.version for item in resolved}, announced
        )
        return lockfile.new_lock(self.name, self.image, [item.text for item in given], files)

    def from_lock(self, lock: Lock) -> Lock:
        """``lock``, checked against the image, its files downloaded and hash-checked."""
        if lock.package_set != self.image.identity:
            raise AddonError(
                f"the lock of add-on {lock.name} was made for package set "
                f"{lock.package_set[:12]} ({lock.interpreter}; {lock.image or 'no image named'}), "
                f"and this image's is {self.image.describe()}",
                hint="an add-on is built for the packages of one image: build it again from "
                "its requirements in this image (ddpimg addon build -r ...), or run in the "
                "image the lock names",
            )
        self.step(f"lock of {len(lock.packages)} packages, made for this package set: downloading")
        pins = self.work / "locked.txt"
        pins.write_text(lock.hashed_requirements(), encoding="utf-8")
        pipcalls.download(self.pip, pins, self.downloads, hashed=True)
        files = sources.match_files(
            self.downloads,
            {item.name: item.version for item in lock.packages},
            {item.name: item.sha256 for item in lock.packages},
        )
        return dataclasses.replace(lock, name=self.name, packages=tuple(files))

    def make_tree(self, lock: Lock) -> tuple[AddonInfo, int, int]:
        """The add-on's tree from ``lock``'s files: (its description, files, bytes)."""
        wheels = self.wheels(lock)
        site = self.root / SITE_DIR
        site.mkdir(parents=True)
        count = len(lock.packages)
        self.step(
            f"installing {count} package{'s' * (count != 1)} into the add-on's own site-packages"
        )
        pins = self.work / "pins.txt"
        pins.write_text("".join(f"{item.pin}\n" for item in lock.packages), encoding="utf-8")
        pipcalls.install(self.pip, wheels, pins, site)
        tree.move_scripts(self.root)
        tree.check_shadows(site, site_dirs())
        self.step("byte-compiling (hash-checked .pyc)")
        compiled = tree.compile_tree(site, self.name)
        lock_text = lock.text()
        info = AddonInfo.from_lock(lock, sources.sha256_text(lock_text))
        write_info(self.root, info, lock_text)
        files, size = tree.normalise(self.root)
        self.step(f"packing {files:,} files ({describe_size(size)}, {compiled:,} .pyc) as squashfs")
        return info, files, size

    def wheels(self, lock: Lock) -> Path:
        """A directory of one wheel per locked package: downloaded ones as they are, source
        distributions built here."""
        wheels = self.work / "wheels"
        wheels.mkdir()
        to_build: list[Locked] = []
        for item in lock.packages:
            if item.is_wheel:
                shutil.copy2(self.downloads / item.filename, wheels / item.filename)
            else:
                to_build.append(item)
        if not to_build:
            return wheels
        toolchain = sources.Toolchain.find()
        projects: list[tuple[Locked, Path]] = []
        for item in to_build:
            archive = self.downloads / item.filename
            project = sources.unpack_sdist(archive, self.work / "build" / item.name)
            sources.check_buildable(item, project, self.image, toolchain)
            projects.append((item, project))
        for item, project in projects:
            self.step(f"building {item.name} {item.version} from its source distribution")
            try:
                pipcalls.build_wheel(self.pip, project, wheels, sources.build_environment(project))
            except pipcalls.BuildFailed as err:
                compiler = "" if toolchain.compiler else " (this image has no C/C++ compiler)"
                raise AddonError(
                    f"building {item.name} {item.version} from {item.filename} failed"
                    f"{compiler}:\n{pipcalls.tail(str(err))}",
                    hint="fix what the build says above, or give a wheel of it with "
                    "--find-links DIR",
                ) from None
        return wheels
