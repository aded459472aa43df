"""From a laptop to the namespace cluster: ``ddpimg submit | follow | fetch | cancel | runs``
from the host, as a user would, with the real ``ssh`` client and a config of the kind a user
keeps, to OpenSSH's own ``sshd`` on the cluster's login node (``tests/engines/sshd.py``),
key-only, as an unprivileged user; the job is rendered there by the login node's ddpimg
(the code under test) and runs on the namespace nodes under real Slurm.

Several claims share one job where one run proves them (the CPU is the test command's
budget): the 2-node train run is preempted (USR2) and requeued, the login node's port is
closed for a few seconds while it waits, and the run followed to COMPLETED shows no line
twice; fetched, its losses are those of one local process.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ddpimg
from tests.engines.netns import NamespaceCluster
from tests.engines.sshd import BARE, HOST, HOSTILE, REFUSED, USER, SshLogin
from tests.integration.runs import (
    QUICK_LR,
    command,
    run,
    summary,
    train_losses,
    with_default_sigint,
)
from tests.integration.test_sbatch import release_requeued
from tests.multinode.conftest import PROFILES, SHORT_NAME_PROFILE, TIMEOUT_S
from tests.noise import FLOAT32_STEP, Tolerance, assert_within

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.ssh]

JOB = [
    "--site", str(SHORT_NAME_PROFILE), "--runtime", "none", "--gpu-request", "none",
    "--time", "10",
]  # fmt: skip
FOLLOW_LIMIT_S = 420
LINE_WAIT_S = 240


@pytest.fixture(scope="module")
def login(cluster: NamespaceCluster) -> Iterator[SshLogin]:
    package = Path(ddpimg.__file__).resolve().parent.parent
    user_env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(package),
        # train re-executes itself in a clean environment: the code under test must stay.
        "DDPIMG_KEEP_ENV": "PYTHONPATH",
        "PYTHONUNBUFFERED": "1",
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }
    node = SshLogin(cluster, user_env, also_read=[PROFILES])
    node.start()
    try:
        # The login node runs the code under test, not an installed ddpimg.
        there = subprocess.run(
            ["ssh", "-F", str(node.config), HOST, "python", "-c",
             "'import ddpimg; print(ddpimg.__file__)'"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip()  # fmt: skip
        assert there == ddpimg.__file__, there
        yield node
    finally:
        node.stop()


@pytest.fixture
def laptop(login: SshLogin, run_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The laptop's environment: its own state file, ssh with the test's config."""
    return login.laptop_env(run_env, tmp_path / "state")


def ddpimg_cmd(*args: str) -> list[str]:
    return [command("ddpimg"), *args]


