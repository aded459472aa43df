"""Where DeepSpeed's JIT-compiled ops go during the tests: one directory per interpreter.

DeepSpeed compiles its CPU communication op on first use (one to several minutes on 2 busy
cores) into TORCH_EXTENSIONS_DIR, and compiles it again whenever the directory was last used
with other include paths (another virtual environment) or another ninja (PATH with or
without the venv's): the default ``~/.cache/torch_extensions`` is shared by all of them.
tests/conftest.py points every test session at this directory (unless the variable is set),
so the unit, integration and multinode sessions of one run compile the op once between them.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

VARIABLE = "TORCH_EXTENSIONS_DIR"


def op_cache(prefix: str = sys.prefix) -> Path:
    key = hashlib.sha256(prefix.encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "ddpimg-tests" / "torch_extensions" / key
