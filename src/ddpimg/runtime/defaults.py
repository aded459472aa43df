"""Runtime defaults the command line shows in its help. A leaf module: the CLI reads it
without importing the runtime."""

# How long ranks wait for each other at the rendezvous and in a collective before the job
# fails with a message; long enough for a slow shared filesystem to load torch on every node.
DEFAULT_TIMEOUT_S = 600.0
