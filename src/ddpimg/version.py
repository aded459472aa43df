"""ddpimg's version, in a leaf module: the package root re-exports it for users, and the
modules inside the package (the manifest's versions, the command line's ``--version``) read
it from here, so that no arrow runs back up to ``ddpimg/__init__.py``. Imports nothing."""

__version__ = "0.1.0"
