"""``python -m ddpimg.script.boot FILE [ARGS]``: what ``train --script`` execs into. It sets up
the script's runtime in this process, runs FILE as ``__main__`` (as ``python FILE`` would:
its directory first on the import path, ``sys.argv`` its own) and turns the way it ended into
the exit status and the manifest. ``ddpimg.script`` says what the script gets.

The order matters. The preemption signals are caught first (a signal during a slow start
must not kill a job that would be requeued). With more than one rank, rank 0 then hosts the
rendezvous store at ``MASTER_ADDR:MASTER_PORT`` (torchrun's agent hosts it under
``--nproc-per-node``) and every rank checks in, so that a rank that never starts is named
within ``--timeout`` instead of hanging the others in ``init_process_group``. The script's
own ``init_process_group`` later shares that store: torch opens rank 0's store with
``multi_tenant=True``, which reuses a server this process already runs on that port. Rank
0 decides where the run's record goes (without ``--out``, the run's own directory under the
runs root: ``ddpimg.runs``) and whether this run continues the one there, and tells the
others through the store (``runtime.store_decision``), so that every rank's framework
resumes from the same checkpoint or none does, and a refusal is every rank's one error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import runpy
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError, RankLostError, report
from ddpimg.run_files import MANIFEST, METRICS
from ddpimg.runtime.deepspeed_shm import release_buffers
from ddpimg.runtime.rendezvous import stopped_start
from ddpimg.runtime.store_decision import decided_by_rank0
from ddpimg.script import library_errors
from ddpimg.script.options import ScriptOptions
from ddpimg.script.runtime import ScriptPreempted, ScriptRuntime, activate

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

    from ddpimg.runtime.stall import StallWatch
    from ddpimg.script.record import ScriptRecord

RUN_KEY = "ddpimg/script/run"


def _world() -> tuple[int, int, int]:
    """(rank, world size, local world size) as the plan (or torchrun's agent) exported."""
    env = os.environ
    return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_WORLD_SIZE", "1"))


def _share_cpus(options: ScriptOptions, local_world_size: int) -> str:
    """``OMP_NUM_THREADS``, unless the user set it: this rank's CPU share
    (``ddpimg.runtime.cpus``), as a bundled trainer's rank gets. torch starts one thread per
    CPU of the machine in every process, so N ranks on a node would run N times as many
    threads as there are cores (torchrun sets 1 for that reason). Set before anything
    imports torch, which reads it once. Returns the value the script runs with."""
    from ddpimg.runtime.device import cpu_threads, rank_cpu_share

    if os.environ.get("OMP_NUM_THREADS"):
        return os.environ["OMP_NUM_THREADS"]
    # Workers of --nproc-per-node share their Slurm task; ranks started by srun each are one.
    rank_is_task = options.rank_is_task and "TORCHELASTIC_RUN_ID" not in os.environ
    threads = cpu_threads(rank_cpu_share(local_world_size, rank_is_task), os.environ)
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    return os.environ.get("OMP_NUM_THREADS", "")


def _publish_master(options: ScriptOptions) -> None:
    """Under mpirun without a host list: rank 0's address, learned over MPI in this process
    (the script's process is the MPI rank; an MPI_Init in ``train`` would have claimed it)."""
    from ddpimg.host import short_hostname
    from ddpimg.runtime.mpi_master import broadcast_master_address
    from ddpimg.site.load import load_profile

    profile = load_profile(options.site_path)
    os.environ["MASTER_ADDR"] = broadcast_master_address(profile, short_hostname())


def _meet(
    options: ScriptOptions, rank: int, world_size: int, stop: Callable[[], str | None]
) -> Store:
    """Open (rank 0: host) the rendezvous store and check in; bounded by ``--timeout``."""
    from ddpimg.host import short_hostname
    from ddpimg.runtime.rendezvous import agent_store, join, open_store

    agent = agent_store(os.environ)
    master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = open_store(master, port, rank, options.timeout_s, agent, stop=stop)
    hosts = list(options.run_info.get("hosts", []))
    per_node = world_size // len(hosts) if hosts and world_size % len(hosts) == 0 else 0
    join(
        store,
        rank=rank,
        world_size=world_size,
        hostname=short_hostname(),
        timeout_s=options.timeout_s,
        host_of_rank=lambda r: hosts[r // per_node] if per_node else None,
        stop=stop,
    )
    return store


def _job_key(options: ScriptOptions, store: Store, rank: int, world_size: int) -> bytes:
    """The job's key for ddpimg's records in the store (``runtime.store_auth``):
    ``DDPIMG_STORE_KEY``, else rank 0's, broadcast over a Gloo group of ddpimg's own."""
    from ddpimg.runtime.store_auth import broadcast_key, key_from_env

    key = key_from_env(os.environ)
    return key if key is not None else broadcast_key(store, rank, world_size, options.timeout_s)


def _own_directory(options: ScriptOptions, script: str, args: list[str]) -> Path:
    """Rank 0: the run's own directory under the runs root (no ``--out``; ``ddpimg.runs``):
    named after the script, continuing its earlier run of the same arguments as the rules
    say."""
    from ddpimg.runs.choose import choose_run_dir
    from ddpimg.runs.names import stem_of
    from ddpimg.script.record import same_script

    return choose_run_dir(
        Path(options.runs),
        stem_of(Path(script).stem),
        same_script(script, args),
        resume=options.resume,
        env=os.environ,
        stream=sys.stderr,
    )


def _watch(
    options: ScriptOptions, rank: int, world_size: int, key: bytes | None
) -> StallWatch | None:
    import torch

    from ddpimg.host import short_hostname
    from ddpimg.runtime.stall import watch_enabled, watch_store

    if key is None or not options.watch or not watch_enabled(os.environ, world_size):
        return None
    return watch_store(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        rank=rank,
        world_size=world_size,
        timeout_s=options.timeout_s,
        backend="nccl" if torch.cuda.is_available() else "gloo",
        host=short_hostname(),
        key=key,
        script=True,
    )


def _record(
    options: ScriptOptions, path: str, args: list[str], previous: Any, world: Mapping[str, Any]
) -> ScriptRecord:
    from ddpimg.script.record import ScriptRecord
    from ddpimg.trackers.settings import TrackerOptions

    shown = {
        "timeout": options.timeout_s,
        "watch": options.watch,
        "integrations": options.integrations,
        "preempt_signals": list(options.preempt_signals),
        "preempt_check_every": options.preempt_check_every,
        "resume": options.resume,
        "out": options.out,
        "log_to": list(options.log_to),
    }
    return ScriptRecord.start(
        Path(options.out),
        script=path,
        args=args,
        run_info=_run_info(options),
        world=world,
        options=shown,
        previous=previous,
        env=os.environ,
        log_to=options.log_to,
        tracker_options=TrackerOptions(**options.tracker_options),
    )


def _run_info(options: ScriptOptions) -> Mapping[str, Any]:
    """The launch plan for the manifest: ``train``'s, or under ``--nproc-per-node`` the
    worker's own (train was the node's launcher; torch's agent placed this worker)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return options.run_info
    from ddpimg.host import short_hostname
    from ddpimg.plan import build_plan

    try:
        return build_plan(os.environ, short_hostname(), site=options.site_path).to_json()
    except DdpimgError:
        return options.run_info


def _install_hooks(runtime: ScriptRuntime) -> None:
    from ddpimg.script import integrations

    integrations.watch_optimizer_steps(runtime)
    if runtime.options.integrations:
        integrations.attach_frameworks(runtime)


class Boot:
    """One script run in this process: ``start`` sets the runtime up, ``run`` runs the
    script and returns the exit status."""

    def __init__(self, options: ScriptOptions) -> None:
        self.options = options
        self.rank, self.world_size, self.local_world_size = _world()
        self.store: Store | None = None
        self.runtime: ScriptRuntime | None = None
        self._late: _LateSignals | None = None

    def _stop(self) -> str | None:
        """The preemption signal received so far, if any (the boot's waits look at it)."""
        return None if self.runtime is None else self.runtime.preemption.received

    def start(self, path: str, args: list[str]) -> ScriptRuntime:
        options = self.options
        runtime = ScriptRuntime(options, rank=self.rank, world_size=self.world_size)
        runtime.preemption.__enter__()  # the handlers stay until the script has ended
        activate(runtime)
        self.runtime = runtime
        threads = _share_cpus(options, self.local_world_size)
        if options.master_via_mpi and not os.environ.get("MASTER_ADDR"):
            _publish_master(options)
        key = None
        if self.world_size > 1:
            self.store = _meet(options, self.rank, self.world_size, self._stop)
            key = _job_key(options, self.store, self.rank, self.world_size)
            stopped_start(self._stop, self.rank)
        self._settle_run(runtime, path, args, key, threads)
        options = self.options
        watch = _watch(options, self.rank, self.world_size, key)
        if watch is not None:
            record = runtime.record
            if record is not None:
                watch.on_fatal = lambda error: _finish_lost(record, error)
            runtime.attach_watch(watch)
            watch.start()
        _install_hooks(runtime)
        return runtime

    def _settle_run(
        self, runtime: ScriptRuntime, path: str, args: list[str], key: bytes | None, threads: str
    ) -> None:
        """Where the run's record goes and whether the run continues the one there: rank 0
        decides (choosing the run's own directory without ``--out``) and starts the record,
        and every rank learns the outcome, an error included (``store_decision``)."""
        options = self.options

        def decide() -> str:
            from ddpimg.script.record import earlier_run

            out = options.out or str(_own_directory(options, path, args))
            previous = earlier_run(Path(out), path, options.resume)
            if options.record:
                world = {
                    "world_size": self.world_size,
                    "local_world_size": self.local_world_size,
                    "num_nodes": options.run_info.get("num_nodes"),
                    "omp_num_threads": threads,
                }
                chosen = dataclasses.replace(options, out=out)
                runtime.record = _record(chosen, path, args, previous, world)
            return json.dumps({"out": out, "continuing": previous is not None})

        if self.store is None or key is None:
            text = decide()  # one process: no other rank to tell
        else:
            text = decided_by_rank0(
                self.store, RUN_KEY, key, rank=self.rank, world_size=self.world_size,
                timeout_s=options.timeout_s, decide=decide, stop=self._stop,
            )  # fmt: skip
        decision = json.loads(text)  # sealed with the job's key: rank 0 wrote it
        self.options = runtime.options = dataclasses.replace(options, out=decision["out"])
        runtime.continuing = bool(decision["continuing"])

    def run(self, path: str, args: list[str]) -> int:
        runtime = self.runtime
        if runtime is None:
            raise RuntimeError("Boot.start must run first")
        sys.argv = [path, *args]
        # As `python FILE` would have it: the script's directory first on the import path.
        sys.path[0] = os.path.dirname(os.path.abspath(path))
        try:
            return self._outcome(runtime, path)
        finally:
            # Ignored, not handled, from here to the end: the interpreter puts back the
            # default action (death) of a signal with a handler as it shuts down, and a
            # launcher that saw another rank end first signals this one then.
            for sig in runtime.preemption.signals:
                signal.signal(sig, signal.SIG_IGN)
            # DeepSpeed's CPU op leaves each rank's all-reduce segment in /dev/shm (69 MB,
            # ddpimg.runtime.deepspeed_shm). Every rank mapped every other's inside its
            # init_distributed, so once the script is over this rank's name is not needed.
            with contextlib.suppress(OSError):
                release_buffers(self.rank)

    def _outcome(self, runtime: ScriptRuntime, path: str) -> int:
        """Run the script at ``path``; how it ended, as this rank's exit status."""
        try:
            try:
                runtime.begin_script()
                runpy.run_path(path, run_name="__main__")
            finally:
                # The script is over, whichever way: a preemption signal from now on (the
                # launcher stopping this worker because another one failed, or a job near
                # its time limit) must not turn this ending into another, half recorded.
                self._late = _LateSignals(runtime.preemption.signals)
        except ScriptPreempted as stop:
            if stop.checkpoint is None:
                # Nothing acted on it: no collective agreed that every rank stops.
                lost = self._lost_instead(runtime, stop.cause)
                if lost is not None:
                    return lost
            where = (
                f"checkpoint {stop.checkpoint}"
                if stop.checkpoint
                else "no checkpoint (nothing in the script acts on preemption: see "
                "docs/script-api.md)"
            )
            return self._preempted(runtime, stop.cause, stop.step, where, stop.checkpoint)
        except SystemExit as done:
            return self._exited(runtime, done)
        except KeyboardInterrupt:
            print("ddpimg: interrupted", file=sys.stderr, flush=True)
            return self._end(runtime, "interrupted", exitcodes.INTERRUPTED, "interrupted")
        except BaseException as err:
            return self._failed(runtime, err)
        return self._completed(runtime)

    # -- endings -----------------------------------------------------------------------------

    def _completed(self, runtime: ScriptRuntime) -> int:
        _release_process_group()
        record = runtime.record
        if record is not None:
            record.write(runtime.summary_record())
        status = self._end(runtime, "completed", exitcodes.OK)
        if record is not None:
            # The line a trainer's run ends with too: how it ended, where its record is.
            out = record.out
            print(
                f"ddpimg: completed; metrics: {out / METRICS}, manifest: {out / MANIFEST}",
                file=sys.stderr,
                flush=True,
            )
        return status

    def _exited(self, runtime: ScriptRuntime, done: SystemExit) -> int:
        code = done.code
        if code is None:
            return self._completed(runtime)
        if not isinstance(code, int):
            print(code, file=sys.stderr, flush=True)  # as the interpreter prints it
            return self._end(runtime, "failed", exitcodes.TRAINING_FAILED, str(code))
        if code == exitcodes.OK:
            return self._completed(runtime)
        if code == exitcodes.PREEMPTED:
            # ddpimg.preemption_requested() said stop (or the script's own handler did):
            # the script saved what it keeps.
            cause = runtime.preemption.received or "the script's own exit status 75"
            lost = self._lost_instead(runtime, cause)
            if lost is not None:
                return lost
            checkpoint = _last_checkpoint(runtime)
            where = f"checkpoint {checkpoint}" if checkpoint else "its own checkpoint"
            return self._preempted(runtime, cause, runtime.steps, where)
        return self._end(runtime, "failed", code, f"exit {code}")

    def _preempted(
        self,
        runtime: ScriptRuntime,
        cause: str,
        step: int,
        where: str,
        checkpoint: str | None = None,
    ) -> int:
        """``where``: what was saved, in words; ``checkpoint``: its path when ddpimg knows."""
        checkpoint = checkpoint or _last_checkpoint(runtime)
        if self.rank == 0:
            print(
                f"ddpimg: {cause}: the script stopped after step {step}, {where}; exit status "
                f"{exitcodes.PREEMPTED} (the same command continues the run)",
                file=sys.stderr,
                flush=True,
            )
        if runtime.record is not None:
            runtime.record.update(
                preemption={"cause": cause, "step": step, "checkpoint": checkpoint}
            )
        return self._end(runtime, "preempted", exitcodes.PREEMPTED)

    def _lost_instead(self, runtime: ScriptRuntime, cause: str) -> int | None:
        """A preemption signal ended the script: with the stall watch, the ranks' records
        say whether every rank stopped for it (None: a preemption) or one of them was lost
        and the signal only the launcher stopping the survivors (this rank's exit status
        as a lost rank's survivor)."""
        watch = runtime.watch
        lost = watch.preempted(cause) if watch is not None else None
        return None if lost is None else self._lost(runtime, lost)

    def _lost(self, runtime: ScriptRuntime, lost: RankLostError) -> int:
        report(lost)
        if runtime.record is not None:
            _finish_lost(runtime.record, lost)
        self._stop_watch(runtime)
        return exitcodes.for_error(lost)

    def _failed(self, runtime: ScriptRuntime, err: BaseException) -> int:
        watch = runtime.watch
        lost = watch.explain(err) if watch is not None and isinstance(err, Exception) else None
        if lost is not None:
            return self._lost(runtime, lost)
        err = library_errors.explained(err) or err
        if isinstance(err, DdpimgError):
            report(err)
        else:
            traceback.print_exception(err)
        return self._end(
            runtime, "failed", exitcodes.for_error(err), f"{type(err).__name__}: {err}"
        )

    def _end(
        self, runtime: ScriptRuntime, status: str, exit_status: int, error: str | None = None
    ) -> int:
        # Recorded first: the linger below may be cut short by the scheduler's SIGKILL.
        if runtime.record is not None:
            runtime.record_progress(final=True)
            runtime.record.finish(status, exit_status, error)
        if self.rank == 0 and runtime.watch is not None and _hosts_store():
            # Rank 0's store holds every rank's record: it stays until the others have read
            # how this rank ended (a rank that failed too must find this one failed, not the
            # store gone, which would read as a lost rank). After a failure only briefly: a
            # rank waiting for this one in a collective reads its failure within a few
            # heartbeats (the stall watch's failure look), or when this process's
            # connections close. A preemption signal now (the job at its time limit) ends
            # the wait: the ending is decided already.
            watch = runtime.watch
            late = self._late or _LateSignals(runtime.preemption.signals)
            limit = self.options.timeout_s if status == "completed" else watch.limits.grace_s
            watch.linger(limit, leave=late.arrived)
        self._stop_watch(runtime)
        sys.stdout.flush()
        sys.stderr.flush()
        return exit_status

    @staticmethod
    def _stop_watch(runtime: ScriptRuntime) -> None:
        if runtime.watch is not None:
            runtime.watch.stop()


class _LateSignals:
    """The preemption signals once the script is over: noted (``arrived``), never acted on.
    A job near its time limit may still get one on its way out; it must neither kill this
    process (a completed run would read as a failed step) nor turn the ending the script
    reached into another."""

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self.name: str | None = None
        for sig in signals:
            signal.signal(sig, self._note)

    def _note(self, signum: int, _frame: object) -> None:
        self.name = signal.Signals(signum).name

    def arrived(self) -> bool:
        return self.name is not None


def _last_checkpoint(runtime: ScriptRuntime) -> str | None:
    known = runtime.progress.checkpoint
    return None if known is None else known[0]


def _finish_lost(record: ScriptRecord, error: RankLostError) -> None:
    """The manifest of a run whose ranks gave up on another: ``rank_lost`` (a lost rank,
    exit status 5), or ``rank_failed`` when every rank named raised an error of its own
    (exit status 1, as theirs)."""
    record.update(**{"rank_failed" if error.raised else "rank_lost": error.details})
    record.finish("failed", exitcodes.for_error(error), str(error))


def _hosts_store() -> bool:
    """Whether this rank 0 serves the rendezvous store (torchrun's agent serves it under
    ``--nproc-per-node`` and outlives its workers)."""
    from ddpimg.runtime.rendezvous import agent_store

    return not agent_store(os.environ)


def _release_process_group() -> None:
    """Destroy the default process group a script that returned left behind. mpi4py (the
    MPI boot, a script's own) finalises MPI at exit, and that raced the backend's own
    threads: now and then a finished run aborted ("terminate called without an active
    exception", signal 6). Only after a normal return: after an error the peers may be
    gone, and tearing down could block."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if not argv:
        report("the script boot needs a FILE", hint="train --script my_script.py [ARGS]")
        return exitcodes.USAGE
    path, *args = argv
    try:
        options = ScriptOptions.pop_from(os.environ)
        boot = Boot(options)
        boot.start(path, args)
    except DdpimgError as err:
        return exitcodes.tell(err)
    return boot.run(path, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
