"""Checks of the GPU path that are not training runs: the ``gpu`` tests, ``nox -s gpu-check``'s
script, ddpimg's compatibility rule, ``ddpimg doctor`` with one and two ranks (and whether
NCCL lets two ranks share the GPU), and a deliberate hang read back by torchfrtrace."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from runbook import commands
from runbook.commands import PYTHON, Ran
from runbook.model import Context, Outcome
from runbook.setup_steps import PROBES

HANG = Path(__file__).resolve().parent / "hang.py"
NO_GPU = "dry run: no GPU"
# NCCL 2.5 and later refuse a communicator with two ranks on one device (NVIDIA/nccl#418:
# its topology search cannot work so): ncclInvalidUsage, whose "last error" is this warning.
REFUSALS = ("Duplicate GPU detected", "invalid usage")
# Collective timeouts of the deliberate hang: the watchdog needs a few seconds on the GPU;
# on the CPU the step waits for the timeout twice (rank 0's, then the sleeping rank's).
HANG_TIMEOUT_S = {"gpu": 10.0, "cpu": 3.0}
HANG_LIMIT_S = 150.0
DOCTOR_LIMIT_S = 180.0
PROBE_LIMIT_S = 90.0


def junit_counts(path: Path) -> dict[str, int]:
    """tests, failures, errors, skipped (summed over the suites) from pytest's JUnit XML."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    return {key: sum(int(suite.get(key, "0")) for suite in suites) for key in keys}


def gpu_tests(ctx: Context) -> Outcome:
    """``pytest -m gpu`` over the whole test tree, from the repository (as CI collects it)."""
    xml = ctx.work / "gpu-tests.xml"
    ran = commands.run(
        [PYTHON, "-m", "pytest", "-m", "gpu", "tests", "-p", "no:cacheprovider", "-q",
         f"--junitxml={xml}"],
        ctx.deadline, ctx.log, cwd=ctx.repo,
    )  # fmt: skip
    if not xml.is_file():
        return Outcome("fail", f"pytest: {ran.verdict()}, no report", ran.tail(2500))
    counts = junit_counts(xml)
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    measured = (
        f"{counts['tests']} gpu tests: {passed} passed, {counts['failures'] + counts['errors']} "
        f"failed, {counts['skipped']} skipped"
    )
    if not ran.ok or counts["failures"] or counts["errors"]:
        return Outcome("fail", measured, ran.tail(2500), counts)
    if not ctx.dry_run and passed == 0:
        return Outcome("fail", measured, "no gpu test ran on the GPU: " + ran.tail(800), counts)
    return Outcome("pass", measured, record=counts)


def gpu_check(ctx: Context) -> Outcome:
    """What ``nox -s gpu-check -- host`` runs: containers/scripts/gpu_check.py."""
    ran = commands.run(
        [PYTHON, str(ctx.repo / "containers" / "scripts" / "gpu_check.py")],
        ctx.deadline,
        ctx.log,
        cwd=ctx.repo,
        limit_s=DOCTOR_LIMIT_S,
    )
    lines = [line.removeprefix("gpu_check: ") for line in ran.output.splitlines()
             if line.startswith("gpu_check: ")]  # fmt: skip
    measured = "; ".join(lines) or ran.verdict()
    if ctx.dry_run:
        if not ran.ok and "torch.cuda.is_available() is False" in ran.output:
            return Outcome("skip", measured, f"{NO_GPU}: the script stops at its first check")
        return Outcome("fail", measured, "expected the no-GPU failure: " + ran.tail())
    return Outcome("pass" if ran.ok else "fail", measured, "" if ran.ok else ran.tail(2500))


