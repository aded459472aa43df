"""Every developer and CI action on ddpimg is a session here; ``nox -l`` is the menu.

    nox                        lint and unit tests (the default sessions)
    nox -s integration         tests under real launchers: a private Slurm cluster, Open MPI,
                               torchrun, DeepSpeed (installs the Debian packages when root)
    nox -s all-tests           the test command: lint, unit, integration, multi-node and the
                               image's smoke tests, in two lanes side by side
    nox -s lint-and-tests      lint beside the unit tests
    nox -s demo                the main job: 2 local CPU workers, synthetic data, 1 epoch
    nox -s docs                the documentation site (docs/, mkdocs.yml) into site/
    nox -s bench               benchmarks: vs plain PyTorch loops, overheads, scale, the image
    nox -s gpu-runbook         the GPU runbook (on a GPU machine; -- --dry-run on the CPU)
    nox -s tests -- -k slurm   arguments after ``--`` go to pytest (or to ``train`` for demo)

What gets installed is written once, in ``requirements/train.txt`` (the training stack) and
``requirements/dev.txt`` (test and lint tools). Every session that needs them (lint, tests,
integration, multinode, demo, bench, gpu-check on the host) shares one virtual environment,
the tests session's ``.nox/tests`` (~5.7 GB, mostly torch's CUDA wheels), made once and
reused: even lint uses it, because mypy judges the trainers against torch's own types, and
without torch installed it reports different errors than in a developer's environment.

How images are built (locks, context, wheel server, docker build) is containers/imagebuild/;
the image sessions here only call it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nox

# nox does not put the noxfile's directory on sys.path: containers/imagebuild is beside it.
# It names images with ddpimg.imagenames (a leaf module), read from the source tree because
# nox's own Python has no ddpimg installed.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from containers.imagebuild import aptlocks, engine, images, locks, squashfs
from containers.imagebuild.context import source_facts
from containers.imagebuild.sif import build_sif, parse_sif_options
from tests.integration import schedule  # a leaf module: the standard library only

ROOT = Path(__file__).resolve().parent
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

DEV_REQUIREMENTS = "requirements/dev.txt"
TRAIN_REQUIREMENTS = "requirements/train.txt"
BENCH_REQUIREMENTS = "requirements/bench.txt"
# Every pytest run ends with its slowest 30 tests: CI's log is where the time goes (issue 26).
DURATIONS = "--durations=30"
DEMO_ARGS = ["--nproc-per-node", "2", "--data", "synthetic", "--epochs", "1", "--out", "runs/demo"]
# The one venv with the training stack: the tests session's own (other tooling runs
# .nox/tests/bin/...). The other sessions that need it run in it, without a venv of their own.
STACK_SESSION = "tests"
# Set for sessions run side by side (_side_by_side) to the shared venv their parent makes;
# they wait until READY_MARKER is in it (at most STACK_WAIT_S: a hang guard, the venv takes
# 4-10 minutes) and never run pip in it themselves.
STACK_READY = "DDPIMG_NOX_STACK_READY"
READY_MARKER = ".ddpimg-stack-ready"
STACK_WAIT_S = 3600
STACK_POLL_S = 2.0
# ddpimg's own editable build takes seconds: a hang guard.
BUILD_LOCK_WAIT_S = 600


def _stack_dir(session: nox.Session) -> Path:
    """The shared venv: STACK_SESSION's, beside this session's."""
    return session.env_dir.with_name(STACK_SESSION).resolve()


def _stack(session: nox.Session) -> Path:
    """Make the shared venv (_stack_dir) hold ddpimg (editable), the training stack, the dev
    tools and the benchmarks' extras; return its bin directory, which comes first on PATH for
    the session's commands. Run its programs by that path: nox looks a program up on its own
    PATH."""
    venv = _stack_dir(session)
    bin_dir = venv / "bin"
    if os.environ.get(STACK_READY) == str(venv):
        # A session run beside another (_side_by_side): its parent makes the venv, and a pip
        # run here would rewrite ddpimg's editable install under the other's feet.
        _wait_for_stack(session, venv)
    else:
        (venv / READY_MARKER).unlink(missing_ok=True)
        if not (bin_dir / "python").exists():
            # What nox itself runs for a session's venv.
            session.run_install(sys.executable, "-m", "virtualenv", str(venv), external=True)
        pip = [str(bin_dir / "python"), "-m", "pip", "install"]
        session.run_install(
            *pip, "-r", TRAIN_REQUIREMENTS, "-r", DEV_REQUIREMENTS, "-r", BENCH_REQUIREMENTS,
            external=True, silent=True,
        )  # fmt: skip
        with _building_from_the_tree(session):
            # ddpimg has no dependencies of its own (pyproject.toml).
            session.run_install(*pip, "--no-deps", "-e", ".", external=True, silent=True)
        (venv / READY_MARKER).write_text(f"made by nox (pid {os.getpid()})\n")
    session.env["VIRTUAL_ENV"] = str(venv)
    session.env["PATH"] = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    return bin_dir


@contextlib.contextmanager
def _building_from_the_tree(session: nox.Session) -> Iterator[None]:
    """Hold the lock under which pip builds ddpimg from this tree: setuptools writes
    src/ddpimg.egg-info while it does, and two builds at once (the lanes of all-tests, each
    making a venv) could read each other's half-written files. A hang guard bounds the wait."""
    path = ROOT / ".nox" / "building-ddpimg.lock"
    path.parent.mkdir(exist_ok=True)
    with path.open("w") as handle:
        started = time.monotonic()
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - started > BUILD_LOCK_WAIT_S:
                    session.error(f"{path} is still held after {BUILD_LOCK_WAIT_S} s")
                time.sleep(STACK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _wait_for_stack(session: nox.Session, venv: Path) -> None:
    """Wait until the parent session has made the shared venv (its READY_MARKER)."""
    marker = venv / READY_MARKER
    started = time.monotonic()
    if not marker.exists():
        session.log(f"{venv}: waiting for the parent session to make it")
    while not marker.exists():
        if time.monotonic() - started > STACK_WAIT_S:
            session.error(
                f"{venv} is still not ready after {STACK_WAIT_S} s (no {READY_MARKER}): the "
                "parent session that makes it failed or stopped; see its lines above"
            )
        time.sleep(STACK_POLL_S)
    session.log(f"{venv}: made ready by the parent session ({time.monotonic() - started:.0f} s)")


def _pytest(session: nox.Session, *args: str, engines: bool = False) -> None:
    """Run pytest with ``args`` then the session's positional arguments.

    Any non-zero exit fails the session, 5 ("no tests collected") included: a selection
    that matches nothing must not pass as green.
    """
    bin_dir = _stack(session)
    if engines:
        engine.install_engine_packages(session)
    # The tests' processes share the cores (two lanes, two xdist workers, ranks beside each
    # other); torch's OpenMP (GNU libgomp) spins while its threads wait for work, taking CPU
    # from whatever shares the core. Measured beside a neighbour (docs/development.md): the
    # unit tests 188 s -> 137 s. Ranks, Slurm jobs and srun steps inherit it; a caller's wins.
    session.env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    session.run(str(bin_dir / "pytest"), DURATIONS, *args, *session.posargs, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Check style, types and the docs: ruff check, ruff format --check, mypy (strict), and
    mkdocs build --strict (every link and anchor of docs/ resolves; no network needed)."""
    bin_dir = _stack(session)
    session.run(str(bin_dir / "ruff"), "check", ".", external=True)
    session.run(str(bin_dir / "ruff"), "format", "--check", ".", external=True)
    session.run(str(bin_dir / "mypy"), external=True)
    with tempfile.TemporaryDirectory(prefix="ddpimg-docs-") as site_dir:
        _build_docs(session, bin_dir, site_dir)


@nox.session(default=False, venv_backend="none")
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs.yml: docs/) into site/, strictly."""
    _build_docs(session, _stack(session), "site")


def _build_docs(session: nox.Session, bin_dir: Path, site_dir: str) -> None:
    mkdocs = str(bin_dir / "mkdocs")
    session.run(mkdocs, "build", "--strict", "--site-dir", site_dir, external=True)


# Its venv is the shared one, which _stack makes (nox itself would make it at the session's
# start, racing the parent of sessions run side by side).
@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Run the unit tests (no launcher or engine started, GPU tests deselected)."""
    engine_dirs = ("--ignore=tests/integration", "--ignore=tests/multinode")
    _pytest(session, "tests", *engine_dirs, "-n", "2", "-m", "not (gpu or docker or runbook)")


@nox.session(name="runbook-dry-run", default=False, venv_backend="none")
def runbook_dry_run(session: nox.Session) -> None:
    """The GPU runbook's whole plan on the CPU at toy sizes, and its tests (before a GPU
    session, and after a change to benchmarks/: about 5 minutes on 2 cores)."""
    _pytest(session, "tests/benchmarks/test_gpu_runbook.py", "-m", "runbook")


@nox.session(default=False, venv_backend="none")
def integration(session: nox.Session) -> None:
    """Run the integration tests under real launchers (Slurm, Open MPI, torchrun)."""
    # Two pytest-xdist workers, each test file on one (its module fixtures made once): a
    # test spends much of its time waiting on launchers, Slurm's polls and start-ups, so
    # two at a time finish sooner even on 2 cores. Each worker runs a Slurm cluster of its
    # own (tests/integration/conftest.py: job IDs, hence ports, apart).
    # The longest files first (tests/integration/schedule.py), not pytest-xdist's order.
    workers = ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
    _pytest(session, "tests/integration", *workers, "-p", "no:cacheprovider", engines=True)


@nox.session(name="integration-from-the-end", default=False, venv_backend="none")
def integration_from_the_end(session: nox.Session) -> None:
    """all-tests' second lane, after its own sessions: the integration test files that the
    first lane has not reached yet, from the other end of its order (each file is run by the
    lane that claims it first: tests/integration/schedule.py). Alone, all of them."""
    claims = os.environ.get(schedule.CLAIMS_VARIABLE)
    if claims and not schedule.unclaimed(Path(claims), _integration_files()):
        session.skip("the first lane has taken every integration test file")
    session.env[schedule.FROM_THE_END_VARIABLE] = "1"
    integration(session)


def _integration_files() -> list[str]:
    return sorted(path.name for path in (ROOT / "tests" / "integration").glob("test_*.py"))


@nox.session(default=False, venv_backend="none")
def multinode(session: nox.Session) -> None:
    """Run the multi-node tests on a Slurm cluster of network-namespace nodes (root)."""
    _pytest(session, "tests/multinode", "-p", "no:cacheprovider", engines=True)


# How long a child session is given to end after an interrupt, and again after a SIGINT from
# this one, before it is killed: its own clean-up (the namespace cluster, dockerd) needs seconds.
CHILD_STOP_S = 60


@nox.session(name="lint-and-tests", default=False, venv_backend="none")
def lint_and_tests(session: nox.Session) -> None:
    """Run the lint and tests sessions at the same time: lint is mostly mypy, one core; the
    unit tests fill the other."""
    _side_by_side(session, [["lint"], ["tests"]])


@nox.session(name="all-tests", default=False, venv_backend="none")
def all_tests(session: nox.Session) -> None:
    """The test command: every test session, in two lanes at the same time. One runs lint
    beside the unit tests, then the integration tests (CPU-bound: 96% of 2 cores); the other
    the image's smoke tests, then the multi-node tests, which alone leave about half of the
    CPU idle (the image build's downloads and layer writes, Slurm's polls, the nodes'
    start-ups), then the integration test files the first lane has not reached yet, from the
    other end (tests/integration/schedule.py: each file runs once, in the lane that claims it
    first). The image build starts at once, beside the making of the shared venv."""
    # The engines' packages first, once: the lanes' apt runs would race (smoke installs into
    # a venv of its own, so its lane need not wait for the shared one).
    engine.install_engine_packages(session)
    lanes = [["lint-and-tests", "integration"], ["smoke", "multinode", "integration-from-the-end"]]
    with tempfile.TemporaryDirectory(prefix="ddpimg-integration-claims-") as claims:
        _side_by_side(session, lanes, {schedule.CLAIMS_VARIABLE: claims})
        # Every file claimed is every file run; a selection (arguments after --) runs fewer.
        left = schedule.unclaimed(Path(claims), _integration_files())
        if left and not session.posargs:
            session.error(f"no lane ran these integration test files: {', '.join(left)}")


def _side_by_side(
    session: nox.Session, lanes: list[list[str]], lane_env: dict[str, str] | None = None
) -> None:
    """Run the ``lanes`` at the same time, each a `nox -s NAME...` of its own (its sessions
    one after another); their output interleaved, each line prefixed with its lane's names;
    the session's arguments after `--` go to each. Fail if any fails (issue 26: on 2 cores,
    what one lane leaves idle the other uses). The lanes start at once, while this session
    makes the shared venv; their sessions that need it wait for it (_wait_for_stack)."""
    venv = _stack_dir(session)
    if os.environ.get(STACK_READY) != str(venv):
        # This session makes it: no child may take an earlier run's marker for this one's.
        (venv / READY_MARKER).unlink(missing_ok=True)
    env = os.environ | {STACK_READY: str(venv)} | (lane_env or {})
    children = {"+".join(lane): _nox_child(lane, env, session.posargs) for lane in lanes}
    failed = _wait_for_children(session, children, then=lambda: _stack(session))
    if failed:
        session.error(f"{' and '.join(failed)} failed: see the lines prefixed with its name above")


def _nox_child(
    sessions: list[str], env: dict[str, str], posargs: list[str]
) -> subprocess.Popen[str]:
    """Start `nox -s SESSION...` on this noxfile in ``env`` (this process's environment, not
    the parent session's: each child sets up its own), its stderr into its stdout."""
    command = [sys.executable, "-m", "nox", "--noxfile", __file__, "-s", *sessions]
    if posargs:
        command += ["--", *posargs]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )


def _wait_for_children(
    session: nox.Session,
    children: dict[str, subprocess.Popen[str]],
    then: Callable[[], object],
) -> list[str]:
    """Copy each child's lines to stdout, prefixed with its name, while ``then`` runs here and
    until all have ended (each says when); if ``then`` fails or an interrupt comes, see that
    they end too (CHILD_STOP_S). Return the failed ones."""
    started = time.monotonic()
    lock = threading.Lock()

    def copy(name: str, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            with lock:
                sys.stdout.write(f"[{name}] {line}")
                sys.stdout.flush()
        code = child.wait()
        with lock:
            session.log(f"{name}: exit {code} after {time.monotonic() - started:.0f} s")

    copiers = [threading.Thread(target=copy, args=item, daemon=True) for item in children.items()]
    for copier in copiers:
        copier.start()
    try:
        then()
        for child in children.values():
            child.wait()
    except BaseException as error:
        # On an interrupt the children get CHILD_STOP_S to end on their own (a Ctrl-C
        # reached them too: one process group; their clean-up, the namespace cluster and
        # dockerd, takes seconds), then a SIGINT (it was this process's alone: kill -INT);
        # after a failure here the SIGINT comes at once. A child still there CHILD_STOP_S
        # after its SIGINT is killed.
        stops = (None, signal.SIGINT, signal.SIGKILL)
        for stop in stops if isinstance(error, KeyboardInterrupt) else stops[1:]:
            running = [child for child in children.values() if child.poll() is None]
            for child in running:
                if stop is not None:
                    child.send_signal(stop)
            deadline = time.monotonic() + CHILD_STOP_S
            for child in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=max(0.0, deadline - time.monotonic()))
        raise
    for copier in copiers:
        copier.join(timeout=CHILD_STOP_S)
    return [name for name, child in children.items() if child.returncode != 0]


