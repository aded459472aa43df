"""follow on a (local, fake) login node, the job's life played poll by poll: the lines say
each change once, no line twice, through a requeue, a rewritten metrics file and dropped
connections; the end with the manifest's verdict and, on a failure, the log's last lines;
Ctrl-C detaches and never cancels."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.cli import remote_common
from ddpimg.remote import state
from ddpimg.remote.follow import Ended, Follower, Screen
from ddpimg.remote.state import RemoteRun
from ddpimg.remote.transport import Completed, ConnectionLost, RemoteError
from tests.remote.fakes import LocalLogin

INTERVAL_S = 0.5  # a poll's pause, unlike any pause of the backoff
JOB = (
    "JobId=7 JobName=ddpimg JobState={state} Reason={reason} NodeList={nodes} "
    "Restarts={restarts} ExitCode={code}"
)


def job(
    state: str, reason: str = "None", nodes: str = "(null)", restarts: int = 0, code: str = "0:0"
) -> str:
    return JOB.format(state=state, reason=reason, nodes=nodes, restarts=restarts, code=code)


def train(step: int) -> str:
    return (
        json.dumps(
            {
                "kind": "train",
                "step": step,
                "loss": 1 / step,
                "samples_per_s": 100.0,
                "elapsed_s": 0.5 * step,
            }
        )
        + "\n"
    )


class Life:
    """The remote run, changed by each of the follower's pauses (one poll a step)."""

    def __init__(self, login: LocalLogin, steps: list[Callable[[], None]]) -> None:
        self.login = login
        self.steps = steps
        self.slept: list[float] = []
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        polls = [s for s in self.slept if s == INTERVAL_S]
        if seconds == INTERVAL_S and len(polls) <= len(self.steps):
            self.steps[len(polls) - 1]()

    def clock(self) -> float:
        return self.now


@pytest.fixture
def login(tmp_path: Path) -> LocalLogin:
    return LocalLogin(tmp_path / "login")


def remote_run(login: LocalLogin, command: tuple[str, ...] = ("train",)) -> RemoteRun:
    work = login.home / "w"
    (work / "runs" / "7").mkdir(parents=True)
    return RemoteRun(
        name="mnist-7",
        host="login",
        job_id="7",
        job_dir=str(work),
        workdir=str(work),
        run_dir=f"{work}/runs/7",
        log=f"{work}/ddpimg-7.out",
        submitted_utc="x",
        site="local",
        command=command,
        local_dir="/nowhere",
    )


def write(path: Path, text: str) -> Callable[[], None]:
    return lambda: path.write_text(text)


def both(*actions: Callable[[], None]) -> Callable[[], None]:
    return lambda: [action() for action in actions] and None


def follow(
    login: LocalLogin, run: RemoteRun, life: Life, transport: object = None
) -> tuple[Ended, list[str]]:
    out = io.StringIO()
    follower = Follower(
        transport or login,
        run,
        Screen(out, False),
        reconnect=lambda: None,
        interval_s=INTERVAL_S,
        give_up_s=30.0,
        clock=life.clock,
        sleep=life.sleep,
    )
    ended = follower.follow()
    return ended, out.getvalue().splitlines()


