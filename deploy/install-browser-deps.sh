#!/bin/sh
# Install Debian's headless Chromium, which the web console's screenshot test drives
# (tests/integration/test_console.py; it skips when no chromium is on PATH). Debian/Ubuntu only;
# needs root. Usage: sudo deploy/install-browser-deps.sh   (make os-deps runs it as root)
set -eu
PKGS="chromium"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "browser deps: all present ($PKGS)"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "browser deps: missing:$missing — run as root on Debian/Ubuntu" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2086
apt-get install -y $missing
echo "browser deps: installed$missing"
