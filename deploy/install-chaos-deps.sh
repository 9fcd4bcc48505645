#!/bin/sh
# Install the Debian packages the chaos harness needs (network namespaces, iptables
# partitions, libfaketime clock skew). Debian/Ubuntu only; needs root.
# Usage: sudo deploy/install-chaos-deps.sh   (or: make -C deploy chaos-deps)
set -eu
PKGS="iproute2 iptables faketime procps fuse3 gcc libc6-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "chaos deps: all present ($PKGS)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "chaos deps: missing:$missing — run as root" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $missing
echo "chaos deps: installed$missing"
