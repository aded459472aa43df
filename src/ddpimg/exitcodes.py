"""Exit statuses of ``train`` and ``ddpimg``, documented in README.md ("Exit statuses")."""

OK = 0
TRAINING_FAILED = 1  # an exception during training, e.g. a peer rank died
USAGE = 2  # bad flags, inconsistent launcher variables, bad profile, missing data
RENDEZVOUS_FAILED = 3  # ranks missing at the join deadline, master unreachable
CHECK_FAILED = 4  # `ddpimg doctor` found a problem
PREEMPTED = 75  # EX_TEMPFAIL: stopped by SIGUSR2/SIGTERM after a checkpoint; requeue and resume
