"""From a laptop to a cluster over the user's own OpenSSH: ``ddpimg submit``, ``follow``,
``fetch``, ``cancel`` and the remote rows of ``ddpimg runs``.

One command, one connection: ``ssh`` (the user's client, config, agent and ``ProxyJump``)
opens a master connection, and every remote program of the command runs over it
(``ssh``: ControlMaster). What runs on the login node is a short POSIX shell program
(``programs``), sent base64-encoded so that the login shell (bash, tcsh, zsh) sees one
quoted word, with every value in it quoted for ``sh`` (``shlex.quote``); large inputs go on
its standard input as data, never as code.

The modules, each with one job:

- ``transport``: running a program on the other end, bounded in time and output;
  ``ssh``: that over OpenSSH, and what its failures mean;
- ``programs``: the shell programs the login node runs;
- ``tree``: the working tree to stage (what git would track, or ``--include``), by content;
  ``stage``: what the login node lacks of it, sent as one tar stream;
- ``login``: ddpimg on the login node and the site it resolves; ``submit``: the job rendered
  there by ``ddpimg sbatch`` (the same code as on the cluster) and submitted;
- ``jobinfo``: what Slurm says of a job; ``metrics_tail``: ``metrics.jsonl`` read a piece a
  poll, no line twice; ``follow``: the polling loop and its lines; ``verdict``: the
  manifest's word on how a run ended;
- ``fetch``: a run's files brought back, ``untar``: written without trusting the stream;
- ``state``: the laptop's file of the runs it submitted (``$XDG_STATE_HOME``).

Trust: nothing the other end sends reaches a local shell; the paths it names are checked
before anything is written and cannot leave the run's local directory; every answer is
bounded in size, and text from it is printed escaped (``shown``).
"""