class Output:
    """A command's merged output, read line by line as it comes (bounded waits)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, limit_s: float = LINE_WAIT_S) -> re.Match[str]:
        rule = re.compile(pattern)
        for line in self.lines:
            if found := rule.search(line):
                return found
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if found := rule.search(line):
                return found
        raise AssertionError(
            f"no line matching {pattern!r} within {limit_s:g} s:\n" + "\n".join(self.lines)
        )

    def finish(self, limit_s: float = FOLLOW_LIMIT_S) -> int:
        try:
            status = self.proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return status


def start(argv: list[str], env: dict[str, str], cwd: Path) -> Output:
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return Output(proc)


# 30 logged steps of the MNIST CNN (QUICK_TRAIN's batch, data and learning rate, longer),
# every step a preemption check: long enough that the USR2 sent once step 1 is logged is seen
# while it trains.
STEPS = 30
TRAIN = [
    "train", "--data", "synthetic", "--epochs", "1", "--max-steps", str(STEPS),
    "--log-every", "1", "--global-batch-size", "64", "--train-samples", "2048",
    "--eval-samples", "512", "--seed", "7", "--lr", QUICK_LR, "--preempt-check-every", "1",
]  # fmt: skip
# TRAIN on 4 ranks and in one process (python -m tests.noise --compare "4 ranks=--nproc-per-node
# 4" -- TRAIN, AMD EPYC, 2026-12-07, the dropout masks hashed per unit): the floor is one
# float32 step (1.2e-7); 4 ranks part from one process by under 0.2x it to step 14, then by up
# to 23x at steps 15-23 and up to 1,140x at steps 24-30, natively and with MKL's compatible
# path alike (with torch's default kernels at most 38x, with oneDNN at SSE4.1 1.1x; one
# thread 17x). The steps compared end at 21, well after the requeued run's
# resume (USR2 once step 1 is logged): there the most is 21.3x, and the multiple 10x that,
# rounded up: 6.0e-5, 100x under what one wrong batch moves these losses by (percents).
# Compared to step 30 it would have to be 2e4 (2.4e-3).
TOLERANCE = Tolerance(floor=FLOAT32_STEP, multiple=500, steps=21)


@pytest.fixture(scope="module")
def local_losses(run_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """TRAIN's losses in one local process: what the cluster's run must give."""
    out = tmp_path_factory.mktemp("local") / "run"
    run([command("train"), *TRAIN[1:], "--out", str(out)], run_env, timeout=300)
    return train_losses(out)


def preempt_early(metrics: Path, job_id: str, env: dict[str, str]) -> None:
    """Slurm's warning before the time limit, USR2 to the batch shell only, once the run's
    first step is logged: the run checkpoints, exits 75 and its job script requeues the job.
    The file is watched here (every 50 ms), not through follow's polls: the signal comes a few
    steps in (the preemption's line says which), far from the run's end, however fast the
    machine trains (Slurm cannot signal a suspended job's batch shell)."""
    deadline = time.monotonic() + LINE_WAIT_S
    while _steps(metrics) < 1:
        assert time.monotonic() < deadline, f"{metrics} did not show a step in {LINE_WAIT_S} s"
        time.sleep(0.05)
    run(["scancel", "--signal=USR2", "--batch", job_id], env, timeout=30)


def _steps(metrics: Path) -> int:
    try:
        return metrics.read_text().count('"kind": "train"')
    except OSError:
        return 0


def test_a_two_node_run_preempted_and_disconnected_is_followed_and_fetched(
    login: SshLogin,
    laptop: dict[str, str],
    cluster_env: dict[str, str],
    local_losses: list[float],
    tmp_path: Path,
) -> None:
    before = login.accepted()
    out = start(
        ddpimg_cmd("submit", "--host", HOST, *JOB, "--nodes", "2", "--gpus-per-node", "2",
                   "--follow", "--interval", "1", "--", *TRAIN, "--timeout", str(TIMEOUT_S)),
        laptop, tmp_path,
    )  # fmt: skip
    job_id, name, workdir = out.wait_for(r"submitted job (\d+), run (\S+) \(in (\S+)\)").groups()
    preempt_early(Path(workdir) / "runs" / job_id / "metrics.jsonl", job_id, cluster_env)
    out.wait_for(r"^step \d+/30 ")
    # One connection for the whole command so far: staging, rendering, submitting, polling.
    assert login.accepted() == before + 1
    out.wait_for(r"REQUEUED \(restart 1\)")
    release_requeued(job_id, cluster_env, restarts=1)
    # The login node's port closed for a few seconds while the job starts again.
    login.block()
    try:
        out.wait_for(r"lost the connection to login")
        time.sleep(3)
    finally:
        login.unblock()
    out.wait_for(r"reconnected to login after \d+ s")
    assert out.finish() == 0, "\n".join(out.lines)
    lines = out.lines
    text = "\n".join(lines)
    assert len(lines) == len(set(lines)), f"a line shown twice:\n{text}"
    steps = [int(m.group(1)) for line in lines if (m := re.match(r"step (\d+)/30 ", line))]
    assert steps == sorted(set(steps)), text
    assert steps[-1] == STEPS, text
    assert re.search(r"REQUEUED \(restart 1\): the run preempted \(SIGUSR2\) after step \d+, "
                     r"checkpoint step-\d{8} \(exit 75\)", text), text  # fmt: skip
    assert re.search(r"RUNNING \(restart 1\) on node\[\d-\d\]", text), text
    assert re.search(rf"{name}: COMPLETED \(exit 0:0\): the run completed: 30 steps", text), text
    fetched = run(ddpimg_cmd("fetch", name), laptop, cwd=tmp_path, timeout=120)
    local = tmp_path / "runs" / name
    assert "fetched" in fetched.stderr, fetched.stderr
    manifest = json.loads((local / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["resumed_from"] is not None, "the requeued run did not resume"
    assert summary(local)["world_size"] == 4
    assert_within(train_losses(local), local_losses, TOLERANCE, "submitted, requeued vs local")
    assert (local / f"ddpimg-{job_id}.out").is_file()
    assert (local / "job.sh").is_file()
    listed = run(ddpimg_cmd("runs", "--json"), laptop, cwd=tmp_path).stdout.splitlines()
    rows = [json.loads(line) for line in listed]
    assert [(r["name"], r["status"], r["steps"]) for r in rows] == [(name, "completed", STEPS)]
    assert rows[0]["directory"].startswith(f"{HOST}:/home/{USER}/")


USER_SCRIPT = """\
# A user's own loop: plain PyTorch and nothing of ddpimg's; it logs nothing. It reads a file
# of the tree it was staged with, relative to where it runs.
import json, pathlib, sys
import torch, torch.distributed as dist

dist.init_process_group("gloo")
weights = torch.tensor(json.loads(pathlib.Path("data/weights.json").read_text()))
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1, bias=False))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(sys.argv[1])):
    inputs = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
    loss = ((model(inputs).squeeze(1) - inputs @ weights) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if dist.get_rank() == 0:
    print(f"user script: final loss {loss.item():.6f}")
"""


def make_tree(root: Path) -> Path:
    """A git work tree with the user's script and its data in exp/, and outputs git ignores."""
    exp = root / "exp"
    (exp / "data").mkdir(parents=True)
    (exp / "outputs").mkdir()
    (exp / "train.py").write_text(USER_SCRIPT)
    (exp / "data" / "weights.json").write_text("[1.0, -2.0, 0.5, 3.0]")
    (exp / "outputs" / "old.bin").write_bytes(b"\0" * 4096)
    (root / ".gitignore").write_text("outputs/\n")
    for argv in (["git", "init", "-q"], ["git", "add", "."]):
        subprocess.run(argv, cwd=root, check=True, capture_output=True, timeout=30)
    return exp


def test_a_users_script_staged_from_the_laptop_and_staged_again_by_content(
    login: SshLogin, laptop: dict[str, str], cluster_env: dict[str, str], tmp_path: Path
) -> None:
    exp = make_tree(tmp_path / "repo")
    script = ["--nodes", "1", "--gpus-per-node", "2", "--", "train", "--script", "train.py", "5"]
    out = start(
        ddpimg_cmd("submit", "--host", HOST, *JOB, "--follow", "--interval", "1", *script),
        laptop, exp,
    )  # fmt: skip
    assert out.finish() == 0, "\n".join(out.lines)
    text = "\n".join(out.lines)
    assert re.search(r"staged 3 files \(\d+ B, git\): 3 new \(", text), text
    name = out.wait_for(r"submitted job \d+, run (train-\d+) ").group(1)
    # A plain script logs nothing: its steps are what the optimizer hooks counted.
    assert re.search(r"^step 5( |$)", text, re.MULTILINE), text
    assert re.search(rf"{name}: COMPLETED \(exit 0:0\): the run completed", text), text
    run(ddpimg_cmd("fetch", name), laptop, cwd=exp, timeout=120)
    (log,) = (exp / "runs" / name).glob("ddpimg-*.out")
    assert "user script: final loss" in log.read_text()
    # What git tracks, as hard links into the login node's store; not what it ignores.
    (staged,) = (login.home / "ddpimg-remote" / "jobs").glob("train-*")
    linked = {
        p.relative_to(staged).as_posix()
        for p in staged.rglob("*")
        if p.is_file() and not p.is_symlink() and p.stat().st_nlink > 1
    }
    assert linked == {".gitignore", "exp/data/weights.json", "exp/train.py"}
    assert not (staged / "exp" / "outputs").exists()

    # The same tree again: no file's content is sent. Held, then cancelled from the laptop.
    again = run(
        ddpimg_cmd("submit", "--host", HOST, *JOB, "--sbatch-option=--hold", *script),
        laptop, cwd=exp, timeout=120,
    )  # fmt: skip
    assert re.search(r"staged 3 files \(\d+ B, git\): 0 new \(0 B\), 3 already", again.stderr)
    held = again.stdout.strip()
    job_id = held.rsplit("-", 1)[1]
    # Ctrl-C stops following, never the job.
    # Ctrl-C reaches it however the tests were started (with_default_sigint).
    follow = start(with_default_sigint(ddpimg_cmd("follow", held, "--interval", "1")), laptop, exp)
    follow.wait_for(rf"{held}: PENDING")
    follow.proc.send_signal(signal.SIGINT)
    assert follow.finish(60) == 130
    assert follow.lines[-1].startswith(f"ddpimg: stopped following {held}; job {job_id} goes on")
    assert "JobState=PENDING" in run(["scontrol", "show", "job", job_id], cluster_env).stdout
    run(ddpimg_cmd("cancel", held), laptop, cwd=exp)
    assert "CANCELLED" in run(["scontrol", "show", "job", job_id], cluster_env).stdout
    rows = [
        json.loads(line)
        for line in run(ddpimg_cmd("runs", "--json"), laptop, cwd=exp).stdout.splitlines()
    ]
    assert [(r["name"], r["status"]) for r in rows] == [(name, "completed"), (held, "cancelled")]


@pytest.mark.parametrize(
    "case",
    [
        ("nosuch.invalid", "auto", r"ssh nosuch\.invalid: unknown host \(ssh: .*resolve"),
        (REFUSED, "auto", r"ssh login-refused: the login was refused \(ssh: .*Permission denied"),
        (BARE, "auto", r"login-bare: ddpimg is not on the login node's PATH for ssh commands "
                       r"\(PATH=/usr/local/bin:/usr/bin:/bin\)"),
        (HOST, "nosuchsite", r"login: the login node cannot resolve the site \(--site "
                             r"nosuchsite\): ddpimg: error: .*nosuchsite"),
        (HOST, "auto", r"login: the login node matches no site profile \(its ddpimg resolves "
                       r"generic"),
    ],
    ids=["unknown-host", "refused-key", "no-ddpimg", "unknown-site", "no-site-matches"],
)  # fmt: skip
def test_what_the_login_node_lacks_is_named(
    login: SshLogin, laptop: dict[str, str], tmp_path: Path, case: tuple[str, str, str]
) -> None:
    host, site, message = case
    proc = run(
        ddpimg_cmd("submit", "--host", host, "--site", site, "--", "train", "--max-steps", "1"),
        laptop, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    first, hint, *_ = [*proc.stderr.splitlines(), "", ""]
    assert re.match(rf"ddpimg: error: {message}", first), proc.stderr
    assert hint.startswith("  hint: "), proc.stderr
    assert not (tmp_path / "state").exists(), "a run was recorded"


HOSTILE_TAR = """\
#!/usr/bin/env python3
# A login node's tar that packs what no run directory holds (and unpacks as tar does).
import io, os, sys, tarfile

if sys.argv[1:3] != ["-cf", "-"]:
    os.execv("/bin/tar", ["tar", *sys.argv[1:]])

def add(tar, name, data=b"", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
    add(tar, "../outside.txt", b"x")
    add(tar, "ABSOLUTE/abs.txt", b"x")
    add(tar, "./manifest.json", b'{"status": "failed", "exit_status": 5}')
    add(tar, "metrics.jsonl", kind=tarfile.SYMTYPE, link="/etc/passwd")
    add(tar, "trackers.json", kind=tarfile.LNKTYPE, link="/etc/passwd")
    add(tar, "wandb/../../escape.txt", b"x")
    add(tar, "wandb/run/ok.txt", b"ok")
    add(tar, "checkpoints/step-00000001/../../../x", b"x")
    add(tar, "mlruns/fifo", kind=tarfile.FIFOTYPE)
    add(tar, "line\\nbreak.png", b"x")
    add(tar, "$(touch${IFS}PWNED).png", b"a name, never run")
    add(tar, "./ddpimg-77.out", b"\\x1b[2Jlog")
"""


def test_a_hostile_login_node_changes_nothing_outside_the_run(
    login: SshLogin, laptop: dict[str, str], tmp_path: Path
) -> None:
    canary = tmp_path / "canary"
    pwned = tmp_path / "pwned"
    fakes = {
        # A job id with a terminal escape and a command after it.
        "sbatch": f"#!/bin/sh\nprintf '\\033[2J99; touch {pwned}\\n'\n",
        "scontrol": (
            "#!/bin/sh\nprintf 'JobId=77 JobName=$(touch${IFS}%s) JobState=FAILED "
            "Reason=\\033[2J NodeList=node1;id Restarts=0 ExitCode=5:0 StdOut=%s\\n' "
            f"{pwned} {login.home}/h/../../../etc/passwd\n"
        ),
        "tar": HOSTILE_TAR.replace("ABSOLUTE", str(canary)),
    }
    for name, text in fakes.items():
        (login.hostile_bin / name).write_text(text)
        (login.hostile_bin / name).chmod(0o755)
    # The run's files on the login node, as its user could have written them.
    remote = login.home / "h"
    (remote / "runs" / "77").mkdir(parents=True)
    (remote / "runs" / "77" / "metrics.jsonl").write_text(
        '{"kind": "train", "step": 1, "loss": "\\u001b[2J", "samples_per_s": 1e308}\n'
        f"$(touch {pwned})\n"
        '{"kind": "train", "step": "2; id", "loss": 0.5}\n'
    )
    (remote / "runs" / "77" / "manifest.json").write_text(json.dumps({
        "status": "failed\x1b[31m", "exit_status": 5,
        "error": f"\x1b]0;owned\x07$(touch {pwned})\n  hint: run `rm -rf ~`",
    }))  # fmt: skip
    (remote / "ddpimg-77.out").write_text(f"\x1b[2Jcleared\n`touch {pwned}`\n")
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(remote)], check=True, timeout=30)

    # Submitting: the answer is no job id; nothing is recorded, nothing is run here.
    proc = run(
        ddpimg_cmd("submit", "--host", HOSTILE, *JOB, "--nodes", "1", "--gpus-per-node", "1",
                   "--", "train", "--max-steps", "1"),
        laptop, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "is not a job id and a directory (job id '\\x1b[2J99'" in proc.stderr
    assert not (tmp_path / "state").exists()

    # A run recorded for that host (as by an earlier submit), followed and fetched.
    local = tmp_path / "runs" / "mnist-77"
    entry = {
        "name": "mnist-77", "host": HOSTILE, "job_id": "77", "job_dir": str(remote),
        "workdir": str(remote), "run_dir": f"{remote}/runs/77", "log": f"{remote}/ddpimg-77.out",
        "submitted_utc": "2026-11-29T00:00:00Z", "site": "nscluster", "command": ["train"],
        "local_dir": str(local),
    }  # fmt: skip
    state = tmp_path / "state" / "ddpimg" / "remote-runs.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"version": 1, "runs": [entry]}))
    before = set(tmp_path.rglob("*"))
    followed = run(
        ddpimg_cmd("follow", "mnist-77", "--interval", "0.2"), laptop, cwd=tmp_path, check=False
    )
    assert followed.returncode == 1, followed.stderr
    shown = followed.stdout
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", shown + followed.stderr)
    assert (
        "mnist-77: FAILED (exit 5:0): the run failed\\x1b[31m (exit 5): \\x1b]0;owned\\x07$(touch"
        in shown
    )
    assert "  | \\x1b[2Jcleared" in shown
    assert f"  | `touch {pwned}`" in shown
    fetched = run(ddpimg_cmd("fetch", "mnist-77"), laptop, cwd=tmp_path, check=False)
    assert fetched.returncode == 0, fetched.stderr
    assert "skipped what login-hostile sent unasked: '../outside.txt'" in fetched.stderr
    written = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert written == [
        "$(touch${IFS}PWNED).png",
        "ddpimg-77.out",
        "manifest.json",
        "wandb/run/ok.txt",
    ]
    assert not any(p.is_symlink() for p in local.rglob("*"))
    # Outside the run's directory: nothing but that directory, and the state file's lock.
    after = {p for p in tmp_path.rglob("*") if local not in p.parents}
    lock = state.with_name(state.name + ".lock")
    assert before <= after
    assert after - before <= {tmp_path / "runs", local, lock}
    assert not [p for p in (pwned, canary, tmp_path / "escape.txt") if p.exists()]


SWEEP_SCRIPT = """\
# A user's own loop whose learning rate is on its command line (--lr), logging its loss and
# an evaluation through ddpimg's small API.
import argparse, torch, torch.distributed as dist
import ddpimg

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("steps", type=int)
args = parser.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1, bias=False))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
weights = torch.tensor([1.0, -2.0, 0.5, 3.0])
for step in range(1, args.steps + 1):
    inputs = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
    loss = ((model(inputs).squeeze(1) - inputs @ weights) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    ddpimg.log(step, loss=loss.item())
ddpimg.log(args.steps, kind="eval", loss=loss.item())
if dist.get_rank() == 0:
    print(f"user script: lr {args.lr}, final loss {loss.item():.6f}")
"""


def test_a_scripts_sweep_submitted_followed_to_its_verdict_fetched_and_cancelled(
    login: SshLogin, laptop: dict[str, str], cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """One array of two points, each the user's script with its {lr}; followed in one table
    to the sweep's verdict, fetched point by point; a second one, held, cancelled whole."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train_lr.py").write_text(SWEEP_SCRIPT)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, capture_output=True, timeout=30)
    sweep = ["--nodes", "1", "--gpus-per-node", "1", "--sweep", "lr=0.05,0.01", "--max-parallel",
             "2", "--", "train", "--script", "train_lr.py", "--lr", "{lr}", "20"]  # fmt: skip
    out = start(
        ddpimg_cmd("submit", "--host", HOST, *JOB, "--follow", "--interval", "1", *sweep),
        laptop, root,
    )  # fmt: skip
    assert out.finish() == 0, "\n".join(out.lines)
    text = "\n".join(out.lines)
    job_id, name = out.wait_for(r"submitted job (\d+), run (train_lr-sweep-\d+) ").groups()
    said = [line for line in out.lines if line.startswith("ddpimg: ")]
    assert len(said) == len(set(said)), f"a line shown twice:\n{text}"
    assert f"following {name} (array job {job_id}, 2 points on login)" in text
    for lr in ("0.05", "0.01"):
        assert re.search(rf"{name}: lr={lr}: COMPLETED: the run completed: 20 steps", text), text
    assert re.search(rf"{name}: COMPLETED: 2/2 completed; best lr=0\.0(5|1) \(eval loss ", text)
    run(ddpimg_cmd("fetch", name), laptop, cwd=root, timeout=120)
    local = root / "runs" / name
    assert json.loads((local / "sweep.json").read_text())["command"] == [
        "--script", "train_lr.py", "--lr", "{lr}", "20"
    ]  # fmt: skip
    for index, lr in enumerate(("0.05", "0.01")):
        point = local / f"lr={lr}"
        assert json.loads((point / "manifest.json").read_text())["status"] == "completed"
        assert (
            f"user script: lr {lr}, final loss"
            in (point / f"ddpimg-{job_id}_{index}.out").read_text()
        )
    assert (local / "plot.png").is_file()
    rows = [json.loads(line) for line in
            run(ddpimg_cmd("runs", "--json"), laptop, cwd=root).stdout.splitlines()]  # fmt: skip
    assert [(r["name"], r["status"]) for r in rows] == [(name, "sweep of 2 points: 2/2 completed")]

    held = run(
        ddpimg_cmd("submit", "--host", HOST, *JOB, "--sbatch-option=--hold", *sweep),
        laptop, cwd=root, timeout=120,
    ).stdout.strip()  # fmt: skip
    run(ddpimg_cmd("cancel", held), laptop, cwd=root)
    array = held.rsplit("-", 1)[1]
    shown = run(["scontrol", "show", "job", "-o", array], cluster_env).stdout
    assert shown.count("JobState=CANCELLED") >= 1, shown
    assert "JobState=PENDING" not in shown, shown