def test_a_run_preempted_requeued_and_completed(login: LocalLogin) -> None:
    run = remote_run(login)
    rundir = Path(run.run_dir)
    metrics, manifest = rundir / "metrics.jsonl", rundir / "manifest.json"
    login.job(job("PENDING", "Priority"))
    preempted = {
        "status": "preempted",
        "exit_status": 75,
        "total_steps": 6,
        "preemption": {
            "cause": "SIGUSR2",
            "step": 3,
            "checkpoint": f"{rundir}/checkpoints/step-00000003",
        },
    }
    done = {"status": "completed", "exit_status": 0, "total_steps": 6}
    summary = json.dumps({"kind": "summary", "steps": 6, "final_loss": 1 / 6}) + "\n"
    life = Life(
        login,
        [
            both(
                lambda: login.job(job("RUNNING", nodes="node[1-2]")),
                write(manifest, json.dumps({"status": "running", "total_steps": 6})),
                write(metrics, train(1) + train(2)),
            ),
            write(metrics, train(1) + train(2) + train(3)),
            both(
                lambda: login.job(job("PENDING", "BeginTime", restarts=1)),
                write(manifest, json.dumps(preempted)),
            ),
            both(
                lambda: login.job(job("RUNNING", nodes="node[1-2]", restarts=1)),
                write(metrics, train(1) + train(2) + train(3)),
            ),  # rewritten: the same lines
            write(metrics, "".join(train(s) for s in range(1, 6))),
            both(
                lambda: login.job(job("COMPLETED", nodes="node[1-2]", restarts=1)),
                write(manifest, json.dumps(done)),
                write(metrics, "".join(train(s) for s in range(1, 7)) + summary),
            ),
        ],
    )
    ended, lines = follow(login, run, life)
    assert ended == Ended("COMPLETED", "completed", 6, 1 / 6, True)
    assert lines == [
        "ddpimg: mnist-7: PENDING (Priority)",
        "ddpimg: mnist-7: RUNNING on node[1-2]",
        "step 2/6  loss 0.5000  100 samples/s  0:02 left",
        "step 3/6  loss 0.3333  100 samples/s  0:01 left",
        "ddpimg: mnist-7: REQUEUED (restart 1): the run preempted (SIGUSR2) after step 3, "
        "checkpoint step-00000003 (exit 75)",
        "ddpimg: mnist-7: PENDING (restart 1) (BeginTime)",
        "ddpimg: mnist-7: RUNNING (restart 1) on node[1-2]",
        "step 5/6  loss 0.2000  100 samples/s  0:00 left",
        "step 6/6  loss 0.1667  100 samples/s  0:00 left",
        "ddpimg: mnist-7: COMPLETED (exit 0:0): the run completed: 6 steps, final loss 0.1667",
    ]


def test_a_failure_ends_with_the_verdict_and_the_logs_last_lines(login: LocalLogin) -> None:
    run = remote_run(login)
    (Path(run.run_dir) / "manifest.json").write_text(
        json.dumps(
            {
                "status": "failed",
                "exit_status": 5,
                "error": "rank 3 on node2 stopped reporting\n  hint: x",
            }
        )
    )
    Path(run.log).write_text("".join(f"line {n}\n" for n in range(30)) + "\x1b[31mlast\n")
    login.job(job("FAILED", nodes="node[1-2]", code="5:0"))
    ended, lines = follow(login, run, Life(login, []))
    assert (ended.state, ended.ok) == ("FAILED", False)
    verdict = "the run failed (exit 5): rank 3 on node2 stopped reporting"
    assert lines[0] == f"ddpimg: mnist-7: FAILED (exit 5:0): {verdict}"
    assert lines[1] == f"ddpimg: mnist-7: the last lines of {run.log}:"
    assert lines[2:] == [f"  | line {n}" for n in range(11, 30)] + ["  | \\x1b[31mlast"]


def test_a_job_slurm_forgot_ends_by_its_manifest(login: LocalLogin) -> None:
    run = remote_run(login, ("ddpimg", "doctor"))
    run = RemoteRun(**{**run.to_json(), "run_dir": "", "command": ("ddpimg", "doctor")})
    login.job("")
    ended, lines = follow(login, run, Life(login, []))
    assert (ended.state, ended.ok) == ("ENDED", False)
    said = "no run directory to read (not a train command)"
    assert lines[0] == f"ddpimg: mnist-7: ENDED: Slurm no longer knows job 7; {said}"


def test_a_train_run_slurm_forgot_ends_as_its_manifest_says(login: LocalLogin) -> None:
    """Slurm purges a finished job's record (MinJobAge, 300 s by default): following a run
    that completed before that is a success, by its manifest."""
    run = remote_run(login)
    (Path(run.run_dir) / "manifest.json").write_text(json.dumps({"status": "completed"}))
    login.job("")
    ended, lines = follow(login, run, Life(login, []))
    assert (ended.state, ended.status, ended.ok) == ("ENDED", "completed", True)
    assert lines[0].startswith("ddpimg: mnist-7: ENDED: Slurm no longer knows job 7; the run ")


