#!/usr/bin/env bash
# A noisy neighbour: keep every CPU of this machine busy for as long as COMMAND runs, then
# stop. The test command must pass on a busy machine as on an idle one (no verdict by wall
# clock), and this is how to check it:
#
#   bash tests/engines/neighbour.sh nox -s tests
#   CI=true bash tests/engines/neighbour.sh bash .ci/run
#
# The neighbour is Debian's stress-ng (tests/engines/install.sh installs it): one worker per
# CPU at 100% load, at the same priority as the tests, cycling through its CPU methods
# (integer, floating point, memory-bound), so the tests get about half of each core. It is
# stopped by its PID when COMMAND ends, whatever its status, which this script exits with.
set -euo pipefail

if (($# == 0)); then
    echo "neighbour.sh: error: no command given" >&2
    echo "neighbour.sh: hint: bash tests/engines/neighbour.sh nox -s tests" >&2
    exit 2
fi
if ! command -v stress-ng >/dev/null; then
    bash "$(dirname "${BASH_SOURCE[0]}")/install.sh"
fi

cpus=$(nproc)
echo "neighbour.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $cpus CPUs"
stress-ng --cpu "$cpus" --cpu-load 100 --cpu-method all --quiet &
neighbour=$!
stop() {
    kill "$neighbour" 2>/dev/null || true
    wait "$neighbour" 2>/dev/null || true
}
trap stop EXIT
echo "neighbour.sh: stress-ng (pid $neighbour) keeps $cpus CPUs busy; load $(cut -d' ' -f1-3 /proc/loadavg)"
started=$SECONDS
status=0
"$@" || status=$?
echo "neighbour.sh: $* exited $status after $((SECONDS - started)) s beside the neighbour; load $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
