#!/usr/bin/env bash
# Build the rafka node image (default rafka-node:local) with no image registry:
#
#   1. base   debootstrap --variant=minbase bookworm + python3 python3-venv iproute2 iptables
#             faketime procps ca-certificates            -> $CACHE/base-<key>.tar   (~1.5 min once)
#   2. deps   base + /opt/rafka/venv with rafka's runtime dependencies (wheels fetched by the
#             host's pip from PyPI, installed offline inside the chroot)  -> $CACHE/deps-<key>.tar
#   3. image  deps + the rafka wheel (--no-deps) + /usr/local/bin/rafka-entry + the libfaketime
#             shim of the harness (chaos_tests/backends/faketime_fix.c, host gcc; the netns and
#             local backends preload the same source), a smoke test of the preloaded
#             interpreter, then `docker import --change ...` with LABEL rafka.src=<hash of the
#             sources>
#
# Each stage is skipped when its cache (or, for 3, an image with the same label) exists, so a
# second run is a no-op. Needs root (debootstrap, chroot) and a Docker engine (DOCKER_HOST; see
# deploy/docker-engine.sh). Usage: deploy/build-image.sh [--force]
#
# Env: RAFKA_IMAGE (rafka-node:local), RAFKA_IMAGE_CACHE (/var/cache/rafka-image),
#      DEBIAN_MIRROR (http://deb.debian.org/debian), PIP (the repo's .venv/bin/pip).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${RAFKA_IMAGE:-rafka-node:local}
CACHE=${RAFKA_IMAGE_CACHE:-/var/cache/rafka-image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
INCLUDE=python3,python3-venv,iproute2,iptables,faketime,procps,ca-certificates
PIP=${PIP:-$ROOT/.venv/bin/pip}
[[ -x $PIP ]] || PIP="python3 -m pip"
DOCKER=${DOCKER_BIN:-$(command -v /usr/bin/docker || command -v docker || echo docker)}
VENV=/opt/rafka/venv
FORCE=0
[[ ${1:-} == --force ]] && FORCE=1

say() { echo "build-image: $*" >&2; }
sha() { sha256sum | cut -c1-16; }

[[ $(id -u) == 0 ]] || { say "needs root (debootstrap, chroot)"; exit 1; }
for tool in debootstrap tar chroot gcc; do
    command -v "$tool" >/dev/null || { say "$tool missing: apt-get install debootstrap gcc libc6-dev"; exit 1; }
done
"$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
    { say "no Docker engine at ${DOCKER_HOST:-default socket} (deploy/docker-engine.sh start)"; exit 1; }
mkdir -p "$CACHE"

# ------------------------------------------------------------------------ keys
BASE_KEY=$(echo "$SUITE $INCLUDE minbase" | sha)
BASE_TAR=$CACHE/base-$BASE_KEY.tar
DEPS=$(cd "$ROOT" && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))')
DEPS_KEY=$( { echo "$BASE_KEY layout-2"; echo "$DEPS"; } | sha)
DEPS_TAR=$CACHE/deps-$DEPS_KEY.tar
# every file that goes into the wheel (the packages of setup.py) + this script
SHIM_SRC=$ROOT/chaos_tests/backends/faketime_fix.c   # also hashed below (under chaos_tests)
SHIM=/usr/local/lib/rafka/faketime_fix.so
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
SRC_KEY=$( cd "$ROOT" && { echo "$DEPS_KEY"; cat pyproject.toml setup.py deploy/build-image.sh;
    git ls-files -co --exclude-standard -- rafka kraft metadata log broker client spark_source \
        chaos_tests security |
        grep -v -E '/tests/|\.pyc$' | sort | xargs sha256sum; } | sha)

if [[ $FORCE == 0 ]] &&
   [[ $("$DOCKER" image inspect -f '{{index .Config.Labels "rafka.src"}}' "$IMAGE" 2>/dev/null) == "$SRC_KEY" ]]; then
    say "$IMAGE is up to date (rafka.src=$SRC_KEY): nothing to do"
    exit 0
fi

