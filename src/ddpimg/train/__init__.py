"""The bundled trainers: ``run_training`` is what ``train`` calls once the runtime has
initialised torch.distributed. Importing this package does not import torch."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError, RankLostError

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.runtime.stall import StallWatch
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.outputs import RunRecorder
    from ddpimg.train.preemption import PreemptionWatch

__all__ = ["run_training"]


def run_training(
    config: TrainConfig,
    ctx: DistContext,
    preemption: PreemptionWatch | None = None,
    runs: Path | None = None,
) -> int:
    """Train ``config.trainer`` with ``config.strategy`` in the initialised world ``ctx``,
    continuing from a checkpoint as ``--resume`` says. ``runs``: the run has no ``--out``
    and takes a directory of its own under this root (``ddpimg.train.run_dir``).

    Returns 0 when the run completed, ``exitcodes.PREEMPTED`` when ``preemption`` stopped it
    after a checkpoint (manifest.json: status "preempted"). Errors propagate (a DdpimgError
    for user errors, to be reported as ``ddpimg: error:`` with ``exitcodes.for_error``) after rank 0
    recorded the failure and its exit status in manifest.json. With several ranks a stall
    watch (``ddpimg.runtime.stall``) follows the run: a collective that fails under this rank
    becomes a RankLostError naming the rank(s) it waited for.
    """
    from ddpimg import exitcodes
    from ddpimg.host import short_hostname
    from ddpimg.runtime.flight_recorder import TRACE_DIR, enable_flight_recorder
    from ddpimg.runtime.stall import open_watch
    from ddpimg.train import startup
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.checkpoint import resolve_resume
    from ddpimg.train.loop import Trainer
    from ddpimg.train.outputs import RunRecorder
    from ddpimg.train.pairing import check_pairing
    from ddpimg.train.preempted import Preempted
    from ddpimg.train.run_dir import own_run_directory
    from ddpimg.train.strategies import strategy_for
    from ddpimg.train.tasks import trainer_for

    trainer = trainer_for(config)
    strategy_spec = strategy_for(config)
    check_pairing(trainer, strategy_spec, config, ctx.device.type)
    if config.compile:
        from ddpimg.train.compiling import DEFAULT_BACKEND, check_compiler

        check_compiler(config.compile_backend or DEFAULT_BACKEND, ctx.device.type, os.environ)
    config = config.with_auto_precision(trainer.auto_precision(ctx.device.type))
    batch = BatchLayout.of(config, ctx.world_size)  # fails before anything is written
    if runs is not None:
        config = own_run_directory(
            config, batch.global_size, ctx, runs, env=os.environ, stream=sys.stderr
        )
        # Not known at init_process_group; torch reads it when NCCL's recorder first dumps.
        enable_flight_recorder(ctx.backend, str(config.out / TRACE_DIR))
    if config.memory_snapshot and ctx.device.type != "cuda":
        raise DdpimgError(
            f"--memory-snapshot records the CUDA caching allocator, and this run is on "
            f"{ctx.device.type}",
            hint="drop --memory-snapshot on the CPU; --profile alone traces CPU runs",
        )
    task = trainer.factory(config, ctx, batch)
    strategy = strategy_spec.factory(config, ctx, batch)
    watch = open_watch(ctx, short_hostname())
    recorder: RunRecorder | None = None
    stop: Preempted | None = None
    try:
        with _watching(watch):
            resume = resolve_resume(config, ctx, batch, sys.stderr, task.fingerprint())
            if ctx.is_main:
                recorder = RunRecorder.start(
                    config, batch, ctx, os.environ, stream=sys.stderr, resume=resume
                )
                if watch is not None:
                    watch.on_fatal = functools.partial(_record_failure, recorder)
            startup.mark("setup")
            progress = None if watch is None else watch.progress
            run = Trainer(
                config, ctx, task, strategy, recorder, batch=batch,
                resume=resume, preemption=preemption, progress=progress,
            )  # fmt: skip
            try:
                summary = run.run()
            except Preempted as preempted:
                stop = preempted
            _final_barrier(ctx)
        if watch is not None:
            _serve_until_the_others_end(watch)
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt):
            # A second Ctrl-C must not stop the manifest from recording the first.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if recorder is not None:
            _record_failure(recorder, err)
        raise
    if stop is not None:
        if recorder is not None:
            print(
                f"ddpimg: {stop}; exit status {exitcodes.PREEMPTED} (run again with "
                "--resume auto to continue)",
                file=sys.stderr,
                flush=True,
            )
            recorder.manifest["preemption"] = {
                "cause": stop.cause,
                "step": stop.step,
                "checkpoint": str(stop.checkpoint),
            }
            recorder.finish("preempted", exitcodes.PREEMPTED)
        return exitcodes.PREEMPTED
    if recorder is not None:
        recorder.summary(summary.to_json())
        recorder.finish("completed", 0)
        print(_where_it_went(recorder.out), file=sys.stderr, flush=True)
    return exitcodes.OK


def _final_barrier(ctx: DistContext) -> None:
    """Every rank meets here, under the stall watch, before rank 0 records how the run
    ended: a rank lost at the very end (killed after its last step) is then a lost rank,
    named, like one lost mid-run, and the record never says "completed" for a run whose
    launcher reports a rank killed. After it no rank uses the others' connections, so
    tearing the process group down cannot cut a peer off mid-operation. A preemption
    signal here changes nothing: the run's work and its last checkpoint are done."""
    if ctx.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def _where_it_went(out: Path) -> str:
    """The line a completed run ends with: where its record and checkpoints are."""
    from ddpimg.run_files import MANIFEST, METRICS
    from ddpimg.train.checkpoint.files import CHECKPOINTS

    checkpoints = out / CHECKPOINTS
    kept = sorted(path.name for path in checkpoints.glob("step-*")) if out.is_dir() else []
    saved = f"; checkpoints: {checkpoints} (newest {kept[-1]})" if kept else ""
    return f"ddpimg: completed; metrics: {out / METRICS}, manifest: {out / MANIFEST}{saved}"