@nox.session(default=False, venv_backend="none")
def demo(session: nox.Session) -> None:
    """Run the main job: train on 2 local CPU workers, synthetic data, 1 epoch."""
    bin_dir = _stack(session)
    session.run(str(bin_dir / "train"), *(session.posargs or DEMO_ARGS), external=True)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks (docs/performance.md): -- [benchmarks/bench.py options] [--image-reuse]."""
    # bench.py runs in the shared venv; this session's own (pip only) fetches the wheels.
    python = str(_stack(session) / "python")
    args = list(session.posargs)
    reuse = "--image-reuse" in args
    if reuse:
        args.remove("--image-reuse")
    # Only the --parts option matters here: without it bench.py runs every part, the image
    # part included, hence the default.
    parts = argparse.ArgumentParser(add_help=False)
    parts.add_argument("--parts", default="image")
    if "image" not in parts.parse_known_args(args)[0].parts.split(","):
        session.run(python, "benchmarks/bench.py", *args, external=True)
        return
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as tmp:
        builds = Path(tmp) / "builds.json"
        started_engine = images.bench_images(session, builds, rebuild=not reuse)
        try:
            session.run(
                python, "benchmarks/bench.py", "--image-builds", str(builds), *args, external=True
            )
        finally:
            if started_engine:
                engine.engine(session, "stop")


# ---- The image: containers/ (docs/containers.md), built by containers/imagebuild ------------


@nox.session(default=False)
def lock(session: nox.Session) -> None:
    """Make the pip locks (lock/NAME.txt) and the Debian ones (lock/apt/): -- [NAME...|apt]."""
    aptlocks.make_locks(session, session.posargs)


@nox.session(default=False)
def image(session: nox.Session) -> None:
    """Build the image: -- cpu|gpu [--local] [--torch LOCK] [--tag T] [--no-cache] (see -- -h)."""
    images.build_image(session, images.parse_image_options(session.posargs))


def _image_tests(
    session: nox.Session,
    builds: list[images.ImageBuild],
    tests: str,
    env: dict[str, str],
    drop_build_stages: list[images.ImageBuild] | None = None,
) -> None:
    """Build ``builds`` on this machine (no registry), then run pytest on ``tests`` with
    ``env`` naming the images (images.images_built cleans up)."""
    # ddpimg without the training stack: the tests only read what the images wrote.
    session.install("-r", DEV_REQUIREMENTS)
    with _building_from_the_tree(session):
        session.install("--no-deps", "-e", ".")
    with images.images_built(session, builds, drop_build_stages or []):
        session.run("pytest", DURATIONS, tests, "-p", "no:cacheprovider", *session.posargs, env=env)


@nox.session(default=False)
def smoke(session: nox.Session) -> None:
    """Build the CPU image here (no registry); run it under docker and podman-hpc."""
    # Under CI, whose clone never builds again, the build stage (a second 7 GB copy of the
    # venv, kept here as the next build's cache) goes as soon as the image is built: the
    # podman-hpc tests need that room (a CI run once ran out of disk loading the image).
    in_ci = bool(os.environ.get("CI"))
    _image_tests(
        session, [images.SMOKE_BUILD], "tests/containers",
        {"DDPIMG_TEST_IMAGE": images.SMOKE_IMAGE},
        drop_build_stages=[images.SMOKE_BUILD] if in_ci else None,
    )  # fmt: skip


@nox.session(default=False)
def flavours(session: nox.Session) -> None:
    """Build the GPU images here (CUDA 13, 12.8, arm64); check their torch, train in them."""
    builds = [images.CUDA13_BUILD, images.CUDA12_BUILD, images.ARM64_BUILD]
    # The GPU images' build stages (second copies of their venvs) would only cache the next
    # builds, which CI never makes: ~6 GB each freed. The images stay, for `docker run` and SIFs.
    _image_tests(
        session, builds, "tests/containers/test_flavours.py",
        {"DDPIMG_FLAVOUR_IMAGES": " ".join(build.tag for build in builds)},
        drop_build_stages=builds,
    )  # fmt: skip


@nox.session(name="image-repro", default=False)
def image_repro(session: nox.Session) -> None:
    """Build an image twice, the second --no-cache: one digest, or the files that differ."""
    images.check_reproducible(session, session.posargs)


@nox.session(default=False, venv_backend="none")
def sqsh(session: nox.Session) -> None:
    """Export an image as enroot's squashfs, reproducibly: -- IMAGE [--output F] [--twice]."""
    squashfs.export_session(session, session.posargs)


