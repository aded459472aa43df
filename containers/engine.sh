#!/usr/bin/env bash
# A Docker engine and a base image on a machine that has no registry (CI, this project's
# development machines). Used by the image sessions (containers/imagebuild/engine.py).
#
#   engine.sh start          use the engine that answers `docker info`; if none does, start
#                            dockerd in the background and record its PID
#   engine.sh stop           stop the dockerd that `start` recorded, and only that one; an
#                            engine that was already running is left alone
#   engine.sh emulator ARCH  let this machine run ARCH's programs (arm64 on an x86-64 host):
#                            register qemu-user with the kernel's binfmt_misc, with the flag
#                            that makes it work inside containers too, unless it is already
#   engine.sh base TAG [ARCH]
#                            make the base image TAG (Debian 12 minbase with Python 3.11) for
#                            ARCH (a Debian architecture; default: this machine's) with
#                            debootstrap + `docker load`, unless TAG exists already; a foreign
#                            ARCH runs under the emulator, and its image sets QEMU_CPU, the
#                            CPU qemu emulates for every program of it and of the images
#                            built from it (ignored where no qemu runs them)
#
# State (PID file, dockerd log) lives in $DDPIMG_ENGINE_STATE (default /tmp/ddpimg-engine).
# Starting dockerd, registering the emulator and debootstrap need root and the Debian
# packages docker.io, debootstrap and qemu-user-static (tests/engines/install.sh installs them).
set -euo pipefail

HERE=$(dirname "${BASH_SOURCE[0]}")
STATE=${DDPIMG_ENGINE_STATE:-/tmp/ddpimg-engine}
PIDFILE=$STATE/dockerd.pid
LOG=$STATE/dockerd.log
START_TIMEOUT_S=90
STOP_TIMEOUT_S=60
SUITE=bookworm
# ca-certificates: pip over HTTPS; python3-venv: the image's virtual environment.
BASE_PACKAGES=python3,python3-venv,ca-certificates
BINFMT=/proc/sys/fs/binfmt_misc
# Older qemu-user gives aarch64 programs the host's /proc/cpuinfo, on which `import torch`
# crashes (tests/engines/install.sh says why).
QEMU_MIN_VERSION=8.2

die() {
    echo "engine.sh: error: $1" >&2
    [[ $# -gt 1 ]] && echo "engine.sh: hint: $2" >&2
    exit 1
}

need_root() {
    ((EUID == 0)) || die "$1 needs root" "run as root (sudo bash containers/engine.sh $2)"
}

answers() {
    docker info >/dev/null 2>&1
}

recorded_pid() {
    # The PID we recorded, if that process still is a dockerd (PIDs get reused).
    [[ -f $PIDFILE ]] || return 1
    local pid
    pid=$(<"$PIDFILE")
    [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] || return 1
    echo "$pid"
}

start() {
    if answers; then
        echo "engine.sh: a Docker engine answers already; using it"
        return 0
    fi
    need_root "starting dockerd" start
    command -v dockerd >/dev/null || die "dockerd is not installed" \
        "bash tests/engines/install.sh (installs docker.io)"
    command -v docker >/dev/null || die "the docker client is not installed" \
        "bash tests/engines/install.sh (installs docker.io)"
    mkdir -p "$STATE"
    if pid=$(recorded_pid); then
        echo "engine.sh: dockerd $pid (ours) runs but does not answer yet; waiting"
    else
        # setsid: the daemon outlives this script and the nox session that called it.
        setsid dockerd >"$LOG" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$PIDFILE"
        echo "engine.sh: started dockerd (PID $pid, log $LOG)"
    fi
    local waited=0
    until answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE"
            tail -n 20 "$LOG" >&2 || true
            die "dockerd $pid exited during start-up" "read $LOG"
        fi
        ((waited++ < START_TIMEOUT_S)) || die "dockerd $pid does not answer after ${START_TIMEOUT_S} s" \
            "read $LOG; stop it with: bash containers/engine.sh stop"
        sleep 1
    done
    echo "engine.sh: dockerd $pid answers after ${waited} s"
}

stop() {
    local pid
    if ! pid=$(recorded_pid); then
        rm -f "$PIDFILE"
        echo "engine.sh: no dockerd started by engine.sh runs; nothing to stop"
        return 0
    fi
    kill -TERM "$pid"
    local waited=0
    while kill -0 "$pid" 2>/dev/null; do
        ((waited++ < STOP_TIMEOUT_S)) || die "dockerd $pid still runs ${STOP_TIMEOUT_S} s after SIGTERM" \
            "read $LOG"
        sleep 1
    done
    rm -f "$PIDFILE"
    echo "engine.sh: stopped dockerd $pid"
}

# Debian's name of an architecture -> qemu's.
qemu_arch() {
    case $1 in
    arm64) echo aarch64 ;;
    *) die "no emulator known for architecture '$1'" "choose arm64, or build on a $1 machine" ;;
    esac
}

