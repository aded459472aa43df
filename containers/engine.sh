#!/usr/bin/env bash
# A Docker engine and a base image on a machine that has no registry (CI, this project's
# development machines). Used by the image sessions (containers/imagebuild/engine.py).
#
#   engine.sh start       use the engine that answers `docker info`; if none does, start
#                         dockerd in the background and record its PID
#   engine.sh stop        stop the dockerd that `start` recorded, and only that one; an engine
#                         that was already running is left alone
#   engine.sh base TAG    make the base image TAG (Debian 12 minbase with Python 3.11) with
#                         debootstrap + `docker import`, unless TAG exists already
#
# State (PID file, dockerd log) lives in $DDPIMG_ENGINE_STATE (default /tmp/ddpimg-engine).
# Starting dockerd and debootstrap need root and the Debian packages docker.io and
# debootstrap (tests/engines/install.sh installs them).
set -euo pipefail

STATE=${DDPIMG_ENGINE_STATE:-/tmp/ddpimg-engine}
PIDFILE=$STATE/dockerd.pid
LOG=$STATE/dockerd.log
START_TIMEOUT_S=90
STOP_TIMEOUT_S=60
SUITE=bookworm
# ca-certificates: pip over HTTPS; python3-venv: the image's virtual environment.
BASE_PACKAGES=python3,python3-venv,ca-certificates

# The Debian mirror debootstrap fetches from: DDPIMG_DEBIAN_MIRROR, else the first Debian
# archive this host's apt already uses (so the base comes from where the host's packages do).
debian_mirror() {
    if [[ -n ${DDPIMG_DEBIAN_MIRROR:-} ]]; then
        echo "$DDPIMG_DEBIAN_MIRROR"
        return
    fi
    local uri
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }')
    [[ -z $uri ]] && uri=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' \
        /etc/apt/sources.list 2>/dev/null)
    [[ -n $uri ]] || die "no Debian mirror found in /etc/apt" \
        "set DDPIMG_DEBIAN_MIRROR to a Debian archive URL"
    echo "$uri"
}

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

base() {
    local tag=${1:?usage: engine.sh base TAG}
    answers || die "no Docker engine answers" "bash containers/engine.sh start"
    if docker image inspect "$tag" >/dev/null 2>&1; then
        echo "engine.sh: base image $tag exists; reusing it"
        return 0
    fi
    need_root "debootstrap" "base $tag"
    command -v debootstrap >/dev/null || die "debootstrap is not installed" \
        "bash tests/engines/install.sh (installs debootstrap)"
    local mirror rootfs
    mirror=$(debian_mirror)
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/ddpimg-rootfs.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "rm -rf '$rootfs'" EXIT
    echo "engine.sh: debootstrap $SUITE ($BASE_PACKAGES) from $mirror into $rootfs"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" "$mirror" \
        >"$rootfs.log" 2>&1 || {
        tail -n 20 "$rootfs.log" >&2
        die "debootstrap failed" "read $rootfs.log"
    }
    rm -f "$rootfs.log"
    # What a registry image would not carry: apt lists and caches, logs.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*
    tar --numeric-owner -C "$rootfs" -c . |
        docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
    echo "engine.sh: made base image $tag"
}

case ${1:-} in
start) start ;;
stop) stop ;;
base) base "${2:-}" ;;
*) die "unknown command '${1:-}'" "usage: engine.sh start | stop | base TAG" ;;
esac
