"""GPU checks of the GPU flavour's libraries: `nox -s gpu-check` runs this inside the image.

1. torch sees every GPU the runtime passed in, and its CUDA build supports their architecture;
2. NCCL all-reduce across all of them (one process per GPU), checked for the right sum;
3. one bf16 training step on GPU 0: finite loss, the weights move.

Exit status 0 when all pass; one line per check on stdout. Needs at least one GPU.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import spawn

from ddpimg.hardware.compat import parse_arch_flags, runs_on

ALL_REDUCE_ELEMENTS = 1 << 24  # 64 MiB of float32: past NCCL's small-message paths


def check_devices() -> int:
    count = torch.cuda.device_count()
    if not torch.cuda.is_available() or count == 0:
        raise SystemExit("gpu_check: FAILED: torch.cuda.is_available() is False (no --nv/--gpus?)")
    built_for = torch._C._cuda_getArchFlags().split()
    sass, ptx = parse_arch_flags(built_for)
    for index in range(count):
        capability = torch.cuda.get_device_capability(index)
        name = torch.cuda.get_device_name(index)
        wanted = f"sm_{capability[0]}{capability[1]}"
        # The same rule as train's check (ddpimg.hardware.compat): SASS of the same major
        # version and a lower or equal minor runs (sm_86 code on an sm_89 GPU), or PTX JIT.
        how = runs_on(capability, sass, ptx)
        if how is None:
            raise SystemExit(
                f"gpu_check: FAILED: GPU {index} ({name}) is {wanted}; this torch "
                f"(CUDA {torch.version.cuda}) is built for {' '.join(built_for)}"
            )
        print(
            f"gpu_check: GPU {index}: {name} ({wanted}, runs {how}), "
            f"torch CUDA {torch.version.cuda}"
        )
    return count


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _all_reduce_worker(rank: int, world_size: int, port: int, errors: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    try:
        tensor = torch.full((ALL_REDUCE_ELEMENTS,), float(rank + 1), device="cuda")
        dist.all_reduce(tensor)
        expected = world_size * (world_size + 1) / 2
        if not torch.all(tensor == expected):
            errors.put(f"rank {rank}: all-reduce gave {tensor[0].item()}, expected {expected}")
    finally:
        dist.destroy_process_group()


def check_nccl(world_size: int) -> None:
    errors = multiprocessing.get_context("spawn").SimpleQueue()
    args = (world_size, _free_port(), errors)
    spawn(_all_reduce_worker, args=args, nprocs=world_size)  # type: ignore[no-untyped-call]
    if not errors.empty():
        raise SystemExit(f"gpu_check: FAILED: {errors.get()}")
    nccl = ".".join(str(part) for part in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
    print(f"gpu_check: NCCL {nccl} all-reduce over {world_size} GPU(s): correct")


def check_bf16_step() -> None:
    if not torch.cuda.is_bf16_supported():
        print("gpu_check: bf16 step skipped: this GPU has no bf16 support")
        return
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = torch.randn(64, 256, device="cuda")
    targets = torch.randint(0, 10, (64,), device="cuda")
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    if not torch.isfinite(loss):
        raise SystemExit(f"gpu_check: FAILED: bf16 loss is {loss.item()}")
    moved = sum(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    if moved == 0:
        raise SystemExit("gpu_check: FAILED: the bf16 step changed no weights")
    print(f"gpu_check: bf16 step: loss {loss.item():.4f}, {moved} tensors updated")


def main() -> int:
    count = check_devices()
    check_nccl(count)
    check_bf16_step()
    print("gpu_check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
