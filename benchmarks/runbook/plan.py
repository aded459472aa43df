"""THE plan: every step of the runbook, the command (part) it runs in, its goal, and how long
it is expected to take on an H100 and in the dry run on a 2-core CPU. A new check is one
entry here and one function beside the others.

The parts are sized for the device tool's 10-minute commands with a margin (9 minutes each):
1. setup, the checks (gpu tests, gpu-check, compatibility, doctor, NCCL with two ranks on the
   GPU, the flight recorder) and the two-rank training cells;
2. the one-rank matrix (72 cells: every trainer x strategy x precision);
3. the benchmark.

The real-data pipelines: ResNet-50 bf16 on generated JPEGs against synthetic images
(``bench-resnet50-files``) and GPT-124M on llm.c token shards against synthetic tokens
(``bench-gpt124m-shards``).
The GPU estimates are the seconds of the first GPU run (an H200, 2026-11-26,
benchmarks/results/h200-2026-11-26-runbook-part*.json) with a quarter added, where a step ran
there; the flight recorder's and the matrix cells' (``matrix.TRAINERS``) those of the second
(2026-11-27, h200-2026-11-27-*); the others (bench-mnist, bench-resnet50-files,
bench-gpt124m-shards) are still first guesses, and so are bench-resnet50's and
bench-gpt124m's since they search the largest batch that fits (about 30 s of trials, then
runs at several times the batch of 256 and 16 that took 60 s and 24 s). A matrix step's
estimate is that of one cell: its cells are budgeted one by one (bf16 first, fp16 last), so
a part that runs short leaves out the last cells, named in the table, rather than the whole
step.
"""

from __future__ import annotations

from runbook import bench_steps, check_steps, matrix, setup_steps
from runbook.model import Step

PARTS = (1, 2, 3)
EVERY_PART = PARTS

PLAN: tuple[Step, ...] = (
    Step("install", EVERY_PART, "the carried wheels install with no index (pip resolves against "
         "the device's own packages)", setup_steps.install, 36, 15, always=True),
    Step("device", EVERY_PART, "a CUDA GPU is visible; versions recorded", setup_steps.device,
         8, 5, always=True),
    Step("gpu-tests", (1,), "`pytest -m gpu`: every gpu test passes", check_steps.gpu_tests,
         30, 25),
    Step("gpu-check", (1,), "`nox -s gpu-check`'s checks: GPU seen, NCCL all-reduce, a bf16 step",
         check_steps.gpu_check, 20, 5),
    Step("compat", (1,), "ddpimg's compatibility rule accepts this GPU and driver",
         check_steps.compat, 8, 5),
    Step("doctor", (1,), "`ddpimg doctor`: all-reduce correct, NCCL's transport parsed from its "
         "own log", check_steps.doctor, 10, 8),
    Step("nccl-two-ranks", (1,), "find out whether NCCL runs two ranks on one GPU; pick the "
         "two-rank backend", check_steps.nccl_two_ranks, 15, 1),
    Step("doctor-two-ranks", (1,), "`ddpimg doctor --nproc-per-node 2` on the one GPU",
         check_steps.doctor_two_ranks, 16, 15),
    Step("flight-recorder", (1,), "a hung collective leaves every rank's flight record; "
         "torchfrtrace reads it", check_steps.flight_recorder, 75, 25),
    Step("matrix-two-ranks", (1,), matrix.GOAL + " (two ranks on the one GPU)",
         matrix.matrix_two_ranks, 60, 20),
    Step("matrix", (2,), matrix.GOAL, matrix.matrix, 60, 20),
    Step("bench-mnist", (3,), f"MNIST 5 epochs >= {bench_steps.MNIST_SPEEDUP:.0f}x faster than "
         "the tutorial-style loop, same final accuracy", bench_steps.bench_mnist, 120, 20),
    Step("bench-resnet50", (3,), f"ResNet-50 bf16 + channels_last, the largest batch that "
         f"fits: >= {bench_steps.RESNET_IMAGES_PER_S:,.0f} images/s on an H100, >= the "
         "reference loop", bench_steps.bench_resnet, 150, 25),
    Step("bench-resnet50-files", (3,), f"ResNet-50 bf16 on generated JPEG files >= "
         f"{bench_steps.FILES_VS_SYNTHETIC:.1f}x the images/s on synthetic images",
         bench_steps.bench_resnet_files, 150, 30),
    Step("bench-gpt124m", (3,), f"GPT-124M bf16, the largest batch that fits: MFU >= "
         f"{100 * bench_steps.GPT_MFU:.0f}%", bench_steps.bench_gpt, 75, 15),
    Step("bench-gpt124m-shards", (3,), f"GPT-124M bf16 on llm.c token shards >= "
         f"{bench_steps.SHARDS_VS_SYNTHETIC:.2f}x the tokens/s on synthetic tokens",
         bench_steps.bench_gpt_shards, 90, 20),
    Step("time-to-first-step", (3,), "time to the first step (by phase)",
         bench_steps.time_to_first_step, 120, 12),
)  # fmt: skip


def steps_of(part: int) -> list[Step]:
    return [step for step in PLAN if part in step.parts]
