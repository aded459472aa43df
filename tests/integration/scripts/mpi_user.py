"""A user script that uses MPI itself (as Horovod, Lightning's MPI detection and DeepSpeed's
discovery do) and torch.distributed through env://: both must agree on every rank."""

import json
import os
import sys

import torch
import torch.distributed as dist
from mpi4py import MPI

comm = MPI.COMM_WORLD
dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
report = {
    "mpi_rank": comm.Get_rank(),
    "mpi_size": comm.Get_size(),
    "rank": dist.get_rank(),
    "world_size": dist.get_world_size(),
    "master_addr": os.environ["MASTER_ADDR"],
    "sum": total.item(),
    "mpi_sum": comm.allreduce(comm.Get_rank() + 1),
}
with open(os.path.join(sys.argv[1], f"rank{comm.Get_rank()}.json"), "w") as file:
    json.dump(report, file)
dist.destroy_process_group()
