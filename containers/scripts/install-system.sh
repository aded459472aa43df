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
#   install-system.sh lock      print the lock's lines of this base for FLAVOUR (`nox -s lock --
#                               apt` runs it in a throw-away container of the base): the
#                               runtime stage's package set, then, with the runtime's packages
#                               installed, the build stage's for each MPI4PY_BUILD
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
#
# Locked (APT_LOCK): the packages are those of containers/lock/apt/APT_LOCK-ARCH.txt, made by
# `nox -s lock -- apt` for this base, in APT_LOCK_DIR. Each line is "SECTION PACKAGE VERSION"
# and a section (runtime-FLAVOUR, build-FLAVOUR-MPI4PY_BUILD) lists every package the stage
# ends with, the base's own included. Before installing anything, the packages apt would end
# with are compared with the section: a Debian mirror serves one version of each package, and
# when it has moved on (a point release, a security update) or the base has, the build stops
# here, naming each package, the lock's version and the mirror's, and the lock command;
# afterwards the installed set is checked against the section again. Without APT_LOCK the
# mirror's versions of the day are installed (and the build record says so).
#
# What would differ between two builds of the same packages goes: apt's lists and caches,
# dpkg's and apt's logs (alternatives.log too), ldconfig's aux-cache (it records the files'
# inode numbers and times), and the timestamp-based .pyc files the packages' Python modules
# were compiled to (their headers hold the sources' times): pycs.py rewrites them as
# hash-checked ones (PEP 552), which hold the sources' hashes instead.
set -eu

stage=${1:-}
case $stage in
runtime | build | lock) ;;
*)
    echo "install-system.sh: error: unknown stage '$stage'" >&2
    echo "install-system.sh: hint: install-system.sh runtime|build|lock" >&2
    exit 2
    ;;
esac
here=$(dirname "$0")
lock_command="nox -s lock -- apt"

die() {
    echo "install-system.sh: error: $1" >&2
    [ $# -lt 2 ] || echo "install-system.sh: hint: $2" >&2
    exit 1
}

# The packages STAGE installs here (this base, FLAVOUR, CROSS_PLATFORM, MPI4PY_BUILD).
packages_of() {
    cross=
    [ "$1" = build ] && [ -n "${CROSS_PLATFORM:-}" ] && cross=1
    # Whether this stage compiles: every build stage but a cross one, and the gpu flavour's
    # runtime (DeepSpeed's JIT ops).
    compiler=1
    if [ -n "$cross" ] || { [ "$1" = runtime ] && [ "${FLAVOUR:-gpu}" = cpu ]; }; then
        compiler=
    fi
    list=
    [ -n "$cross" ] || list="ca-certificates openmpi-bin libibverbs1 ibverbs-providers librdmacm1 libgomp1 tini squashfs-tools"
    [ -z "$compiler" ] || list="$list g++"
    if ! command -v python3 >/dev/null 2>&1; then
        list="$list python3 python3-venv"
        [ -z "$compiler" ] || list="$list python3-dev"
    else
        python3 -c 'import ensurepip' 2>/dev/null || list="$list python3-venv"
        [ -z "$compiler" ] || python3 -c '
import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
' || list="$list python3-dev"
    fi
    if [ "$1" = build ] && [ -z "$cross" ] && [ "${MPI4PY_BUILD:-source}" = source ]; then
        list="$list libopenmpi-dev"
    fi
    echo "$list"
}

# The lock's section of STAGE.
section_of() {
    if [ "$1" = runtime ]; then
        echo "runtime-${FLAVOUR:-gpu}"
    else
        echo "build-${FLAVOUR:-gpu}-${MPI4PY_BUILD:-source}"
    fi
}

# "PACKAGE VERSION" of every installed package, sorted.
installed() {
    dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' | awk '$1 == "ii" { print $2, $3 }' | sort
}

# "PACKAGE VERSION" of every package once PACKAGES... are installed (apt's simulation), sorted.
planned() {
    # shellcheck disable=SC2068  # a word list on purpose
    apt-get install -s -y --no-install-recommends $@ >"$work/plan"
    installed >"$work/now"
    awk '
        FILENAME == ARGV[1] { version[$1] = $2; next }
        $1 == "Inst" { v = ($3 ~ /^\[/) ? $4 : $3; sub(/^\(/, "", v); version[$2] = v }
        $1 == "Remv" { delete version[$2] }
        END { for (name in version) print name, version[name] }
    ' "$work/now" "$work/plan" | sort
}

# Stop unless the sorted "PACKAGE VERSION" lines of file $1 are the lock's section $2.
check_against_lock() {
    awk -v section="$2" '$1 == section { print $2, $3 }' "$lock_file" | sort >"$work/locked"
    [ -s "$work/locked" ] || die "$lock_file has no section '$2'" \
        "make the lock of this base again: $lock_command"
    join -a 1 -a 2 -e '(none)' -o 0,1.2,2.2 "$work/locked" "$1" |
        awk '$2 != $3 { print }' >"$work/mismatch"
    [ -s "$work/mismatch" ] || return 0
    echo "install-system.sh: error: the packages differ from the lock $lock_file [$2]:" >&2
    while read -r name locked served; do
        echo "install-system.sh:   $name: the lock has $locked, $3 $served" >&2
    done <"$work/mismatch"
    die "the Debian mirror (or the base) has moved on since the lock was made" \
        "make the lock again with \`$lock_command\` (and commit it), or install from a snapshot of the archive of the lock's date"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DEBIAN_FRONTEND=noninteractive
# sort and join compare the same way whatever the base's locale.
export LC_ALL=C

if [ "$stage" = lock ]; then
    # One section per stage of this flavour: runtime, then build for each MPI4PY_BUILD with the
    # runtime's packages installed (the build stage starts from the runtime stage).
    apt-get update >/dev/null
    # shellcheck disable=SC2046  # a word list on purpose
    planned $(packages_of runtime) | sed "s/^/$(section_of runtime) /"
    # shellcheck disable=SC2046  # a word list on purpose
    apt-get install -y --no-install-recommends $(packages_of runtime) >/dev/null
    for build in source wheel; do
        # shellcheck disable=SC2046  # a word list on purpose
        planned $(MPI4PY_BUILD=$build packages_of build) |
            sed "s/^/$(MPI4PY_BUILD=$build section_of build) /"
    done
    exit 0
fi

packages=$(packages_of "$stage")
if [ -z "$packages" ]; then
    echo "install-system.sh: nothing to install"
    exit 0
fi

apt-get update
lock_file=
if [ -n "${APT_LOCK:-}" ]; then
    lock_file=${APT_LOCK_DIR:-/tmp/ddpimg-build/apt}/$APT_LOCK-$(dpkg --print-architecture).txt
    [ -f "$lock_file" ] || die "no Debian package lock $lock_file for this base" \
        "make it with \`$lock_command\` where the base and the mirror are reachable"
    # shellcheck disable=SC2086  # a word list on purpose
    planned $packages >"$work/planned"
    check_against_lock "$work/planned" "$(section_of "$stage")" "the mirror serves"
else
    echo "install-system.sh: no APT_LOCK: installing the mirror's versions of today (unlocked)"
fi
# shellcheck disable=SC2086  # a word list on purpose
apt-get install -y --no-install-recommends $packages
if [ -n "$lock_file" ]; then
    installed >"$work/installed"
    check_against_lock "$work/installed" "$(section_of "$stage")" "the image has"
fi
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
    /var/log/alternatives.log /var/cache/ldconfig/aux-cache
if command -v python3 >/dev/null 2>&1; then
    python3 "$here/pycs.py" rehash /usr
fi
