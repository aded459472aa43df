#!/usr/bin/env bash
# Print the Debian archive to fetch packages from: DDPIMG_DEBIAN_MIRROR, else the first
# (non-security) Debian archive this host's apt already uses, so that what the image sessions
# and tests/engines/install.sh fetch comes from where the host's own packages do.
set -euo pipefail

if [[ -n ${DDPIMG_DEBIAN_MIRROR:-} ]]; then
    echo "$DDPIMG_DEBIAN_MIRROR"
    exit 0
fi
uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }')
[[ -z $uri ]] && uri=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' \
    /etc/apt/sources.list 2>/dev/null)
if [[ -z $uri ]]; then
    echo "debian-mirror.sh: error: no Debian mirror found in /etc/apt" >&2
    echo "debian-mirror.sh: hint: set DDPIMG_DEBIAN_MIRROR to a Debian archive URL" >&2
    exit 1
fi
echo "$uri"
