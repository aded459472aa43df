"""Run directories that nobody has to name: a run started without ``--out`` gets a directory of
its own under the runs root (``./runs``, or ``$DDPIMG_RUNS``, which a site profile may set in
its ``[env]``), named by the trainer or script and by the scheduler's job id where there is
one, else by the start time::

    runs/mnist-1234567          # Slurm job 1234567 (a requeued job keeps its id)
    runs/mnist-1234567_3        # task 3 of array job 1234567
    runs/my_script-20261129-031500
    runs/my_script-20261129-031500.2   # a second run started in the same second
    runs/latest -> my_script-20261129-031500

Which directory a run takes (``choose``, decided by rank 0 alone and told to the others):

- under a scheduler, the first run of the same job id and the same configuration that did
  not complete, so a requeued or relaunched job continues its own; else a new one;
- outside one, the newest run of the same configuration when it did not complete and no
  process holds it (``lock``), so the same command given again after a Ctrl-C or a crash
  continues it; else a new one;
- ``--resume none`` always starts a new one. A completed run is never entered again.

An explicit ``--out DIR`` keeps its own rules (``ddpimg.train.checkpoint.resume``): nothing
here touches it. ``names`` is pure; ``records`` reads runs without trusting them; ``latest``
keeps ``runs/latest`` and turns a run's name back into its directory for the commands that
read runs (``ddpimg plot``, ``sync``, ``export``, ``runs``).
"""
