"""Sweeps: many runs in one command, each point of the sweep a run of its own.

``--sweep NAME=V1,V2`` (on ``train``, ``ddpimg sbatch`` and ``ddpimg submit``) defines the
points; each runs ``train`` with its values, in a directory of its own under the sweep's
(``runs/SWEEP/POINT``), and ``runs/SWEEP/sweep.json`` holds the definition and the points.
Here they run one after another or a few at once; on Slurm as one array job, a task a point
(``ddpimg.jobs.array``), followed from a laptop in one table (``ddpimg.remote.sweep_follow``).

The modules, each with one job:

- ``spec``: the definition (lists, seeded ranges) and its points, their names, the sweep's
  name and ``sweep.json``: pure;
- ``command``: each point's train command, spelled from ``train``'s parser, which the CLI
  hands over (this package stands below it), and every point checked by it;
- ``local``: the points run on this machine, what completed skipped;
- ``results``: a sweep's directory read back without trusting it, the counts and the best
  point; ``table``: its points as one table; ``listing``: a sweep among ``ddpimg runs``;
- ``plot``: ``ddpimg plot SWEEP``.
"""
