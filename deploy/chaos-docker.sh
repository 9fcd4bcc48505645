#!/usr/bin/env bash
# Chaos campaigns on the docker backend, from nothing (root, Debian/Ubuntu):
#   1. apt-get install docker.io docker-compose debootstrap gcc libc6-dev fuse3 (only what is
#      missing; fuse3: the crash fault, whose FUSE mounts the node containers bind-mount)
#   2. start the private engine (deploy/docker-engine.sh) unless one answers at DOCKER_HOST
#   3. build rafka-node:local (deploy/build-image.sh; a no-op when up to date)
#   4. per seed of SEEDS, in turn: python -m rafka.chaos_tests run --backend docker ... into
#      RESULTS/seed<S> (or, without the campaign CLI, the backend's own tests: pytest
#      chaos_tests/tests/test_docker_backend.py); then a table of the seeds (seed, verdict,
#      anomalies per checker, faults, sends, seconds), printed and appended to TABLE
#   5. always (trap): compose down -v, and stop the engine if step 2 started it — which also
#      restores the host firewall (FORWARD policy, DOCKER* chains; see docker-engine.sh)
# Usage: make chaos-docker  |  make -C deploy chaos-docker  |  bash deploy/chaos-docker.sh
# Env: SEEDS ("1 2 3"; default: SEED, default 1), TIME_LIMIT (60), NEMESIS
#      (kill,pause,partition,clock,crash), KEEP_ENGINE=1 (leave a started engine running),
#      RESULTS (chaos-results/docker-<time>: one seed<S>/ folder per seed),
#      TABLE (chaos-results/docker-seeds.md: the table is appended there).
# Exit: 0 every seed valid; 1 a seed found anomalies; 2 a seed did not run (exit 2 or other).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
TIME_LIMIT=${TIME_LIMIT:-60}
SEEDS=${SEEDS:-${SEED:-1}}
NEMESIS=${NEMESIS:-kill,pause,partition,clock,crash}
RUN_DIR=$ROOT/deploy/.run
RESULTS=${RESULTS:-$ROOT/chaos-results/docker-$(date +%Y%m%d-%H%M%S)}
TABLE=${TABLE:-$ROOT/chaos-results/docker-seeds.md}
export DOCKER_HOST=${DOCKER_HOST:-unix:///run/rafka-docker.sock}
STARTED_ENGINE=0
T0=$SECONDS

say() { echo "chaos-docker [$((SECONDS - T0))s]: $*" >&2; }

[[ $(id -u) == 0 ]] || { say "needs root (docker engine, debootstrap)"; exit 1; }
[[ -x $PY ]] || { say "no virtualenv at $PY: run 'make install' first"; exit 1; }
read -r -a SEED_LIST <<< "$SEEDS"
((${#SEED_LIST[@]})) || { say "SEEDS is empty"; exit 2; }
for s in "${SEED_LIST[@]}"; do
    [[ $s =~ ^[0-9]+$ ]] || { say "SEEDS: '$s' is not a seed (integers, space-separated)"; exit 2; }
done
ROWS=()          # per seed that ran: seed:exit:seconds
TABLE_DONE=0

# The table of the seeds run so far (`rafka chaos table`, chaos_tests/seed_table.py): printed,
# and appended to $TABLE under a header saying what ran (commit, +dirty when the tree differs
# from it, nemesis, time limit). A seed that did not run shows its exit status.
report() {
    TABLE_DONE=1
    ((${#ROWS[@]})) || return 0
    mkdir -p "$(dirname "$TABLE")"
    local rev
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")
    git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || rev="$rev+dirty"
    local args=() row
    for row in "${ROWS[@]}"; do
        IFS=: read -r seed rc _secs <<<"$row"
        args+=("$RESULTS/seed$seed:$rc")
    done
    "$PY" -m rafka.chaos_tests table --title "docker chaos: $rev, nemesis $NEMESIS, time limit ${TIME_LIMIT}s, results $RESULTS" \
        --append "$TABLE" "${args[@]}" || true
    say "table appended to $TABLE"
}

cleanup() {
    local rc=$?
    set +e
    [[ $TABLE_DONE == 1 ]] || report   # cut short: the seeds that ran so far
    if [[ -d $RUN_DIR/work ]]; then
        say "cleanup: removing containers, network and volumes of project rafka-chaos"
        RAFKA_RUN_DIR=$RUN_DIR/work "$(command -v docker-compose || echo docker-compose)" \
            -p rafka-chaos -f "$ROOT/deploy/docker-compose.yml" down -v -t 1 --remove-orphans \
            >/dev/null 2>&1
    fi
    if [[ $STARTED_ENGINE == 1 && ${KEEP_ENGINE:-0} != 1 ]]; then
        say "cleanup: stopping the engine we started (and restoring the host firewall)"
        bash "$ROOT/deploy/docker-engine.sh" stop
    fi
    say "done, exit $rc, total $((SECONDS - T0))s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 1. packages
missing=()
for p in docker.io docker-compose debootstrap gcc libc6-dev iptables faketime fuse3; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    say "packages present (docker.io docker-compose debootstrap gcc faketime fuse3)"
fi

# ---------------------------------------------------------------- 2. engine
if bash "$ROOT/deploy/docker-engine.sh" status >/dev/null 2>&1; then
    say "using the engine already at $DOCKER_HOST (left running)"
else
    [[ $DOCKER_HOST == unix:///run/rafka-docker.sock ]] ||
        { say "no engine at DOCKER_HOST=$DOCKER_HOST, and it is not ours to start"; exit 1; }
    STARTED_ENGINE=1
    bash "$ROOT/deploy/docker-engine.sh" start >/dev/null
    say "engine started at $DOCKER_HOST"
fi

# ---------------------------------------------------------------- 3. image
t=$SECONDS
bash "$ROOT/deploy/build-image.sh"
say "image ready in $((SECONDS - t))s"

# ---------------------------------------------------------------- 4. chaos, seed by seed
cd "$ROOT"
if ! "$PY" -m rafka.chaos_tests run --help 2>/dev/null | grep -q -- "--backend"; then
    say "no campaign CLI (python -m rafka.chaos_tests run): running the docker backend's own tests"
    t=$SECONDS
    "$PY" -m pytest -q -p no:cacheprovider chaos_tests/tests/test_docker_backend.py
    say "backend tests finished in $((SECONDS - t))s"
    exit 0
fi
worst=0
for seed in "${SEED_LIST[@]}"; do
    rm -rf "$RUN_DIR/work"
    mkdir -p "$RUN_DIR/work" "$RESULTS"
    t=$SECONDS
    say "campaign: backend docker, nemesis $NEMESIS, time limit ${TIME_LIMIT}s, seed $seed"
    rc=0
    "$PY" -m rafka.chaos_tests run --backend docker --nemesis "$NEMESIS" --time-limit "$TIME_LIMIT" \
        --seed "$seed" --work-dir "$RUN_DIR/work" --results "$RESULTS/seed$seed" || rc=$?
    ROWS+=("$seed:$rc:$((SECONDS - t))")
    say "seed $seed finished in $((SECONDS - t))s with exit $rc (0 valid, 1 anomalies, 2 did not run); results $RESULTS/seed$seed"
    case $rc in
        0) ;;
        1) ((worst == 2)) || worst=1 ;;
        130|143) exit "$rc" ;;   # interrupted: no further seeds (the trap prints the table)
        *) worst=2 ;;
    esac
done
report
exit "$worst"
