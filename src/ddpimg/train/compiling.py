"""``--compile``: the model compiled in place with ``torch.compile``, and its compile time.

Each strategy compiles the module the loop calls (``Strategy.compile``) with
``nn.Module.compile``, which compiles in place: the module keeps its class and its
parameters' names, so its state dict has no ``_orig_mod.`` prefixes (what the
``torch.compile(model)`` wrapper adds) and checkpoints written with and without
``--compile`` load into each other.

torch.compile works lazily: the first forward and backward of each new input shape or mode
(training, evaluation) trace and compile, inside the step. ``CompileClock`` adds up the
wall time dynamo reports as compiling (its compile start and end callbacks, outermost
compile only: the lazy backward's included), so that the loop can report it apart and leave
it out of the throughput.
"""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

DEFAULT_BACKEND = "inductor"
# The C++ compiler inductor builds CPU kernels with when CXX does not name one
# (torch._inductor.config.cpp.cxx on Linux).
DEFAULT_CXX = "g++"


def check_compiler(backend: str, device_type: str, env: Mapping[str, str]) -> None:
    """DdpimgError when inductor would compile CPU kernels and finds no C++ compiler (it
    would otherwise fail inside the first step, on every rank, with a long traceback)."""
    if backend != DEFAULT_BACKEND or device_type != "cpu":
        return
    cxx = env.get("CXX") or DEFAULT_CXX
    if shutil.which(cxx, path=env.get("PATH")) is None:
        raise DdpimgError(
            f"--compile with inductor on the CPU needs a C++ compiler, and {cxx!r} "
            f"({'CXX' if env.get('CXX') else 'the default'}) is not on PATH",
            hint="install g++ (Debian: apt-get install g++), set CXX to one, or pass "
            "--compile-backend aot_eager (no generated kernels)",
        )


class CompileClock:
    """Seconds spent compiling since ``open``; ``take`` hands out what accrued since its
    last call, ``total_s`` all of it."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._taken_s = 0.0
        self._began: float | None = None
        self._callbacks: tuple[Callable[[Any], None], Callable[[Any], None]] | None = None

    def open(self) -> None:
        """Register with dynamo's compile callbacks (imports torch._dynamo)."""
        from torch._dynamo.callback import callback_handler

        self._callbacks = (self._start, self._end)
        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)

    def close(self) -> None:
        if self._callbacks is None:
            return
        from torch._dynamo.callback import callback_handler

        callback_handler.remove_start_callback(self._callbacks[0])
        callback_handler.remove_end_callback(self._callbacks[1])
        self._callbacks = None

    def _start(self, _: Any) -> None:
        self._began = time.perf_counter()

    def _end(self, _: Any) -> None:
        if self._began is not None:
            self.total_s += time.perf_counter() - self._began
            self._began = None

    def take(self) -> float:
        """The compile seconds since the previous ``take``."""
        fresh = self.total_s - self._taken_s
        self._taken_s = self.total_s
        return fresh
