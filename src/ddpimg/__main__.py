"""``python -m ddpimg``: the same as the ``ddpimg`` command."""

import sys

from ddpimg.cli import main

sys.exit(main())