def test_a_controller_that_does_not_answer_is_not_a_job_that_ended(login: LocalLogin) -> None:
    """scontrol failing for another reason than "Invalid job id" (slurmctld restarting)
    counts towards nothing: following goes on, says so once, and ends with the job."""
    run = remote_run(login)
    silent = login.fake / "silent"
    silent.write_text("")
    login.install(
        "scontrol",
        f"#!/bin/sh\nif [ -e {silent} ]; then\n"
        "  echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1\nfi\n"
        'cat "$HOME/.fake/job"\n',
    )
    login.job(job("COMPLETED", nodes="node1"))
    (Path(run.run_dir) / "manifest.json").write_text(json.dumps({"status": "completed"}))
    ended, lines = follow(login, run, Life(login, [lambda: None] * 5 + [silent.unlink]))
    assert (ended.state, ended.ok) == ("COMPLETED", True)
    said = "Slurm did not answer (slurm_load_jobs error: Unable to contact slurm controller)"
    assert lines.count(f"ddpimg: mnist-7: {said}; still following") == 1


def test_a_controller_silent_past_the_give_up_time_ends_following(login: LocalLogin) -> None:
    """Bounded: a scontrol that never answers ends following after give_up_s (30 s of the
    fake clock), saying the job may go on; never a job taken as ended."""
    login.install("scontrol", "#!/bin/sh\necho 'Socket timed out on send/recv' >&2\nexit 1\n")
    life = Life(login, [])
    with pytest.raises(RemoteError, match=r"login: Slurm did not answer for 30 s \(Socket timed"):
        follow(login, remote_run(login), life)
    assert 30 < life.now <= 32


def test_a_plain_scripts_steps_from_its_manifests_progress(login: LocalLogin) -> None:
    run = remote_run(login, ("train", "--script", "x.py"))
    manifest = Path(run.run_dir) / "manifest.json"
    login.job(job("RUNNING", nodes="node1"))
    manifest.write_text(
        json.dumps(
            {"status": "running", "progress": {"steps": 30, "run_steps": 10, "elapsed_s": 4.0}}
        )
    )
    life = Life(
        login,
        [
            lambda: None,  # no progress since: no line
            both(
                lambda: login.job(job("COMPLETED", nodes="node1")),
                write(
                    manifest,
                    json.dumps(
                        {
                            "status": "completed",
                            "progress": {"steps": 50, "run_steps": 30, "elapsed_s": 12.0},
                        }
                    ),
                ),
            ),
        ],
    )
    ended, lines = follow(login, run, life)
    assert lines[1:3] == ["step 30  2.50 steps/s", "step 50  2.50 steps/s"]
    assert (ended.steps, ended.ok) == (50, True)


class Dropping:
    """``login``, whose connection drops for ``drops`` calls from the ``at``-th on."""

    def __init__(self, login: LocalLogin, at: int, drops: int, retryable: bool = True) -> None:
        self.login, self.at, self.drops, self.retryable = login, at, drops, retryable
        self.calls = 0
        self.host = login.host

    def run(self, program: str, what: str, **options: object) -> Completed:
        self.calls += 1
        if self.at <= self.calls < self.at + self.drops:
            raise ConnectionLost(
                "ssh login: the connection failed (ssh: Connection refused)",
                retryable=self.retryable,
            )
        return self.login.run(program, what, **options)  # type: ignore[arg-type]


