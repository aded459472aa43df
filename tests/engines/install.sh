#!/usr/bin/env bash
# Install the Debian packages the test engines need, if any is missing (idempotent).
#
# Slurm and munge daemons are NOT started here and their system services are kept from
# starting during the install: the tests run a private cluster (tests/engines/slurm.py).
# Nor is the arm64 emulator registered with the kernel: `containers/engine.sh emulator`
# does that when an image session needs it.
# Needs root only when something is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

PACKAGES=(
    slurmctld slurmd slurm-client munge   # Slurm, for tests marked slurm / multinode
    openmpi-bin libopenmpi-dev            # mpirun for mpi4py (tests marked mpi)
    iproute2 procps                       # ip for the multinode namespaces; ps, kill
    nftables util-linux                   # multinode: eth0 packet filter; nsenter, unshare, setpriv
    g++                                   # DeepSpeed compiles its CPU ops on first use
    squashfs-tools                        # add-ons packed and unpacked here (tests/addon, jobs)
    docker.io                             # dockerd for tests marked docker (containers/engine.sh starts it)
    squashfs-tools                        # sqfstar: nox -s sqsh, the squashfs export test (tests/containers)
    podman runc fuse-overlayfs            # podman for tests marked podman (with podman-hpc from PyPI)
    debootstrap                           # the local base image: no registry to pull FROM
    stress-ng                             # tests/engines/neighbour.sh: a noisy neighbour
    shellcheck                            # lints the rendered batch scripts (tests marked shellcheck)
    openssh-server openssh-client         # sshd on the login node of the laptop's tests (tests marked ssh)
)
# qemu-user runs the arm64 image's programs here (nox -s flavours). It must be 8.2 or newer:
# older ones hand aarch64 programs the host's own /proc/cpuinfo, on which torch's CPU
# detection (cpuinfo_arm_linux_init) dereferences NULL wherever /sys is mounted too, as in
# every container: `import torch` dies of SIGSEGV. Debian 12 has 7.2, its backports 10.0.
QEMU=qemu-user-static
QEMU_MIN_VERSION=1:8.2

qemu_is_recent() {
    local version
    version=$(dpkg-query -W -f='${Version}' "$QEMU" 2>/dev/null) &&
        dpkg --compare-versions "$version" ge "$QEMU_MIN_VERSION"
}

# From the release itself if it is recent enough, else from its backports, through a source
# list and package lists of its own: /etc/apt and the system's package lists stay as they are.
install_qemu() {
    local candidate
    candidate=$(apt-cache policy "$QEMU" | awk '$1 == "Candidate:" { print $2 }')
    if [[ -n $candidate && $candidate != "(none)" ]] &&
        dpkg --compare-versions "$candidate" ge "$QEMU_MIN_VERSION"; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$QEMU"
        return
    fi
    local codename mirror work
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:?}")
    mirror=$(bash containers/debian-mirror.sh)
    work=$(mktemp -d)
    mkdir -p "$work/lists/partial"
    echo "deb $mirror $codename-backports main" >"$work/sources.list"
    local apt=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$work/lists")
    echo "install.sh: installing $QEMU from $codename-backports (the release has $candidate)"
    apt-get "${apt[@]}" update
    DEBIAN_FRONTEND=noninteractive apt-get "${apt[@]}" install -y --no-install-recommends \
        -t "$codename-backports" "$QEMU"
    rm -rf "$work"
    # A registration made before (binfmt_misc's F flag) keeps the old emulator open.
    local registered=/proc/sys/fs/binfmt_misc/qemu-aarch64
    if [[ -e $registered ]]; then
        echo -1 >"$registered"
    fi
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [[ $status != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

qemu_is_recent || missing+=("$QEMU (>= $QEMU_MIN_VERSION)")

if ((${#missing[@]} == 0)); then
    echo "install.sh: all engine packages present: ${PACKAGES[*]} $QEMU"
    exit 0
fi

if ((EUID != 0)); then
    echo "install.sh: error: missing Debian packages: ${missing[*]}" >&2
    echo "install.sh: hint: run as root (sudo bash tests/engines/install.sh)" >&2
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
packages=()
for pkg in "${missing[@]}"; do
    [[ $pkg == "$QEMU "* ]] || packages+=("$pkg")
done
if ((${#packages[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
fi
qemu_is_recent || install_qemu
echo "install.sh: installed: ${missing[*]}"
