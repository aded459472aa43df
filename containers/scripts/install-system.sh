#!/bin/sh
# The image's system packages, run as root by containers/Dockerfile and ddp-standalone.def.
# The same list for both flavours and for the bases in use (Debian 12, Ubuntu 24.04,
# python:3.11-slim):
#
#   install-system.sh runtime   what the final image needs (FLAVOUR=cpu: no compiler)
#   install-system.sh build     runtime + g++ and Python's headers (DeepSpeed's pre-built ops,
#                               mpi4py) + the Open MPI headers mpi4py is compiled against
#                               (none with MPI4PY_BUILD=wheel: nothing is compiled against them);
#                               with CROSS_PLATFORM set (a build stage that installs another
#                               CPU's wheels, install-python.sh) only Python and its venv module:
#                               nothing runs there but pip
#
# runtime packages, and why:
#   openmpi-bin                  Open MPI, built by Debian/Ubuntu with Slurm and PMIx support:
#                                srun or the host's mpirun start the container's ranks (the
#                                hybrid model) and mpi4py is compiled against this library
#   libibverbs1 ibverbs-providers librdmacm1
#                                rdma-core's user space: NCCL finds InfiniBand through it
#   g++, Python headers          the gpu flavour: DeepSpeed JIT-compiles its ops on first use.
#                                Not in the cpu flavour, whose DeepSpeed op is built with the
#                                image (install-python.sh DS_CPU_OPS)
#   libgomp1                     OpenMP, which DeepSpeed's built CPU ops are linked against (g++
#                                brings it too, but the cpu flavour has no g++)
#   tini                         PID 1 under Docker: forwards signals, reaps torchrun's workers
#   squashfs-tools               mksquashfs packs `ddpimg addon build`'s add-ons where they are
#                                built, in the image itself (apptainer exec ddp.sif ...), and
#                                unsquashfs unpacks them for `ddpimg addon image` (docs/addons.md)
#   python3 python3-venv         only where the base has no Python of its own (CUDA bases)
# Never libnccl: torch's CUDA wheels carry NCCL, and a second libnccl on the loader path is
# how a job ends up mixing two versions.
set -eu

stage=${1:-}
case $stage in
runtime | build) ;;
*)
    echo "install-system.sh: error: unknown stage '$stage'" >&2
    echo "install-system.sh: hint: install-system.sh runtime|build" >&2
    exit 2
    ;;
esac

cross=
[ "$stage" = build ] && [ -n "${CROSS_PLATFORM:-}" ] && cross=1
# Whether this stage compiles: every build stage but a cross one, and the gpu flavour's
# runtime (DeepSpeed's JIT ops).
compiler=1
if [ -n "$cross" ] || { [ "$stage" = runtime ] && [ "${FLAVOUR:-gpu}" = cpu ]; }; then
    compiler=
fi
packages=
[ -n "$cross" ] || packages="ca-certificates openmpi-bin libibverbs1 ibverbs-providers librdmacm1 libgomp1 tini squashfs-tools"
[ -z "$compiler" ] || packages="$packages g++"
if ! command -v python3 >/dev/null 2>&1; then
    packages="$packages python3 python3-venv"
    [ -z "$compiler" ] || packages="$packages python3-dev"
else
    python3 -c 'import ensurepip' 2>/dev/null || packages="$packages python3-venv"
    [ -z "$compiler" ] || python3 -c '
import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
' || packages="$packages python3-dev"
fi
if [ "$stage" = build ] && [ -z "$cross" ] && [ "${MPI4PY_BUILD:-source}" = source ]; then
    packages="$packages libopenmpi-dev"
fi
if [ -z "$packages" ]; then
    echo "install-system.sh: nothing to install"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2086  # a word list on purpose
apt-get install -y --no-install-recommends $packages
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
