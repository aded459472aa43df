"""--compile's pieces that need no compiled model: the C++ compiler check inductor needs on
the CPU, and the clock of compile time (what the loop leaves out of the throughput). The
compiled runs themselves: tests/integration/test_compile.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.train.compiling import CompileClock, check_compiler


def test_inductor_on_the_cpu_without_a_compiler_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-c++")
    with pytest.raises(DdpimgError, match=r"needs a C\+\+ compiler, and '.*no-such-c\+\+' \(CXX\)"):
        check_compiler("inductor", "cpu", {"CXX": missing, "PATH": os.environ["PATH"]})


def test_the_default_compiler_is_looked_up_on_path(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match=r"'g\+\+' \(the default\) is not on PATH"):
        check_compiler("inductor", "cpu", {"PATH": str(tmp_path)})


@pytest.mark.parametrize(("backend", "device"), [("aot_eager", "cpu"), ("inductor", "cuda")])
def test_backends_without_cpu_kernels_need_no_compiler(
    backend: str, device: str, tmp_path: Path
) -> None:
    check_compiler(backend, device, {"PATH": str(tmp_path)})


def test_a_compiler_on_path_passes(tmp_path: Path) -> None:
    compiler = tmp_path / "c++"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    check_compiler("inductor", "cpu", {"CXX": "c++", "PATH": str(tmp_path)})


def test_the_clock_counts_each_outermost_compile_once() -> None:
    """Dynamo's compile callbacks, as torch.compile runs them (a lazy backward compile inside
    a forward's is one compile): total_s adds up the outermost ones, take hands each
    second out once, and after close nothing is counted."""
    from torch._dynamo.callback import CallbackTrigger, callback_handler

    def compile_for(seconds: float, trigger: CallbackTrigger = CallbackTrigger.DYNAMO) -> None:
        with callback_handler.install_callbacks(trigger, "0/0"):
            time.sleep(seconds)

    clock = CompileClock()
    clock.open()
    try:
        with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0"):
            compile_for(0.05, CallbackTrigger.LAZY_BACKWARD)
            time.sleep(0.05)
        first = clock.take()
        assert first >= 0.1
        assert clock.take() == 0
        compile_for(0.05)
        assert 0.05 <= clock.take() < clock.total_s
    finally:
        clock.close()
    total = clock.total_s
    compile_for(0.01)
    assert clock.total_s == total


def test_train_refuses_compile_with_a_script(tmp_path: Path) -> None:
    script = tmp_path / "mine.py"
    script.write_text("print('ran')\n")
    # DDPIMG_KEEP_ENV: the PYTHONPATH of a worktree's tests survives train's clean environment.
    env = os.environ | {"DDPIMG_KEEP_ENV": "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "ddpimg", "train", "--compile", "--script", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "ddpimg: error: --compile compiles a bundled trainer's model" in proc.stderr
    assert "ran" not in proc.stdout
