#!/usr/bin/env bash
# A real Prometheus scrapes the three services of a short `deadline load`, and its HTTP query
# API must agree with the load's own JSON report.
#
# Two loads run one after the other, without deadlines and with them, each on three fixed
# loopback ports (`--hop-listen`), so Prometheus scrapes them as two jobs (`without`, `with`)
# every second while they run. Each load reads every service's `/metrics` itself once its run
# has drained (the `metrics` section of its JSON), and reports its own figures from the users'
# side and the services' hold logs. Then, through `/api/v1/query`:
#
#   - every scraped counter (requests by outcome, 504s by phase, work after the caller left) and
#     the headroom histogram's count equal what the load read back, service by service;
#   - the edge's requests add up to the users the load sent, and its `ok` answers cover the users
#     answered in time;
#   - work after the caller left is > 0 without deadlines (and the load's own log-based figure
#     agrees that work went on after users left) and exactly 0 with them;
#   - with deadlines, some hop ran out of time (the load's slow requests), by phase.
#
# Installs Debian's `prometheus` and `jq` when missing (the package's own service is never
# started: this script runs the binary itself, with a temporary configuration and storage, on a
# free loopback port). Everything it starts is stopped when it exits, however it exits.
#
# Usage: scripts/prometheus-check.sh          (DEADLINE_BIN to use a built binary)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null 2>&1 || ! command -v jq >/dev/null 2>&1; then
    echo "== installing prometheus and jq" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    # Keep the package from starting its own service where nothing else prevents it.
    ADDED_POLICY=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod +x /usr/sbin/policy-rc.d
        ADDED_POLICY=1
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq prometheus jq >/dev/null
    if [ -n "$ADDED_POLICY" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi

BIN="${DEADLINE_BIN:-}"
if [ -z "$BIN" ]; then
    echo "== building the deadline binary (release)" >&2
    cargo build --release --bin deadline -q
    BIN=target/release/deadline
fi

WORK="$(mktemp -d)"
PROM_PID=""
LOAD_PID=""
cleanup() {
    for pid in "$LOAD_PID" "$PROM_PID"; do
        if [ -n "$pid" ]; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Seven free loopback ports: Prometheus, and three hops for each load. (Bound together, then
# released: another process taking one in between is possible but unlikely.)
read -r PROM_PORT W1 W2 W3 D1 D2 D3 < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(7)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
)

cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: without
    static_configs:
      - targets: ["127.0.0.1:$W1", "127.0.0.1:$W2", "127.0.0.1:$W3"]
  - job_name: with
    static_configs:
      - targets: ["127.0.0.1:$D1", "127.0.0.1:$D2", "127.0.0.1:$D3"]
EOF

echo "== prometheus on 127.0.0.1:$PROM_PORT" >&2
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
API="http://127.0.0.1:$PROM_PORT"
for _ in $(seq 1 100); do
    if curl -fsS "$API/-/ready" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$PROM_PID" 2>/dev/null; then cat "$WORK/prometheus.log" >&2; exit 1; fi
    sleep 0.1
done
curl -fsS "$API/-/ready" >/dev/null

# A short load: 20 users/s for 4 s, the reference scenario otherwise (5 % slow requests).
load() { # MODE PORT1 PORT2 PORT3
    echo "== deadline load --only $1 (hops on ports $2 $3 $4)" >&2
    "$BIN" load --json --only "$1" --rate 20 --seconds 4 \
        --hop-listen "gateway=127.0.0.1:$2,orders=127.0.0.1:$3,inventory=127.0.0.1:$4" \
        >"$WORK/$1.json" &
    LOAD_PID=$!
    wait "$LOAD_PID"
    LOAD_PID=""
}
load without "$W1" "$W2" "$W3"
load with "$D1" "$D2" "$D3"
# The services answered their last scrape before they stopped; one more interval for the
# samples to be queryable.
sleep 1.5

FAILURES=0
fail() {
    echo "FAIL: $*" >&2
    FAILURES=$((FAILURES + 1))
}
# The value of a PromQL expression that yields one sample, or "none".
q() {
    curl -fsS "$API/api/v1/query" --data-urlencode "query=$1" |
        jq -r '.data.result | if length == 1 then .[0].value[1] else "none" end'
}
# One value of the load's report: a field that is missing or null fails the script (jq -e), so
# a check never compares against a value that is not there.
J() {
    jq -er --arg at "$json: no single value at $1" "[$1] | if length == 1 and .[0] != null then .[0] else error(\$at) end" "$json"
}
# Whether two numbers agree to a millionth.
same() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "none" && b != "none" && d < 1e-6) }'; }

