#!/bin/sh
# Install Debian packages that are not installed yet (Debian/Ubuntu only; needs root for the
# install, not for the "all present" check). The project's install scripts call it:
#   deploy/install-debs.sh LABEL [--with-recommends] PKG...
set -eu
label=$1
shift
recommends="--no-install-recommends"
if [ "${1:-}" = "--with-recommends" ]; then
    recommends=""
    shift
fi
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "$label: all present ($*)"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "$label: missing:$missing — run as root on Debian/Ubuntu" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2086
apt-get install -y $recommends $missing
echo "$label: installed$missing"