def test_a_dropped_connection_is_retried_with_backoff_and_no_line_twice(login: LocalLogin) -> None:
    run = remote_run(login)
    metrics = Path(run.run_dir) / "metrics.jsonl"
    login.job(job("RUNNING", nodes="node1"))
    metrics.write_text(train(1))
    life = Life(
        login,
        [
            write(metrics, train(1) + train(2)),
            both(
                lambda: login.job(job("COMPLETED", nodes="node1")),
                write(metrics, train(1) + train(2) + train(3)),
                write(metrics.with_name("manifest.json"), '{"status": "completed"}'),
            ),
        ],
    )
    ended, lines = follow(login, run, life, Dropping(login, at=4, drops=3))
    assert ended.ok
    assert lines == [
        "ddpimg: mnist-7: RUNNING on node1",
        "step 1  loss 1.0000  100 samples/s",
        "ddpimg: mnist-7: lost the connection to login (ssh login: the connection failed "
        "(ssh: Connection refused)); reconnecting",
        "ddpimg: mnist-7: reconnected to login after 7 s",
        "step 2  loss 0.5000  100 samples/s",
        "step 3  loss 0.3333  100 samples/s",
        "ddpimg: mnist-7: COMPLETED (exit 0:0): the run completed",
    ]
    assert [s for s in life.slept if s != INTERVAL_S] == [1.0, 2.0, 4.0]


def test_a_connection_that_does_not_come_back_gives_up_and_a_refusal_at_once(
    login: LocalLogin,
) -> None:
    run = remote_run(login)
    login.job(job("RUNNING"))
    with pytest.raises(ConnectionLost, match=r"login: no connection for 30 s") as found:
        follow(login, run, Life(login, []), Dropping(login, at=1, drops=100))
    assert "`ddpimg follow mnist-7` picks up where this stopped" in str(found.value)
    with pytest.raises(ConnectionLost, match="Connection refused"):
        follow(login, run, Life(login, []), Dropping(login, at=1, drops=1, retryable=False))


def test_ctrl_c_detaches_and_never_cancels(
    login: LocalLogin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = remote_run(login)
    path = tmp_path / "state.json"
    state.add(path, run)
    login.job(job("RUNNING"))

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    status = remote_common.follow(login, run, path, reconnect=lambda: None, sleep=interrupt)
    assert status == exitcodes.INTERRUPTED
    err = capsys.readouterr().err
    assert "ddpimg: stopped following mnist-7; job 7 goes on (ddpimg follow mnist-7 again" in err
    assert not (login.fake / "cancelled").exists()
    assert not any("scancel" in program for program in login.programs)


def test_an_evaluation_after_a_step_comes_after_its_line(login: LocalLogin) -> None:
    run = remote_run(login)
    rundir = Path(run.run_dir)
    (rundir / "manifest.json").write_text('{"status": "completed", "total_steps": 2}')
    (rundir / "metrics.jsonl").write_text(
        train(1) + train(2) + '{"kind": "eval", "epoch": 1, "loss": 0.5, "accuracy": 0.5}\n'
    )
    login.job(job("COMPLETED", nodes="node1"))
    _, lines = follow(login, run, Life(login, []))
    assert lines[:2] == [
        "step 2/2  loss 0.5000  100 samples/s  0:00 left",
        "eval  epoch 1  loss 0.5000  accuracy 50.00%",
    ]


def test_a_rank_srun_says_was_killed_is_named_last_in_ddpimgs_words(login: LocalLogin) -> None:
    """srun's own "task 1: Killed" reaches ddpimg's verdict: the last lines name the rank,
    its host, the signal and its usual cause (issue 54)."""
    run = remote_run(login)
    (Path(run.run_dir) / "manifest.json").write_text(
        json.dumps({"status": "failed", "exit_status": 5, "error": "rank 0 gave up"})
    )
    Path(run.log).write_text(
        "ddpimg: error: rank 0 (node1) gave up at step 7: rank 1 stopped reporting\n"
        "srun: error: node2: task 1: Killed\nsrun: Force Terminated StepId=7.0\n"
    )
    login.job(job("FAILED", nodes="node[1-2]", code="0:9"))
    ended, lines = follow(login, run, Life(login, []))
    assert not ended.ok
    assert lines[-2] == (
        "ddpimg: mnist-7: rank 1 (host node2) was killed by SIGKILL: most often the "
        "out-of-memory killer (the kernel's, or Slurm's for a step over its memory), else a "
        "stall watch's sentinel (its line above), scancel or the time limit (srun says so)"
    )
    assert lines[-1].startswith("ddpimg: mnist-7: hint: `dmesg | grep -i -e oom")
