"""A user's own training script under ``train --script FILE [ARGS]``: the runtime the bundled
trainers have, for code ddpimg did not write.

``train`` resolves the launch as for a trainer, exports the plan and replaces itself (exec,
same PID) with ``python -m ddpimg.script.boot FILE ARGS``. Exec, not a child process:

* signals reach exactly one process, the script's. Slurm delivers a step's signals to every
  process of the task (``scancel --signal``, ``--signal=USR2@300``); a parent passing them
  on too would deliver them twice, and a parent without a handler for a signal the script
  handles would die of it and take the step down;
* under ``mpirun`` the script's process is the MPI rank: its ``MPI_Init`` (mpi4py,
  Lightning's MPI detection, Horovod, DeepSpeed's discovery) finds the launcher's identity
  unused. Where rank 0 must publish the master address over MPI, the boot does it in that
  same process.

The boot (``boot``) then sets up, in the script's process, before its first line runs:

=====================  ===================================================  =================
what                   how                                                  off
=====================  ===================================================  =================
run record             rank 0 writes manifest.json and metrics.jsonl in     ``--no-record``
                       ``--out`` (``record``)
stall watch            ``ddpimg.runtime.stall`` with progress from torch's  ``--no-watch``,
                       optimizer step hooks, the frameworks' callbacks and  DDPIMG_STALL_WATCH=0
                       ``ddpimg.progress``: a rank that stops reporting is
                       named by every survivor, exit status 5 within
                       ``--timeout`` + 20 s, whatever timeout the script
                       gave its own process group
preemption             USR2 / TERM: checkpoint and exit 75 (``runtime``)    ``--preempt-signals
                                                                            none``
Hugging Face and       callbacks added to every ``Trainer``, resume of a    ``--no-integrations``
Lightning              requeued run (``integrations``)
rendezvous check       ranks check in on rank 0's store before the script   (always, >1 rank)
                       runs: a rank that never starts is named
=====================  ===================================================  =================

A script may also speak for itself through ``import ddpimg`` (``ddpimg.progress``,
``ddpimg.preemption_requested``, ``ddpimg.run_dir``, ``ddpimg.log``): three lines give a
plain PyTorch loop the preemption contract. A script that never imports ddpimg still gets
everything above.
"""
