#!/bin/sh
# The image's self-check: the end of every build (containers/Dockerfile), `%test` of the
# Apptainer images, and `docker run IMAGE /opt/ddpimg/scripts/selfcheck.sh`. No GPU and no
# network needed; runs as any user on a read-only root. In the cpu flavour (the build-info
# file says which) it checks that flavour's promises too: no compiler, DeepSpeed's CPU op
# built in, torchvision without its compiled ops.
set -eu

fail() {
    echo "selfcheck: FAILED: $1" >&2
    exit 1
}

for command in train ddpimg python3 mksquashfs; do
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
import importlib.util
import json
import shutil
import sys

import deepspeed  # noqa: F401  (imports torch; no accelerator needed)
import mpi4py
import numpy  # noqa: F401
import torch
import torch.distributed as dist
import torchvision

mpi4py.rc.initialize = False  # no MPI_Init: the check must not need a launcher
from mpi4py import MPI

library = MPI.Get_library_version()
if "Open MPI" not in library:
    sys.exit(f"selfcheck: FAILED: mpi4py is linked to {library.splitlines()[0]!r}, not Open MPI")
# NCCL comes with torch's CUDA builds only.
if not (dist.is_gloo_available() and (dist.is_nccl_available() or torch.version.cuda is None)):
    sys.exit("selfcheck: FAILED: torch.distributed lacks gloo or nccl")
info = json.load(open("/etc/ddpimg/build-info.json", encoding="utf-8"))
if info["flavour"] == "cpu":
    # A container compiles nothing: no compiler to run, and DeepSpeed loads its built op
    # (installed_ops, for the CPU accelerator it was built for) instead of JIT-compiling it.
    compilers = [name for name in ("cc", "gcc", "c++", "g++") if shutil.which(name)]
    if compilers:
        sys.exit(f"selfcheck: FAILED: the cpu image has a compiler: {compilers}")
    from deepspeed.git_version_info import accelerator_name, installed_ops

    if accelerator_name != "cpu" or not installed_ops.get("deepspeed_shm_comm"):
        sys.exit(f"selfcheck: FAILED: DeepSpeed's shm op is not built in ({accelerator_name}: "
                 f"{installed_ops})")
    if importlib.util.find_spec("deepspeed.ops.comm.deepspeed_shm_comm_op") is None:
        sys.exit("selfcheck: FAILED: DeepSpeed's built shm op module is missing")
    # torchvision without its CUDA-linked ops (torchvision_cpu.py): what ddpimg uses works,
    # a compiled op raises torchvision's own error.
    torchvision.models.resnet18()
    torchvision.ops.StochasticDepth(0.1, "row")
    try:
        torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
    except RuntimeError as err:
        if "Couldn't load custom C++ ops" not in str(err):
            raise
    else:
        sys.exit("selfcheck: FAILED: torchvision's compiled nms ran in the cpu image")
# The wheel's metadata has no local label for PyPI's CUDA build ("2.14.1" vs "2.14.1+cu130").
if info["packages"]["torch"].split("+")[0] != torch.__version__.split("+")[0]:
    sys.exit(f"selfcheck: FAILED: build-info says torch {info['packages']['torch']}, "
             f"the image has {torch.__version__}")
print(f"selfcheck: torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"{library.splitlines()[0].strip()}")
EOF

ddpimg env --json --site local >/dev/null || fail "ddpimg env --json --site local failed"
echo "selfcheck: ok"