for mode in without with; do
    json="$WORK/$mode.json"
    run='.runs[0]'
    sel() { echo "job=\"$mode\",service=\"$1\""; }
    up=$(q "count(max_over_time(up{job=\"$mode\"}[15m]) == 1)")
    [ "$up" = 3 ] || fail "$mode: Prometheus scraped $up of 3 services"
    for service in gateway orders inventory; do
        m="$run.metrics[] | select(.name == \"$service\")"
        outcomes=$(J "$m | .requests | keys | join(\" \")")
        [ -n "$outcomes" ] || fail "$mode $service: the load's report counts no requests"
        for outcome in $outcomes; do
            want=$(J "$m | .requests[\"$outcome\"]")
            got=$(q "max_over_time(deadline_requests_total{$(sel $service),outcome=\"$outcome\"}[15m])")
            same "$got" "$want" || fail "$mode $service requests{$outcome}: Prometheus $got, load $want"
        done
        for phase in queue work calling; do
            want=$(J "$m | .exceeded[\"$phase\"]")
            got=$(q "max_over_time(deadline_exceeded_total{$(sel $service),phase=\"$phase\"}[15m])")
            same "$got" "$want" || fail "$mode $service exceeded{$phase}: Prometheus $got, load $want"
        done
        want=$(J "$m | .worker_seconds_after_caller_left")
        got=$(q "max_over_time(deadline_worker_seconds_after_caller_left_total{$(sel $service)}[15m])")
        same "$got" "$want" || fail "$mode $service work after caller left: Prometheus $got, load $want"
        want=$(J "$m | .headroom.count")
        got=$(q "max_over_time(deadline_headroom_seconds_count{$(sel $service)}[15m])")
        same "$got" "$want" || fail "$mode $service headroom count: Prometheus $got, load $want"
        # Something was observed: the service was scraped while it worked, not only idle.
        got=$(q "max_over_time(deadline_work_seconds_count{$(sel $service)}[15m])")
        awk -v g="$got" 'BEGIN { exit !(g != "none" && g > 0) }' ||
            fail "$mode $service: no work observed ($got)"
    done

    # The edge's requests are the users the load sent; its ok answers cover those in time.
    users=$(J "$run.requests")
    in_time=$(J "$run.in_time")
    edge=$(q "sum(max_over_time(deadline_requests_total{$(sel gateway)}[15m]))")
    same "$edge" "$users" || fail "$mode: the gateway counted $edge requests, the load sent $users users"
    ok=$(q "max_over_time(deadline_requests_total{$(sel gateway),outcome=\"ok\"}[15m])")
    awk -v ok="$ok" -v t="$in_time" 'BEGIN { exit !(ok >= t && ok <= t + 2) }' ||
        fail "$mode: the gateway answered $ok ok, the load had $in_time users in time"

    after=$(q "sum(max_over_time(deadline_worker_seconds_after_caller_left_total{job=\"$mode\"}[15m]))")
    logs=$(J "$run.worker_ms_after_users_left")
    exceeded=$(q "sum(max_over_time(deadline_exceeded_total{job=\"$mode\"}[15m]))")
    echo "$mode: $users users, $in_time in time; gateway $edge requests ($ok ok);" \
        "work after the caller left ${after} s (logs: ${logs} ms after users left);" \
        "504s where time ran out: $exceeded" >&2
    if [ "$mode" = without ]; then
        awk -v a="$after" -v l="$logs" 'BEGIN { exit !(a > 0 && l > 0) }' ||
            fail "without deadlines: work after the caller left should be > 0 (metric $after s, logs $logs ms)"
    else
        [ "$after" = 0 ] || fail "with deadlines: work after the caller left should be 0, not $after s"
        awk -v e="$exceeded" 'BEGIN { exit !(e > 0) }' ||
            fail "with deadlines: the slow requests should have run out somewhere (exceeded $exceeded)"
    fi
done

if [ "$FAILURES" -gt 0 ]; then
    echo "prometheus check: $FAILURES failures" >&2
    exit 1
fi
echo "prometheus check: passed"
