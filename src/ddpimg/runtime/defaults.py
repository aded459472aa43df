"""Runtime defaults the command line shows in its help. It imports nothing, but as part of
the ``runtime`` package it loads ``runtime/__init__`` (torch-free): the CLI reads it only when
it builds a parser, never on ``ddpimg env``'s argparse-free path."""

# How long ranks wait for each other at the rendezvous and in a collective before the job
# fails with a message; long enough for a slow shared filesystem to load torch on every node.
DEFAULT_TIMEOUT_S = 600.0
