#!/bin/sh
# Install the Debian packages the chaos harness needs (network namespaces, iptables
# partitions, libfaketime clock skew, FUSE and a compiler for the lose-unfsynced-writes and
# clock shims). Debian/Ubuntu only; needs root.
# Usage: sudo deploy/install-chaos-deps.sh   (or: make -C deploy chaos-deps)
set -eu
exec sh "$(dirname "$0")/install-debs.sh" "chaos deps" iproute2 iptables faketime procps fuse3 gcc libc6-dev
