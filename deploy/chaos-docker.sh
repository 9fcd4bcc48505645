#!/usr/bin/env bash
# One short chaos campaign on the docker backend, from nothing (root, Debian/Ubuntu):
#   1. apt-get install docker.io docker-compose debootstrap gcc libc6-dev (only what is missing)
#   2. start the private engine (deploy/docker-engine.sh) unless one answers at DOCKER_HOST
#   3. build rafka-node:local (deploy/build-image.sh; a no-op when up to date)
#   4. python -m rafka.chaos_tests run --backend docker ... (or, without the campaign CLI, the
#      backend's own tests: pytest chaos_tests/tests/test_docker_backend.py)
#   5. always (trap): compose down -v, and stop the engine if step 2 started it — which also
#      restores the host firewall (FORWARD policy, DOCKER* chains; see docker-engine.sh)
# Usage: make -C deploy chaos-docker  |  bash deploy/chaos-docker.sh
# Env: TIME_LIMIT (60: seed 1 then schedules clock, partition, pause and kill faults), SEED (1), NEMESIS (kill,pause,partition,clock), KEEP_ENGINE=1 (leave a
#      started engine running), RESULTS (chaos-results/docker-<time>-seed<S>).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
TIME_LIMIT=${TIME_LIMIT:-60}
SEED=${SEED:-1}
NEMESIS=${NEMESIS:-kill,pause,partition,clock}
RUN_DIR=$ROOT/deploy/.run
RESULTS=${RESULTS:-$ROOT/chaos-results/docker-$(date +%Y%m%d-%H%M%S)-seed$SEED}
export DOCKER_HOST=${DOCKER_HOST:-unix:///run/rafka-docker.sock}
STARTED_ENGINE=0
T0=$SECONDS

say() { echo "chaos-docker [$((SECONDS - T0))s]: $*" >&2; }

[[ $(id -u) == 0 ]] || { say "needs root (docker engine, debootstrap)"; exit 1; }
[[ -x $PY ]] || { say "no virtualenv at $PY: run 'make install' first"; exit 1; }

cleanup() {
    local rc=$?
    set +e
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
for p in docker.io docker-compose debootstrap gcc libc6-dev iptables faketime; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    say "packages present (docker.io docker-compose debootstrap gcc faketime)"
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

# ---------------------------------------------------------------- 4. chaos
rm -rf "$RUN_DIR/work"
mkdir -p "$RUN_DIR/work"
cd "$ROOT"
t=$SECONDS
if "$PY" -m rafka.chaos_tests run --help 2>/dev/null | grep -q -- "--backend"; then
    say "campaign: backend docker, nemesis $NEMESIS, time limit ${TIME_LIMIT}s, seed $SEED"
    rc=0
    "$PY" -m rafka.chaos_tests run --backend docker --nemesis "$NEMESIS" --time-limit "$TIME_LIMIT" \
        --seed "$SEED" --work-dir "$RUN_DIR/work" --results "$RESULTS" || rc=$?
    say "campaign finished in $((SECONDS - t))s with exit $rc (0 valid, 1 anomalies, 2 did not run); results $RESULTS"
    exit "$rc"
else
    say "no campaign CLI (python -m rafka.chaos_tests run): running the docker backend's own tests"
    "$PY" -m pytest -q -p no:cacheprovider chaos_tests/tests/test_docker_backend.py
    say "backend tests finished in $((SECONDS - t))s"
fi
