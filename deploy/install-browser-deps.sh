#!/bin/sh
# Install Debian's headless Chromium, which the web console's screenshot test drives
# (tests/integration/test_console.py; it skips when no chromium is on PATH). Debian/Ubuntu only;
# needs root. Usage: sudo deploy/install-browser-deps.sh   (make os-deps runs it as root)
set -eu
exec sh "$(dirname "$0")/install-debs.sh" "browser deps" --with-recommends chromium
