"""The steps every part starts with (each device call may land on a fresh machine): install
the carried wheels, then read the device."""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path

from runbook import commands, wheels
from runbook.commands import PYTHON
from runbook.model import Context, Outcome

PROBES = Path(__file__).resolve().parent / "probes.py"
# Where the wheels go when the interpreter's own environment is read-only.
FALLBACK_SITE = "site"


def _installed_ddpimg(ctx: Context) -> Path | None:
    probe = commands.run(
        [PYTHON, "-c", "import ddpimg.version as v; print(v.__file__)"], ctx.deadline, ctx.log
    )
    return Path(probe.stdout.strip()).parent if probe.ok else None


def stale_files(installed: Path, tree: Path) -> list[str]:
    """The modules of ``tree`` (src/ddpimg) that ``installed`` lacks or holds otherwise."""
    stale = []
    for source in sorted(tree.rglob("*.py")):
        relative = source.relative_to(tree)
        copy = installed / relative
        digest = hashlib.sha256(source.read_bytes()).digest()
        if not copy.is_file() or hashlib.sha256(copy.read_bytes()).digest() != digest:
            stale.append(str(relative))
    return stale


def _use_fallback_site(ctx: Context) -> list[str]:
    """pip's options for installing into a folder of the work directory, and the variables
    that make every later process find it (ddpimg's clean environment would drop
    PYTHONPATH: DDPIMG_KEEP_ENV keeps it)."""
    site = ctx.work / FALLBACK_SITE
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])
    )
    os.environ["DDPIMG_KEEP_ENV"] = "PYTHONPATH"
    os.environ["DDPIMG_SITE_PATH"] = str(ctx.repo / "site-profiles")
    os.environ["PATH"] = os.pathsep.join([str(site / "bin"), os.environ.get("PATH", "")])
    return ["--target", str(site)]


def install(ctx: Context) -> Outcome:
    """The stack's requirements from the carried folder and what the device has, resolved by
    pip with no index (the device's real versions: the last word on the wheel proof), then
    ddpimg's wheel over any older install. If pip cannot resolve them, the carried wheels of
    what the device lacks go in without their requirements, so that the other steps still
    run, and the step fails naming what pip missed. In the dry run pip only resolves
    (--dry-run) against this environment, which already holds everything."""
    device_packages = wheels.read_device_packages()
    requirements = wheels.stack_requirements(device_packages, ctx.repo)
    carried = sorted(ctx.wheels.glob("*.whl"))
    if not ctx.dry_run and not carried:
        return Outcome(
            "fail",
            f"no wheels in {ctx.wheels}",
            "make them here with nox -s device-wheels and carry them: run(..., carry=['.whl'])",
        )
    pip = [PYTHON, "-m", "pip", "install", "--no-index", "--find-links", str(ctx.wheels),
           "--no-cache-dir", "--disable-pip-version-check"]  # fmt: skip
    if ctx.dry_run:
        pip.append("--dry-run")
    elif not os.access(sysconfig.get_paths()["purelib"], os.W_OK):
        pip += _use_fallback_site(ctx)
    env = wheels.isolated_env()
    notes: list[str] = []
    problems: list[str] = []
    resolved = commands.run([*pip, *requirements], ctx.deadline, ctx.log, env=env)
    if resolved.ok:
        notes.append(f"resolved {', '.join(requirements)} with no index")
    else:
        problems.append(f"pip could not resolve the stack with no index: {resolved.tail(1500)}")
        if ctx.dry_run:
            return Outcome("fail", f"pip: {resolved.verdict()}", problems[0])
        lacking = [str(w) for w in carried if wheels.wheel_name(w) not in device_packages]
        forced = commands.run([*pip, "--no-deps", *lacking], ctx.deadline, ctx.log, env=env)
        if not forced.ok:
            return Outcome("fail", f"pip: {forced.verdict()}", forced.tail(2500))
        notes.append("installed the carried wheels without their requirements instead")
    if not ctx.dry_run:
        own = [w for w in carried if wheels.wheel_name(w) == "ddpimg"]
        if not own:
            return Outcome("fail", f"no ddpimg wheel in {ctx.wheels}", "run nox -s device-wheels")
        again = commands.run(
            [*pip, "--no-deps", "--force-reinstall", str(own[-1])], ctx.deadline, ctx.log, env=env
        )
        if not again.ok:
            return Outcome("fail", f"pip (ddpimg): {again.verdict()}", again.tail(2500))
    installed = _installed_ddpimg(ctx)
    if installed is None:
        return Outcome("fail", "ddpimg cannot be imported after the install", "; ".join(problems))
    stale = stale_files(installed, ctx.repo / "src" / "ddpimg")
    if stale:
        # The wheel was built before the tree changed: install the tree itself.
        tree = commands.run(
            [*pip, "--no-deps", "--no-build-isolation", "--force-reinstall", str(ctx.repo)],
            ctx.deadline,
            ctx.log,
            env=env,
        )
        if not tree.ok:
            return Outcome("fail", f"ddpimg wheel older than the tree ({len(stale)} files)",
                           tree.tail(2500))  # fmt: skip
        notes.append(
            f"the ddpimg wheel was older than the tree in {len(stale)} file(s) "
            f"({', '.join(stale[:3])}): installed the tree; rerun nox -s device-wheels"
        )
    measured = "resolved (pip --dry-run)" if ctx.dry_run else "installed"
    return Outcome(
        "fail" if problems else "pass",
        f"{measured}; ddpimg at {installed}; {'; '.join(notes)}",
        "; ".join(problems),
        {"requirements": requirements, "stale": stale},
    )


def device(ctx: Context) -> Outcome:
    """Versions, the GPU and its driver; stored in ``ctx.facts`` for the summary and the goals."""
    probe = commands.run([PYTHON, str(PROBES), "facts"], ctx.deadline, ctx.log, cwd=ctx.work)
    if not probe.ok:
        return Outcome("fail", f"probe: {probe.verdict()}", probe.tail())
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    ctx.facts["device"] = facts
    gpu = facts["gpu"]
    smi = facts["nvidia_smi"]
    where = (
        f"{gpu['name']} (sm {gpu['capability']}, {gpu['memory_gib']} GiB), driver "
        f"{smi.get('driver_version', '?')}"
        if gpu
        else f"no GPU, {facts['cpus']} CPUs"
    )
    measured = (
        f"{where}; Python {facts['python']}, torch {facts['torch']} (CUDA {facts['cuda']}, "
        f"NCCL {facts['nccl']}), DeepSpeed {facts['deepspeed']}, ddpimg {facts['ddpimg']}"
    )
    if not ctx.dry_run and not gpu:
        return Outcome("fail", measured, "torch sees no CUDA device", facts)
    return Outcome("pass", measured, record=facts)


def describe_device(facts: dict[str, object]) -> str:
    """One line naming the machine, for the report's title."""
    gpu = facts.get("gpu")
    if isinstance(gpu, dict) and gpu:
        return f"{gpu['name']}, torch {facts['torch']}"
    return f"CPU only ({facts.get('cpus')} CPUs), torch {facts.get('torch')}"
