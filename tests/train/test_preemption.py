"""The preemption watch: the per-process flag and the ranks' agreement (1-rank group)."""

from __future__ import annotations

import os
import signal

from ddpimg.runtime.context import DistContext
from ddpimg.train.preemption import PreemptionWatch


def test_watch_records_the_first_signal_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    with PreemptionWatch(("USR2", "TERM"), check_every=1) as watch:
        assert watch.received is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert watch.received == "SIGTERM"
    assert signal.getsignal(signal.SIGUSR2) == before


def test_agreement_happens_at_check_steps_and_epoch_ends(ctx: DistContext) -> None:
    with PreemptionWatch(("USR2",), check_every=4) as watch:
        assert not watch.agreed(4, ctx.device)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert not watch.agreed(5, ctx.device)
        assert watch.agreed(6, ctx.device, epoch_end=True)
        assert watch.agreed(8, ctx.device)


def test_no_signals_never_stops(ctx: DistContext) -> None:
    watch = PreemptionWatch((), check_every=1)
    watch.received = "SIGTERM"
    assert not watch.agreed(1, ctx.device, epoch_end=True)