def compat(ctx: Context) -> Outcome:
    """ddpimg's rule (ddpimg.hardware.compat) on this GPU and driver: this torch, and each
    image flavour the project builds."""
    ran = commands.run([PYTHON, str(PROBES), "compat"], ctx.deadline, ctx.log, cwd=ctx.work)
    if not ran.ok:
        return Outcome("fail", f"probe: {ran.verdict()}", ran.tail(2500))
    found: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    gpu, image = found["gpu"], found["image"]
    torch = f"torch {image['torch_version']} (CUDA {image['cuda_version']})"
    if gpu is None:
        if ctx.dry_run:
            return Outcome("skip", f"{torch}; no GPU visible", NO_GPU, found)
        return Outcome("fail", f"{torch}; the probe sees no GPU", record=found)
    capability = ".".join(str(part) for part in gpu["capability"] or ())
    driver_cuda = ".".join(str(part) for part in gpu["driver_cuda"] or ())
    flavours = ", ".join(f"{name} {'fits' if fits else 'does NOT fit'}"
                         for name, fits in found["flavours"].items())  # fmt: skip
    measured = (
        f"{gpu['name']} (sm {capability}), driver {gpu['driver_version']} (CUDA "
        f"{driver_cuda}): {torch} {'refused' if found['problem'] else 'accepted'}; image "
        f"flavours: {flavours}"
    )
    if found["problem"]:
        return Outcome("fail", measured, found["problem"], found)
    return Outcome("pass", measured, record=found)


def _doctor_json(ran: Ran) -> dict[str, Any] | None:
    line = next((x for x in ran.stdout.splitlines() if x.startswith("{")), None)
    return None if line is None else dict(json.loads(line))


def _transport(ran: Ran) -> str:
    return next(
        (x for x in ran.stdout.splitlines() if x.startswith(("NCCL network:", "NCCL transport"))),
        "no transport line",
    )


def _doctor(ctx: Context, ranks: int, backend: str | None) -> Outcome:
    argv = [PYTHON, "-m", "ddpimg", "doctor", "--json", "--timeout", "120"]
    if ranks > 1:
        argv += ["--nproc-per-node", str(ranks)]
    if backend:
        argv += ["--backend", backend]
    ran = commands.run(argv, ctx.deadline, ctx.log, limit_s=DOCTOR_LIMIT_S)
    found = _doctor_json(ran)
    if found is None:
        return Outcome("fail", f"doctor: {ran.verdict()}, no JSON", ran.tail(2500))
    device = found["rows"][0]["device"]
    measured = (
        f"{ranks} rank(s) on {device}: all-reduce {'correct' if found['ok'] else 'WRONG'}, "
        f"bus bandwidth {found['busbw_gbps']:.2f} GB/s; {_transport(ran)}"
    )
    if ranks == 1:
        measured += " (one rank: the bandwidth of a copy, no link)"
    ok = ran.ok and found["ok"]
    return Outcome("pass" if ok else "fail", measured, "" if ok else ran.tail(2500), found)


def doctor(ctx: Context) -> Outcome:
    """``ddpimg doctor`` on one rank: NCCL on the GPU (its INIT/NET log parsed), Gloo on the CPU."""
    return _doctor(ctx, 1, None)


def nccl_two_ranks(ctx: Context) -> Outcome:
    """Whether NCCL lets two ranks share the one GPU (``ddpimg doctor --nproc-per-node 2``);
    the answer picks the backend of the two-rank steps after it: NCCL if it does, else Gloo,
    whose collectives take CUDA tensors too."""
    ctx.facts["two_rank_backend"] = "gloo"
    if ctx.dry_run:
        return Outcome("skip", "two ranks use gloo", f"{NO_GPU}: NCCL needs one")
    ran = commands.run(
        [PYTHON, "-m", "ddpimg", "doctor", "--nproc-per-node", "2", "--backend", "nccl",
         "--timeout", "60"],
        ctx.deadline, ctx.log, limit_s=PROBE_LIMIT_S,
    )  # fmt: skip
    if ran.ok:
        ctx.facts["two_rank_backend"] = "nccl"
        return Outcome("pass", "NCCL accepts two ranks on one GPU: two-rank steps use nccl")
    refusal = re.search(rf"(?:{'|'.join(REFUSALS)})[^\n]*", ran.output)
    if refusal:
        return Outcome(
            "pass", f"NCCL refuses ({refusal[0].strip()}): two-rank steps use gloo on the GPU"
        )
    return Outcome("fail", f"doctor with NCCL: {ran.verdict()}, not the known refusal",
                   ran.tail(2500))  # fmt: skip


