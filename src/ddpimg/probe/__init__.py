"""``ddpimg site probe``: draft a site profile for a cluster ddpimg has never seen.

Run on a login node it reads what Slurm says (:mod:`~ddpimg.probe.slurm`) and which container
runtimes exist (:mod:`~ddpimg.probe.runtimes`); run as the tasks of a step on two or more
nodes (``srun -N2 --ntasks-per-node 1 ddpimg site probe --out draft.toml``) it also measures
each node (:mod:`~ddpimg.probe.node`: interfaces, node-local space, GPUs, CPU) and which
host-name form reaches another node over which interface, with a short TCP exchange between
the tasks (:mod:`~ddpimg.probe.network`; the tasks meet through files in a shared directory,
:mod:`~ddpimg.probe.meeting`). :mod:`~ddpimg.probe.draft` decides the profile's values from
what was found, each with its source: ``probed: DATE on NODES: how`` or ``unverified: WHY;
ask the site: QUESTION``; :mod:`~ddpimg.probe.writer` writes it as a profile TOML, which
``ddpimg doctor --site draft.toml`` on two nodes then proves.
"""
