"""The GPU runbook (benchmarks/gpu_runbook.py): everything GPU-only that ddpimg claims, checked
and measured in three commands of at most nine minutes each on a lent GPU machine, and the
same plan on the CPU at toy sizes (``--dry-run``) in CI.

Modules: ``model`` (a step, its outcome, what a part's steps share), ``deadline`` (the
clock), ``commands`` (bounded subprocesses and the log), ``plan`` (THE table of steps), one
module per kind of step (``setup_steps``, ``check_steps``, ``matrix``, ``bench_steps``),
``report`` (JSON, markdown, the printed summary), ``wheels`` (what the device lacks, carried
as wheels, and the proof that the list is complete), and two scripts the steps run
(``probes``, ``hang``).
"""