def doctor_two_ranks(ctx: Context) -> Outcome:
    """``ddpimg doctor`` with two ranks on the one GPU, on the backend the probe chose."""
    return _doctor(ctx, 2, ctx.facts.get("two_rank_backend", "gloo"))


def stuck_collectives(trace_dir: Path) -> dict[str, list[str]]:
    """Per dump file, the collectives its rank entered that did not complete: with several
    ranks, those some rank never entered (Gloo marks no entry's state, and counts a timed-out
    one as completed); with one rank, those whose state is not "completed"."""
    records = {
        dump.name: pickle.loads(dump.read_bytes()) for dump in sorted(trace_dir.glob("rank_*"))
    }
    entered = {
        name: {(e["process_group"][0], e["collective_seq_id"]) for e in record.get("entries", [])}
        for name, record in records.items()
    }
    stuck: dict[str, list[str]] = {}
    for name, record in records.items():
        stuck[name] = []
        for entry in record.get("entries", []):
            key = (entry["process_group"][0], entry["collective_seq_id"])
            if (
                any(key not in keys for keys in entered.values())
                if len(records) > 1
                else entry.get("state") != "completed"
            ):
                stuck[name].append(f"{entry['profiling_name']} #{key[1]} {entry['state']}")
    return stuck


def torchfrtrace() -> list[str]:
    """torch's analyser: the console script beside this Python, or its module."""
    script = Path(PYTHON).parent / "torchfrtrace"
    if script.is_file():
        return [str(script)]
    found = shutil.which("torchfrtrace")
    return [found] if found else [PYTHON, "-m", "torch.distributed.flight_recorder.fr_trace"]


def flight_recorder(ctx: Context) -> Outcome:
    """A deliberate hang (hang.py): the flight record of every rank, then torchfrtrace on it."""
    ranks = 2 if ctx.dry_run else 1
    timeout_s = HANG_TIMEOUT_S["cpu" if ctx.dry_run else "gpu"]
    traces = ctx.work / "nccl-trace"
    shutil.rmtree(traces, ignore_errors=True)
    hang = commands.run(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
         str(HANG), str(traces), str(timeout_s)],
        ctx.deadline, ctx.log, limit_s=HANG_LIMIT_S,
    )  # fmt: skip
    ended = (
        "ended by the NCCL watchdog" if not ctx.dry_run and not hang.ok and not hang.timed_out
        else hang.verdict()
    )  # fmt: skip
    stuck = stuck_collectives(traces) if traces.is_dir() else {}
    missing = [f"rank_{rank}" for rank in range(ranks) if f"rank_{rank}" not in stuck]
    if missing or not any(stuck.values()):
        return Outcome(
            "fail",
            f"hang {ended}; dumps: {sorted(stuck) or 'none'}",
            f"missing {missing or 'a stuck collective'}: " + hang.tail(2500),
            {"stuck": stuck},
        )
    analysis = commands.run([*torchfrtrace(), str(traces)], ctx.deadline, ctx.log, limit_s=120)
    report = dict(re.findall(r"^(collective|missing ranks): (.*)$", analysis.output, re.M))
    named = "; ".join(f"{key} {value}" for key, value in report.items()) or "no mismatch named"
    measured = (
        f"hang {ended}; dumps of {len(stuck)} rank(s), not completed: "
        f"{', '.join(f'{rank}: {entries}' for rank, entries in stuck.items() if entries)}; "
        f"torchfrtrace {analysis.verdict()}: {named}"
    )
    wrong_end = (ctx.dry_run and not hang.ok) or (not ctx.dry_run and (hang.ok or hang.timed_out))
    if not analysis.ok or wrong_end:
        return Outcome("fail", measured, analysis.tail(1500) + "\n" + hang.tail(1500),
                       {"stuck": stuck})  # fmt: skip
    return Outcome("pass", measured, record={"stuck": stuck, "torchfrtrace": report})
