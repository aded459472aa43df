"""DeepSpeed left to its own MPI discovery, run by test_mpi.py under ``mpirun`` on the
namespace nodes (not a test module).

``deepspeed.init_distributed(auto_mpi_discovery=True)`` without RANK / MASTER_ADDR in the
environment runs ``deepspeed.comm.comm.mpi_discovery`` (DeepSpeed 0.19.8): rank 0 takes the
first address of ``hostname -I`` as MASTER_ADDR and broadcasts it with mpi4py, then every
rank calls ``init_process_group``. Each rank prints one line saying what it used and how it
ended. Argument: the timeout in seconds.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta


def main() -> int:
    timeout_s = float(sys.argv[1])
    import deepspeed
    import torch.distributed as dist

    started = time.monotonic()
    try:
        deepspeed.init_distributed(
            dist_backend="gloo", auto_mpi_discovery=True, timeout=timedelta(seconds=timeout_s)
        )
        dist.barrier()
    except Exception as err:
        first_line = str(err).splitlines()[0] if str(err) else ""
        print(
            f"own discovery: rank {os.environ.get('RANK')} MASTER_ADDR="
            f"{os.environ.get('MASTER_ADDR')} failed after {time.monotonic() - started:.0f} s: "
            f"{type(err).__name__}: {first_line}",
            flush=True,
        )
        return 1
    print(
        f"own discovery: rank {dist.get_rank()} MASTER_ADDR={os.environ['MASTER_ADDR']} worked",
        flush=True,
    )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