# The CPU qemu emulates for ARCH. arm64: GH200's Grace is a Neoverse V2 (Armv9.0, SVE2 with
# 128-bit vectors), which qemu lacks; its neoverse-n2 has that ISA, so torch picks the
# kernels it runs on Grace (SVE128), and it emulates Python about a third faster than
# qemu's default `max` CPU (whose 2048-bit SVE torch does not use).
qemu_cpu() {
    case $1 in
    arm64) echo neoverse-n2 ;;
    esac
}

emulator() {
    local arch=${1:?usage: engine.sh emulator ARCH}
    if [[ $arch == "$(dpkg --print-architecture)" ]]; then
        echo "engine.sh: this machine runs $arch programs itself; no emulator needed"
        return 0
    fi
    local name entry
    name=qemu-$(qemu_arch "$arch")
    entry=$BINFMT/$name
    if [[ -e $entry ]] && grep -qx enabled "$entry" && grep -q '^flags: .*F' "$entry"; then
        echo "engine.sh: $name is registered with binfmt_misc already"
        return 0
    fi
    need_root "registering $name with binfmt_misc" "emulator $arch"
    local conf=/usr/share/qemu/binfmt.d/$name.conf interpreter version
    [[ -f $conf ]] || die "$conf is missing: qemu-user $QEMU_MIN_VERSION or newer is not installed" \
        "bash tests/engines/install.sh (installs qemu-user-static)"
    interpreter=$(readlink -f "$(cut -d: -f7 "$conf")")
    version=$("$interpreter" --version | sed -n 's/.* version \([0-9][0-9.]*\).*/\1/p;q')
    dpkg --compare-versions "${version:-0}" ge "$QEMU_MIN_VERSION" ||
        die "$interpreter is qemu ${version:-of unknown version}; $QEMU_MIN_VERSION or newer is needed" \
            "bash tests/engines/install.sh (installs qemu-user-static from backports)"
    [[ -e $BINFMT/register ]] || mount -t binfmt_misc binfmt_misc "$BINFMT"
    [[ -e $entry ]] && echo -1 >"$entry"
    cat "$conf" >"$BINFMT/register"
    echo "engine.sh: registered $name (qemu $version) with binfmt_misc"
}

# `docker load` of ROOTFS as one layer, with an image config naming its architecture (which
# `docker import` cannot: the engine labels every import with its own platform) and the
# environment ENV (a JSON list of "NAME=VALUE" strings).
load_rootfs() {
    local rootfs=$1 tag=$2 arch=$3 env=$4 work diff config created
    work=$(mktemp -d "${TMPDIR:-/tmp}/ddpimg-image.XXXXXX")
    tar --numeric-owner -C "$rootfs" -cf "$work/layer.tar" .
    diff=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
    created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    printf '{"architecture":"%s","os":"linux","created":"%s","config":{"Env":%s,"Cmd":["/bin/bash"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"%s","created_by":"containers/engine.sh base (debootstrap %s)"}]}' \
        "$arch" "$created" "$env" "$diff" "$created" "$SUITE" >"$work/config.json"
    config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
    mv "$work/config.json" "$work/$config.json"
    printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config" "$tag" \
        >"$work/manifest.json"
    tar -C "$work" -c manifest.json "$config.json" layer.tar | docker load >/dev/null
    rm -rf "$work"
}

base() {
    local tag=${1:?usage: engine.sh base TAG [ARCH]} arch=${2:-$(dpkg --print-architecture)}
    answers || die "no Docker engine answers" "bash containers/engine.sh start"
    local foreign=
    if [[ $arch != "$(dpkg --print-architecture)" ]]; then
        foreign=1
        emulator "$arch" # also for an existing base: builds from it run under the emulator
    fi
    if docker image inspect "$tag" >/dev/null 2>&1; then
        echo "engine.sh: base image $tag exists; reusing it"
        return 0
    fi
    need_root "debootstrap" "base $tag $arch"
    command -v debootstrap >/dev/null || die "debootstrap is not installed" \
        "bash tests/engines/install.sh (installs debootstrap)"
    local env='"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"'
    if [[ -n $foreign ]]; then
        export QEMU_CPU
        QEMU_CPU=$(qemu_cpu "$arch")
        env+=",\"QEMU_CPU=$QEMU_CPU\""
    fi
    local mirror rootfs
    mirror=$(bash "$HERE/debian-mirror.sh")
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/ddpimg-rootfs.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "rm -rf '$rootfs'" EXIT
    echo "engine.sh: debootstrap $SUITE $arch ($BASE_PACKAGES) from $mirror into $rootfs"
    debootstrap --arch="$arch" --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" \
        "$mirror" >"$rootfs.log" 2>&1 || {
        tail -n 20 "$rootfs.log" >&2
        die "debootstrap failed" "read $rootfs.log"
    }
    rm -f "$rootfs.log"
    # What a registry image would not carry: apt lists and caches, logs.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*
    load_rootfs "$rootfs" "$tag" "$arch" "[$env]"
    echo "engine.sh: made base image $tag ($arch)"
}

case ${1:-} in
start) start ;;
stop) stop ;;
emulator) emulator "${2:-}" ;;
base) base "${2:-}" "${3:-}" ;;
*) die "unknown command '${1:-}'" "usage: engine.sh start | stop | emulator ARCH | base TAG [ARCH]" ;;
esac