WORK=$(mktemp -d "$CACHE/work.XXXXXX")
ROOTFS=$WORK/rootfs
cleanup() {
    # never rm -rf through a mount: unmount first, and --one-file-system as a second guard
    if mountpoint -q "$ROOTFS/proc" 2>/dev/null; then umount -l "$ROOTFS/proc" || true; fi
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

in_root() { chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"; }

# ------------------------------------------------------------------------ 1. base
if [[ ! -f $BASE_TAR ]]; then
    say "stage 1: debootstrap $SUITE (minbase + $INCLUDE) from $MIRROR — takes a few minutes"
    t0=$SECONDS
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -n 30 "$WORK/debootstrap.log" >&2; say "debootstrap failed"; exit 1; }
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
        "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/*
    tar -C "$ROOTFS" --numeric-owner -cf "$BASE_TAR.tmp" . && mv "$BASE_TAR.tmp" "$BASE_TAR"
    say "stage 1: $BASE_TAR ($(du -h "$BASE_TAR" | cut -f1)) in $((SECONDS - t0))s"
    rm -rf --one-file-system "$ROOTFS"
else
    say "stage 1: cached $BASE_TAR"
fi

# ------------------------------------------------------------------------ 2. deps
mkdir -p "$ROOTFS"
if [[ ! -f $DEPS_TAR ]]; then
    say "stage 2: venv $VENV with runtime deps: $(echo "$DEPS" | tr '\n' ' ')"
    t0=$SECONDS
    tar -C "$ROOTFS" -xf "$BASE_TAR"
    mkdir -p "$ROOTFS/tmp/wheels"
    # built/fetched by the host's pip (its index and certificate configuration); the host runs
    # CPython 3.11 on glibc like bookworm's python3, so the chroot installs them --no-index
    [[ $($PIP --version) == *"python 3.11"* ]] || say "warning: host pip is not CPython 3.11: $($PIP --version)"
    echo "$DEPS" | xargs $PIP wheel -q -w "$ROOTFS/tmp/wheels"
    in_root python3 -c 'import sys; assert sys.version_info >= (3, 11), sys.version'
    in_root python3 -m venv "$VENV"
    mapfile -t dep_list <<< "$DEPS"
    in_root "$VENV/bin/pip" install -q --no-index --find-links /tmp/wheels --disable-pip-version-check \
        "${dep_list[@]}"
    rm -rf "$ROOTFS/tmp/wheels" "$ROOTFS/root/.cache"
    tar -C "$ROOTFS" --numeric-owner -cf "$DEPS_TAR.tmp" . && mv "$DEPS_TAR.tmp" "$DEPS_TAR"
    say "stage 2: $DEPS_TAR ($(du -h "$DEPS_TAR" | cut -f1)) in $((SECONDS - t0))s"
else
    say "stage 2: cached $DEPS_TAR"
    tar -C "$ROOTFS" -xf "$DEPS_TAR"
fi

# ------------------------------------------------------------------------ 3. image
t0=$SECONDS
say "stage 3: rafka wheel from $ROOT"
mkdir -p "$WORK/dist"
$PIP wheel -q --no-deps -w "$WORK/dist" "$ROOT" >"$WORK/wheel.log" 2>&1 ||
    { tail -n 30 "$WORK/wheel.log" >&2; say "building the rafka wheel failed"; exit 1; }
wheel=$(ls "$WORK"/dist/rafka-*.whl)
cp "$wheel" "$ROOTFS/tmp/"
in_root "$VENV/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "/tmp/$(basename "$wheel")"
rm -f "$ROOTFS"/tmp/*.whl
# the namespace (setup.py package_dir: the card's folders install as rafka.<folder>) and the
# `rafka` console script must work in the image, not only in the repo's editable install
in_root "$VENV/bin/python" -c 'import rafka.chaos_tests.echo_node, rafka.cli, rafka.security.listener'
say "in the image: $(in_root "$VENV/bin/rafka" --version)"
# libfaketime 0.9.10 + DONT_FAKE_MONOTONIC=1 breaks two monotonic waits of CPython (see the C
# file): time.sleep fails with EINVAL, and the GIL hand-off (pthread_cond_timedwait on a
# CLOCK_MONOTONIC condvar) wakes late, so every thread switch costs milliseconds. The harness's
# shim, preloaded before libfaketime, bypasses both. Built with the host's gcc (same glibc 2.36
# as bookworm's).
mkdir -p "$ROOTFS/usr/local/lib/rafka"
gcc -O2 -shared -fPIC -o "$ROOTFS$SHIM" "$SHIM_SRC" -ldl
# smoke test with the image's preload (as in docker-compose.yml): time.sleep works, the wall
# clock follows the timestamp file, and trio.to_thread round trips (a GIL hand-off each way)
# do not stall. With the sleep-only shim the image used to have, 35-47 of 300 took over 20 ms
# (up to 400 ms; median still 0.1 ms), against none with this shim (max ~5 ms, loaded box):
# in the nodes pysyncobj's tick thread starved, the controller quorum re-elected every second
# or two, brokers took ~25 s to unfence and no acks=all produce completed within a campaign.
echo "+3600" > "$ROOTFS/tmp/smoke.faketime"
in_root env LD_PRELOAD="$SHIM $FAKETIME_LIB" FAKETIME_TIMESTAMP_FILE=/tmp/smoke.faketime \
    FAKETIME_NO_CACHE=1 DONT_FAKE_MONOTONIC=1 "$VENV/bin/python" - "$(date +%s)" <<'SMOKE' ||
import statistics, sys, time
import trio
time.sleep(0.01)
skew = time.time() - float(sys.argv[1])
assert 3500 < skew < 3700, f"wall clock not skewed by the timestamp file: {skew:+.0f}s"
async def main():
    lat = []
    for _ in range(300):
        t = time.perf_counter()
        await trio.to_thread.run_sync(lambda: None)
        lat.append(time.perf_counter() - t)
    return lat
lat = trio.run(main)
slow = sum(x > 0.020 for x in lat)
print(f"build-image: preload smoke test: time.sleep ok, wall clock +{skew:.0f}s, trio.to_thread "
      f"x{len(lat)}: median {statistics.median(lat) * 1e3:.2f} ms, max {max(lat) * 1e3:.1f} ms, "
      f"{slow} over 20 ms", file=sys.stderr)
assert slow <= 15, f"{slow} of {len(lat)} thread hand-offs took over 20 ms with the faketime preload"
SMOKE
    { say "the faketime preload is broken in the image (see above)"; exit 1; }
rm -f "$ROOTFS/tmp/smoke.faketime"
cat > "$ROOTFS/usr/local/bin/rafka-entry" <<'ENTRY'
#!/bin/bash
# Image entrypoint: run the node command; with RAFKA_LOG_FILE set, its output is also appended
# there (the harness reads node events from that file). Runs under docker-init (init: true),
# so the node is not PID 1 and gets SIGTERM on `docker stop`.
set -e
if [ -n "${RAFKA_LOG_FILE:-}" ]; then
    mkdir -p "$(dirname "$RAFKA_LOG_FILE")"
    exec > >(exec tee -a "$RAFKA_LOG_FILE") 2>&1
fi
exec "$@"
ENTRY
chmod 755 "$ROOTFS/usr/local/bin/rafka-entry"
mkdir -p "$ROOTFS/etc/rafka" "$ROOTFS/var/lib/rafka" "$ROOTFS/var/log/rafka" "$ROOTFS/var/lib/rafka-clock"
: > "$ROOTFS/etc/resolv.conf"   # docker provides it; nodes never resolve outside names
version=$(in_root "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("rafka"))')

old_id=$("$DOCKER" image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
say "stage 3: docker import -> $IMAGE (rafka $version, rafka.src=$SRC_KEY)"
tar -C "$ROOTFS" --numeric-owner -c . | "$DOCKER" import \
    --change "ENV PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PYTHONUNBUFFERED=1' \
    --change 'WORKDIR /var/lib/rafka' \
    --change 'ENTRYPOINT ["/usr/local/bin/rafka-entry"]' \
    --change 'CMD ["rafka", "server", "--config", "/etc/rafka/node.toml"]' \
    --change 'EXPOSE 9092 19092' \
    --change "LABEL rafka.src=$SRC_KEY rafka.version=$version" \
    - "$IMAGE" >/dev/null
say "stage 3: done in $((SECONDS - t0))s: $("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$IMAGE")"
new_id=$("$DOCKER" image inspect -f '{{.Id}}' "$IMAGE")
if [[ -n $old_id && $old_id != "$new_id" ]]; then
    "$DOCKER" image rm "$old_id" >/dev/null 2>&1 && say "removed the previous image ${old_id:7:12}" || true
fi
