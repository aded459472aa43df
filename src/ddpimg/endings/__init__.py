"""How a run ended, told one way whatever ended it and whatever launched it.

The exit status is what a job script acts on (``ddpimg sbatch``'s requeues on 75 and 5 and
stops on 1), so the same fault must give the same status, the same verdict line and the
same ``manifest.json`` every time. The pieces:

- ``signals``: a rank killed by a signal, named with the signal's usual cause (SIGKILL: the
  out-of-memory killer; SIGSEGV/SIGBUS: a crash in native code);
- ``workers``: the verdict of ``train --nproc-per-node``'s launcher from its workers' exits,
  in the order it saw them (a worker killed by a signal or one that failed on its own
  decides; the statuses that only follow from it, a lost rank named, a preemption signal
  the agent sent to the survivors, do not);
- ``reports``: what the other launchers print about a rank that died (torchrun's
  ``exitcode: -9``, srun's ``task 1: Killed``, Open MPI's ``exited on signal 9``), read back
  into the same words;
- ``matrix``: every ending, fault x phase x launcher, with its status, its verdict line and
  what the job script does with it: the table of docs/checkpoints-and-failures.md and the
  chaos test's expectations, from one source.

Pure: no torch, no process state.
"""