@nox.session(default=False, venv_backend="none")
def sif(session: nox.Session) -> None:
    """Build a SIF with Apptainer: -- [gpu|cpu|standalone] [--torch LOCK] (see -- -h)."""
    apptainer = shutil.which("apptainer") or shutil.which("singularity")
    if apptainer is None:
        session.skip(
            "apptainer is not installed (Debian 12 and PyPI do not package it): build the SIF "
            "where Apptainer exists, see docs/containers.md"
        )
    build_sif(session, apptainer, parse_sif_options(session.posargs, source_facts()))


@nox.session(name="gpu-check", default=False, venv_backend="none")
def gpu_check(session: nox.Session) -> None:
    """GPU checks of the GPU flavour (GPU seen, NCCL all-reduce, bf16 step); skips without one."""
    reason = engine.gpu_missing()
    if reason is not None:
        session.skip(f"no GPU: {reason}")
    script = "/opt/ddpimg/scripts/gpu_check.py"
    target = session.posargs[0] if session.posargs else "ddpimg:gpu"
    if target.endswith(".sif"):
        apptainer = shutil.which("apptainer") or shutil.which("singularity") or "apptainer"
        session.run(apptainer, "exec", "--nv", target, "python3", script, external=True)
    elif target == "host":
        python = str(_stack(session) / "python")
        session.run(python, str(locks.CONTAINERS / "scripts" / "gpu_check.py"), external=True)
    else:
        session.run(
            "docker", "run", "--rm", "--gpus", "all", "--ipc", "host", target, "python3", script,
            external=True,
        )  # fmt: skip


# ---- The GPU runbook (docs/benchmarks.md, "GPU runbook") -----------------------------------


@nox.session(name="gpu-runbook", default=False, venv_backend="none")
def gpu_runbook(session: nox.Session) -> None:
    """The GPU runbook (docs/benchmarks.md): -- [--dry-run] [--part 1|2|3|all] (see -- -h)."""
    python = str(_stack(session) / "python")
    session.run(python, "benchmarks/gpu_runbook.py", *session.posargs, external=True)


@nox.session(name="device-wheels", default=False, venv_backend="none")
def device_wheels(session: nox.Session) -> None:
    """Build/download into .whl/ the wheels the lent GPU machine lacks; prove the list complete."""
    python = str(_stack(session) / "python")
    session.run(python, "benchmarks/device_wheels.py", *session.posargs, external=True)
