#!/bin/sh
# The image's self-check: the end of every build (containers/Dockerfile), `%test` of the
# Apptainer images, and `docker run IMAGE /opt/ddpimg/scripts/selfcheck.sh`. No GPU and no
# network needed; runs as any user on a read-only root.
set -eu

fail() {
    echo "selfcheck: FAILED: $1" >&2
    exit 1
}

for command in train ddpimg python3; do
    command -v "$command" >/dev/null 2>&1 || fail "$command is not on PATH ($PATH)"
done
[ "$(command -v python3)" = /opt/ddpimg/venv/bin/python3 ] ||
    fail "python3 on PATH is $(command -v python3), not the image's /opt/ddpimg/venv/bin/python3"
[ -s /etc/ddpimg/build-info.json ] || fail "/etc/ddpimg/build-info.json is missing or empty"

# One NCCL only: torch's own (site-packages/nvidia/nccl), none on the loader's path.
if ldconfig -p 2>/dev/null | grep -q 'libnccl\.so'; then
    fail "a system libnccl is on the loader path besides torch's: $(ldconfig -p | grep libnccl)"
fi

python3 -I - <<'EOF'
import json
import sys

import deepspeed  # noqa: F401  (imports torch; no accelerator needed)
import mpi4py
import numpy  # noqa: F401
import torch
import torch.distributed as dist
import torchvision  # noqa: F401

mpi4py.rc.initialize = False  # no MPI_Init: the check must not need a launcher
from mpi4py import MPI

library = MPI.Get_library_version()
if "Open MPI" not in library:
    sys.exit(f"selfcheck: FAILED: mpi4py is linked to {library.splitlines()[0]!r}, not Open MPI")
if not (dist.is_gloo_available() and dist.is_nccl_available()):
    sys.exit("selfcheck: FAILED: torch.distributed lacks gloo or nccl")
info = json.load(open("/etc/ddpimg/build-info.json", encoding="utf-8"))
# The wheel's metadata has no local label for PyPI's CUDA build ("2.14.1" vs "2.14.1+cu130").
if info["packages"]["torch"].split("+")[0] != torch.__version__.split("+")[0]:
    sys.exit(f"selfcheck: FAILED: build-info says torch {info['packages']['torch']}, "
             f"the image has {torch.__version__}")
print(f"selfcheck: torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"{library.splitlines()[0].strip()}")
EOF

ddpimg env --json --site local >/dev/null || fail "ddpimg env --json --site local failed"
echo "selfcheck: ok"
