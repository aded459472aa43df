#!/usr/bin/env bash
# Install the Debian packages the test engines need, if any is missing (idempotent).
#
# Slurm and munge daemons are NOT started here and their system services are kept from
# starting during the install: the tests run a private cluster (tests/engines/slurm.py).
# Needs root only when something is missing.
set -euo pipefail

PACKAGES=(
    slurmctld slurmd slurm-client munge   # Slurm, for tests marked slurm / multinode
    openmpi-bin libopenmpi-dev            # mpirun for mpi4py (tests marked mpi)
    iproute2 procps                       # ip for the multinode namespaces; ps, kill
    nftables util-linux                   # multinode: eth0 packet filter; nsenter, unshare, setpriv
    g++                                   # DeepSpeed compiles its CPU ops on first use
    docker.io                             # dockerd for tests marked docker (containers/engine.sh starts it)
    podman runc fuse-overlayfs            # podman for tests marked podman (with podman-hpc from PyPI)
    debootstrap                           # the local base image: no registry to pull FROM
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [[ $status != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "install.sh: all engine packages present: ${PACKAGES[*]}"
    exit 0
fi

if ((EUID != 0)); then
    echo "install.sh: error: missing Debian packages: ${missing[*]}" >&2
    echo "install.sh: hint: run as root (sudo bash tests/engines/install.sh)," \
        "or: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi

# policy-rc.d exit status 101 tells Debian maintainer scripts not to start services.
# Only install it when none exists, and only for the duration of this script.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

echo "install.sh: installing: ${missing[*]}"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
echo "install.sh: installed: ${missing[*]}"
