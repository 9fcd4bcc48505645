#!/usr/bin/env bash
# A private Docker engine for the chaos harness (root). It never touches a system dockerd:
# own socket, data root, exec root and pid file; no default bridge (docker0); no IP forwarding.
#
#   deploy/docker-engine.sh start    start it unless it already answers (prints DOCKER_HOST=...)
#   deploy/docker-engine.sh stop     stop it (only if this script started it: pid file) and undo
#                                    what dockerd did to the host firewall (see below)
#   deploy/docker-engine.sh status   exit 0 when it answers
#   deploy/docker-engine.sh clean-host  only the firewall restore (after a crashed run)
#
# Why the firewall restore: with --iptables=true dockerd adds DOCKER* chains and (when it enables
# IP forwarding) sets the FORWARD policy to DROP. With bridge-nf-call-iptables=1 that drops the
# bridged traffic of the netns backend on the same machine. On stop we put back the FORWARD
# policy and ip_forward recorded at start, delete the DOCKER* chains and their jump rules, and
# remove docker0 — only when no other dockerd is left running.
#
# Env: RAFKA_DOCKER_SOCK (/run/rafka-docker.sock), RAFKA_DOCKER_ROOT (/var/lib/rafka-docker),
#      RAFKA_DOCKER_EXEC (/run/rafka-docker), RAFKA_DOCKER_LOG (/var/log/rafka-dockerd.log).
set -euo pipefail

SOCK=${RAFKA_DOCKER_SOCK:-/run/rafka-docker.sock}
DATA_ROOT=${RAFKA_DOCKER_ROOT:-/var/lib/rafka-docker}
EXEC_ROOT=${RAFKA_DOCKER_EXEC:-/run/rafka-docker}
LOG=${RAFKA_DOCKER_LOG:-/var/log/rafka-dockerd.log}
PIDFILE=$EXEC_ROOT.pid
STATE=$EXEC_ROOT.host-state   # FORWARD policy and ip_forward before we started
export DOCKER_HOST=unix://$SOCK
DOCKER=${DOCKER_BIN:-$(command -v /usr/bin/docker || command -v docker || echo docker)}

log() { echo "docker-engine: $*" >&2; }

answers() { "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

forward_policy() { iptables -w -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3}'; }

clean_host() {
    if pgrep -x dockerd >/dev/null; then
        log "another dockerd runs: leaving the host firewall alone"
        return 0
    fi
    local policy=ACCEPT fwd=""
    if [[ -f $STATE ]]; then
        # shellcheck disable=SC1090
        source "$STATE"
        policy=${FORWARD_POLICY:-ACCEPT}
        fwd=${IP_FORWARD:-}
    fi
    log "restoring FORWARD policy $policy, removing DOCKER* chains"
    iptables -w -P FORWARD "$policy" || true
    local table chain rule
    for table in filter nat; do
        # rules of the built-in chains that jump into DOCKER* chains or name docker's bridges
        # (docker0, br-<12 hex>), then the DOCKER* chains themselves
        iptables -w -t "$table" -S 2>/dev/null |
            grep -E '^-A (INPUT|FORWARD|OUTPUT|PREROUTING|POSTROUTING) ' |
            grep -E -- '-j DOCKER|[io] (docker0|br-[0-9a-f]{12})( |$)' |
            while read -r rule; do
                # shellcheck disable=SC2086
                iptables -w -t "$table" ${rule/-A/-D} || true
            done || true   # grep finds nothing: fine (pipefail)
        for chain in $(iptables -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ {print $2}'); do
            iptables -w -t "$table" -F "$chain" || true
        done
        for chain in $(iptables -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ {print $2}'); do
            iptables -w -t "$table" -X "$chain" || true
        done
    done
    if [[ -n $fwd ]]; then
        log "restoring net.ipv4.ip_forward=$fwd"
        echo "$fwd" > /proc/sys/net/ipv4/ip_forward
    fi
    ip link show docker0 >/dev/null 2>&1 && ip link del docker0 || true
    rm -f "$STATE"
}

start() {
    if answers; then
        log "engine at $DOCKER_HOST already answers"
        echo "DOCKER_HOST=$DOCKER_HOST"
        return 0
    fi
    command -v dockerd >/dev/null || { log "dockerd missing: apt-get install docker.io"; exit 1; }
    [[ $(id -u) == 0 ]] || { log "needs root"; exit 1; }
    mkdir -p "$DATA_ROOT" "$EXEC_ROOT"
    if [[ ! -f $STATE ]]; then
        printf 'FORWARD_POLICY=%s\nIP_FORWARD=%s\n' "$(forward_policy)" \
            "$(cat /proc/sys/net/ipv4/ip_forward)" > "$STATE"
    fi
    log "starting dockerd (vfs, data root $DATA_ROOT, socket $SOCK, log $LOG)"
    # setsid: the engine must not die with the shell that started it (make, pytest)
    setsid dockerd --storage-driver=vfs --data-root "$DATA_ROOT" --exec-root "$EXEC_ROOT" \
        -H "unix://$SOCK" --pidfile "$PIDFILE" --iptables=true --ip-forward=false \
        --ip-masq=false --bridge=none --log-level=warn >>"$LOG" 2>&1 < /dev/null &
    local i
    for i in $(seq 1 120); do
        if answers; then
            log "engine ready after $((i / 2)).$((i % 2 * 5))s"
            echo "DOCKER_HOST=$DOCKER_HOST"
            return 0
        fi
        sleep 0.5
    done
    log "engine did not answer within 60s; tail of $LOG:"
    tail -n 20 "$LOG" >&2 || true
    stop
    exit 1
}

stop() {
    if [[ -f $PIDFILE ]]; then
        local pid i
        pid=$(cat "$PIDFILE")
        if kill -0 "$pid" 2>/dev/null; then
            log "stopping dockerd (pid $pid)"
            kill -TERM "$pid" || true
            for i in $(seq 1 60); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.5
            done
            if kill -0 "$pid" 2>/dev/null; then
                log "dockerd still alive after 30s: SIGKILL"
                kill -KILL "$pid" || true
            fi
        fi
        rm -f "$PIDFILE"
    else
        log "no pid file $PIDFILE: not started by us, nothing to stop"
    fi
    clean_host
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) answers && echo "DOCKER_HOST=$DOCKER_HOST" ;;
    clean-host) clean_host ;;
    *) echo "usage: $0 start|stop|status|clean-host" >&2; exit 2 ;;
esac
