"""What ddpimg's runtime costs a user's script (``train --script``): a Hugging Face Trainer
script in the shape of run_clm.py (the tests' ``scripts/run_clm_style.py``, a tiny GPT-2 on
a generated text) on two local ranks, the Trainer's own ``train_steps_per_second``:

* with everything ddpimg installs (``train --nproc-per-node 2 --script``: the boot, the
  rendezvous check, the stall watch at its shortest heartbeat, ``--timeout 10``: 0.5 s; the
  optimizer hooks; the Hugging Face callback writing every step's line; the run record);
* without ddpimg at all: ``torchrun --nproc-per-node 2`` running the same script.

The ratio is taken within each round (the order of the two runs shuffled per round), its
median over the rounds is the figure. The tiny model makes a step short (tens of ms), so the
per-step costs weigh as much as they ever can. On a shared machine the rounds spread widely;
so the work ddpimg adds to the training thread is also timed alone, in this process: per
optimizer step the two optimizer hooks, the callback's ``on_step_end`` (its flag check) and
``on_log`` (a metrics.jsonl line), against the step time measured under torchrun.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from parts.common import HERE, PYTHON, Row, free_port, interleaved, spread

REPO = HERE.parent
HOOK_STEPS = 20_000
SCRIPT = REPO / "tests" / "integration" / "scripts" / "run_clm_style.py"
STEPS = 300
TIMEOUT_S = 600


def _data(folder: Path) -> Path:
    sys.path.insert(0, str(REPO))
    from tests.integration.hf_model import tiny_gpt2, write_text

    write_text(folder / "train.txt", 2000, seed=0)
    tiny_gpt2(folder / "model", folder / "train.txt")
    return folder


def _steps_per_s(data: Path, ddpimg: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-script-") as tmp:
        output = Path(tmp) / "output"
        args = [
            str(SCRIPT), "--model_name_or_path", str(data / "model"),
            "--train_file", str(data / "train.txt"), "--output_dir", str(output),
            "--do_train", "--per_device_train_batch_size", "4", "--max_steps", str(STEPS),
            "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
            "--use_cpu", "--ddp_backend", "gloo", "--seed", "0", "--disable_tqdm", "true",
        ]  # fmt: skip
        port = str(free_port())
        if ddpimg:
            train = [PYTHON, "-m", "ddpimg", "train", "--nproc-per-node", "2", "--timeout", "10"]
            command = [*train, "--out", str(Path(tmp) / "run"), "--script", *args]
        else:
            command = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                       "--master-port", port, *args]  # fmt: skip
        env = {"MASTER_PORT": port, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=dict(os.environ) | env,
            check=False,
            timeout=TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
            )
        results = json.loads((output / "train_results.json").read_text())
        return float(results["train_steps_per_second"])


def _added_us_per_step(folder: Path) -> float:
    """Microseconds the training thread spends in ddpimg per optimizer step (median of 5
    blocks of HOOK_STEPS steps)."""
    import statistics
    import time

    from transformers import TrainerControl, TrainerState, TrainingArguments

    from ddpimg.script.integrations.huggingface import DdpimgTrainerCallback
    from ddpimg.script.options import ScriptOptions
    from ddpimg.script.record import ScriptRecord
    from ddpimg.script.runtime import ScriptRuntime

    runtime = ScriptRuntime(ScriptOptions(out=str(folder)), rank=0, world_size=1)
    runtime.record = ScriptRecord.start(
        folder / "run", script=str(SCRIPT), args=[], run_info={}, world={}, options={},
        previous=None, env=os.environ,
    )  # fmt: skip
    args = TrainingArguments(output_dir=str(folder / "hf"), use_cpu=True, report_to="none")
    state, control = TrainerState(), TrainerControl()
    callback = DdpimgTrainerCallback(runtime)
    callback.on_train_begin(args, state, control)
    logs = {"loss": 2.5, "learning_rate": 1e-3, "grad_norm": 1.2, "epoch": 0.5}
    blocks = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(HOOK_STEPS):
            runtime.optimizer_step_begins()
            runtime.optimizer_step_ended()
            state.global_step += 1
            callback.on_step_end(args, state, control)
            callback.on_log(args, state, control, logs=logs)
        blocks.append((time.perf_counter() - began) / HOOK_STEPS * 1e6)
    runtime.record.finish("completed", 0)
    return statistics.median(blocks)


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-hf-") as tmp:
        data = _data(Path(tmp))
        added_us = _added_us_per_step(Path(tmp))
        rounds = interleaved(
            {
                "ddpimg": functools.partial(_steps_per_s, data, True),
                "torchrun": functools.partial(_steps_per_s, data, False),
            },
            repeats,
            "script runtime",
        )
    ratio = spread([r["ddpimg"] / r["torchrun"] for r in rounds])
    plain = spread([r["torchrun"] for r in rounds])["median"]
    rows: list[Row] = [
        (
            f"your own script: Hugging Face Trainer (run_clm-style, tiny GPT-2), 2 local ranks, "
            f"steps/s under train --script (watch at 0.5 s, hooks, callback, record) / under "
            f"plain torchrun ({repeats} rounds of {STEPS} steps; torchrun {plain:.1f} steps/s)",
            f"median {ratio['median']:.3f}x (min {ratio['min']:.3f}, max {ratio['max']:.3f})",
            ">= 0.99x (the runtime adds < 1 % to a step)",
        ),
        (
            "your own script: ddpimg's work on the training thread per optimizer step (two "
            "optimizer hooks, the Hugging Face callback's step check and metrics line), "
            f"against that script's step under torchrun ({1e6 / plain:,.0f} us)",
            f"{added_us:.1f} us per step: {added_us * plain / 1e6:.2%} of a step",
            "< 1 %",
        ),
    ]
    return rows, {"steps": STEPS, "rounds": rounds, "added_us_per_step": added_us}