@contextlib.contextmanager
def _watching(watch: StallWatch | None) -> Iterator[None]:
    """Run the block under ``watch`` (if any): an exception that is a collective failing
    under this rank comes out as the RankLostError that names the rank(s) it waited for."""
    from ddpimg.train.preempted import Preempted

    if watch is None:
        yield
        return
    with watch:
        try:
            yield
        except Preempted:
            raise
        except Exception as err:
            lost = watch.explain(err)
            if lost is None:
                _linger_if_host(watch)
                raise
            raise lost from err


def _serve_until_the_others_end(watch: StallWatch) -> None:
    """Rank 0 that serves the store, after the final barrier: the others publish their
    last record there as they leave it; wait for it (bounded), so that none finds the store
    gone on its way out."""
    from ddpimg.runtime.rendezvous import agent_store

    if watch.rank == 0 and not agent_store(os.environ):
        watch.linger(watch.limits.grace_s)


def _linger_if_host(watch: StallWatch) -> None:
    """Rank 0 that serves the store and failed on its own: the ranks that fail as it did
    must read that (exit status 1, as this one's), not find the store gone (a lost rank,
    5). A rank waiting for it in a collective reads it from the store within a heartbeat
    or two (``StallWatch``'s failure look); the store serves until the others have ended,
    bounded by the grace of a judgement."""
    from ddpimg.runtime.rendezvous import agent_store

    if watch.rank == 0 and not agent_store(os.environ):
        watch.linger(watch.limits.grace_s)


def _record_failure(recorder: RunRecorder, err: BaseException) -> None:
    """Rank 0's manifest.json of a failed run; for a lost rank also who and where
    (``rank_lost``: ranks, hosts, the verdict, the last valid checkpoint; ``rank_failed``
    when those ranks raised errors of their own)."""
    if isinstance(err, RankLostError):
        # rank_lost (exit status 5) is what a batch script requeues on; ranks that raised an
        # error of their own are a failed run (exit status 1), recorded as rank_failed.
        recorder.manifest["rank_failed" if err.raised else "rank_lost"] = err.details
    recorder.finish(*_failure(err))


def _failure(err: BaseException) -> tuple[str, int, str]:
    """Status, exit status and message that manifest.json records for a failed run."""
    from ddpimg import exitcodes
    from ddpimg.optional import missing_package

    code = exitcodes.for_error(err)
    if isinstance(err, KeyboardInterrupt):
        return "interrupted", code, "interrupted"
    err = missing_package(err) or err
    if isinstance(err, DdpimgError):
        return "failed", code, str(err)
    if isinstance(err, SystemExit):
        return "failed", code, f"exit {err.code}"
    return "failed", code, f"{type(err).__name__}: {err}"
