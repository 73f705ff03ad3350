#!/usr/bin/env bash
# The demo and a load run across real network paths: user, gateway, orders and inventory each in
# a network namespace of its own, joined in a line by veth pairs, with `tc netem` delay, jitter
# and loss on every link, in both directions (on a kernel without sch_netem, TUN pairs joined by
# scripts/link-emulator.py, which does the same; see LINK below).
#
#   user --link1-- gateway --link2-- orders --link3-- inventory
#   10.231.1.1     10.231.1.2
#                  10.231.2.1        10.231.2.2
#                                    10.231.3.1        10.231.3.2
#
# Each pair of neighbours talks over its own link (a /24 of its own). The requests themselves
# only ever cross to the next hop; gateway and orders also forward between their two links, so
# the user side can read every service's `GET /debug/runtime` (the load's check that services
# return to idle), across the same emulated links. Nothing outside these namespaces is ever a
# target: the addresses exist only inside them. The user (the `deadline demo` / `deadline load` process)
# runs in the user namespace and starts each service in its own with `--netns`, listening on its
# address towards the hop before it (`--hop-listen`).
#
# netem sits on the egress of BOTH ends of every link, so every one-way crossing of a link gets
# the setting: with "25ms 5ms loss 0.5%" a request crosses three links out (75 ms +- 15 ms) and
# its answer three back, and each packet is lost with 0.5 % probability per link per direction.
# netem draws the jitter per packet (uniformly), so packets can be reordered, as on real paths.
#
# Per setting it prints the demo's user answer time and work after the user left, and the load's
# misses against slow requests, both ways, with the TCP retransmission counters of the run with
# deadlines (`nstat`, summed over the four namespaces).
#
# The check (the script exits non-zero when it fails), with deadlines, per setting:
#   1. the demo: no call after the user left, and no worker time after the user left unless a TCP
#      retransmission timeout delayed a request on the wire (then at most LATE_MS_PER_TIMEOUT for
#      each timeout counted in the namespaces during the demo);
#   2. the load: no worker time after users left, with the same allowance for the timeouts
#      counted during that run, and for each other retransmitted segment (a lost one-segment
#      request is repaired by a tail loss probe, not a timeout) five crossings per hop (without
#      loss the allowance is 0);
#   3. the load: misses that are not slow requests ("fast misses") are at most the number of TCP
#      retransmission timeouts (TcpExtTCPTimeouts) in the namespaces during that run. Only a
#      retransmission timeout can make a fast request late here: a SYN or SYN-ACK lost costs the
#      1 s initial retransmission timeout, any other lost segment at least the 200 ms minimum,
#      and the path without loss adds at most 6 x 30 ms. Without loss the allowance is 0.
#
# Usage (as root): scripts/netem-chain.sh            (settings: see SETTINGS below)
# Environment: RATE (default 30), SECONDS_OF_LOAD (default 10), MARGIN (overrides every setting's),
# SETTING (one setting instead of the two), LINK (netem or emulator), DEADLINE_BIN (a built binary; default: build target/release/deadline).
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${RATE:-30}"
SECONDS_OF_LOAD="${SECONDS_OF_LOAD:-10}"
# delay ms, jitter ms, loss %: on each direction of each link; then the transit margin every
# caller keeps back (`--margin`, the user's included). A request on a new connection reaches the
# next hop one and a half round trips after it was sent (SYN, SYN-ACK, then the request: three
# one-way crossings) and its answer needs one more crossing back: four crossings of at most
# delay + jitter. At 5 +- 1 ms that is 24 ms, inside the default 50 ms; at 25 +- 5 ms it is
# 120 ms, which 50 ms cannot cover (the figures in docs/evidence.md show what breaks), so that setting
# runs with 150 ms: the 120 ms plus 30 ms for scheduling on a busy machine.
SETTINGS=(
    "5 1 0 50"
    "25 5 0.5 150"
)
# SETTING="DELAY JITTER LOSS MARGIN" runs that one setting instead.
if [ -n "${SETTING:-}" ]; then SETTINGS=("$SETTING"); fi

if [ "$(id -u)" -ne 0 ]; then
    echo "netem-chain: run as root (network namespaces and tc need it)" >&2
    exit 2
fi
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v nstat >/dev/null 2>&1 || need+=(iproute2)
command -v jq >/dev/null 2>&1 || need+=(jq)
if [ "${#need[@]}" -gt 0 ]; then
    echo "== installing ${need[*]}" >&2
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi

BIN="${DEADLINE_BIN:-target/release/deadline}"
if [ -z "${DEADLINE_BIN:-}" ]; then
    echo "== building the deadline binary (release)" >&2
    cargo build --release --bin deadline -q
fi
BIN="$(realpath "$BIN")"

# Names unique to this run, so two runs never share (or delete) each other's namespaces.
TAG="dl$$"
NS_USER="$TAG-user"
NS_GW="$TAG-gw"
NS_ORD="$TAG-ord"
NS_INV="$TAG-inv"
ALL_NS=("$NS_USER" "$NS_GW" "$NS_ORD" "$NS_INV")
OUT="$(mktemp -d)"

EMULATOR_FDS=()
EMULATOR_PIDS=()

# Stops the link emulators: closing its standard input is the signal, then wait for it.
stop_emulators() {
    local fd pid
    for fd in "${EMULATOR_FDS[@]}"; do exec {fd}>&-; done
    for pid in "${EMULATOR_PIDS[@]}"; do
        for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill "$pid" 2>/dev/null || true
    done
    EMULATOR_FDS=()
    EMULATOR_PIDS=()
}

# Deletes the probe namespace (made to see whether the kernel has netem) if it is still there.
delete_probe() {
    if ip netns list | grep -qw "^$TAG-probe"; then ip netns delete "$TAG-probe"; fi
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    stop_emulators
    delete_probe || status=1
    for ns in "${ALL_NS[@]}"; do
        if ip netns list | grep -qw "^$ns"; then
            # Anything still running in a namespace this script made was started by it.
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
            # A service drains on SIGTERM (up to its --drain-timeout): give it 2 s, then kill what
            # is left, so nothing outlives the namespace's name.
            for _ in $(seq 20); do
                [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
                sleep 0.1
            done
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
            # Deleting a namespace deletes the veth ends inside it (and so their peers).
            ip netns delete "$ns" || status=1
        fi
    done
    rm -rf "$OUT"
    left="$(ip netns list | grep -c "^$TAG-" || true)"
    if [ "$left" != "0" ]; then
        echo "netem-chain: $left namespaces were left behind" >&2
        status=1
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== namespaces ${ALL_NS[*]}"
for ns in "${ALL_NS[@]}"; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
# How links get their delay, jitter and loss: `tc netem` on veth pairs where the kernel has it
# (sch_netem), else scripts/link-emulator.py: a TUN device at each end and a process between
# them doing what netem does (per-packet uniform jitter, independent loss, both directions).
# LINK=netem or LINK=emulator forces one.
LINK="${LINK:-}"
if [ -z "$LINK" ]; then
    ip netns add "$TAG-probe"
    if tc -n "$TAG-probe" qdisc add dev lo root netem delay 1ms 2>/dev/null; then LINK=netem; else LINK=emulator; fi
    delete_probe
fi
if [ "$LINK" = emulator ] && ! command -v python3 >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq python3 >/dev/null
fi
EMULATOR="$(realpath scripts/link-emulator.py)"
echo "== links: $LINK"

# The links, as "NS_A IF_A ADDR_A NS_B IF_B ADDR_B".
LINKS=(
    "$NS_USER to-gw 10.231.1.1 $NS_GW to-user 10.231.1.2"
    "$NS_GW to-ord 10.231.2.1 $NS_ORD to-gw 10.231.2.2"
    "$NS_ORD to-inv 10.231.3.1 $NS_INV to-ord 10.231.3.2"
)
# links DELAY_MS JITTER_MS LOSS_PERCENT: every link, each direction, with that setting.
links() {
    local delay=$1 jitter=$2 loss=$3 spec ns_a if_a addr_a ns_b if_b addr_b fd i=0
    for spec in "${LINKS[@]}"; do
        read -r ns_a if_a addr_a ns_b if_b addr_b <<<"$spec"
        i=$((i + 1))
        if [ "$LINK" = netem ]; then
            if ! ip -n "$ns_a" link show "$if_a" >/dev/null 2>&1; then
                # A veth pair made directly inside the two namespaces.
                ip -n "$ns_a" link add name "$if_a" type veth peer name "$if_b" netns "$ns_b"
                ip -n "$ns_a" addr add "$addr_a/24" dev "$if_a"
                ip -n "$ns_b" addr add "$addr_b/24" dev "$if_b"
                ip -n "$ns_a" link set "$if_a" up
                ip -n "$ns_b" link set "$if_b" up
            fi
            tc -n "$ns_a" qdisc replace dev "$if_a" root netem delay "${delay}ms" "${jitter}ms" loss "${loss}%"
            tc -n "$ns_b" qdisc replace dev "$if_b" root netem delay "${delay}ms" "${jitter}ms" loss "${loss}%"
        else
            # Both TUN ends are made in namespace A, then one is moved to B. The ends of the
            # previous setting's link vanish with its emulator: wait until they have.
            for _ in $(seq 100); do
                if ! ip -n "$ns_a" link show "$if_a" >/dev/null 2>&1 &&
                    ! ip -n "$ns_b" link show "$if_b" >/dev/null 2>&1; then break; fi
                sleep 0.05
            done
            rm -f "$OUT/link$i"
            exec {fd}> >(exec ip netns exec "$ns_a" nice -n -5 python3 "$EMULATOR" \
                "$if_a" "$if_b" "$delay" "$jitter" "$(jq -n "$loss / 100")" "$i" >"$OUT/link$i")
            EMULATOR_FDS+=("$fd")
            EMULATOR_PIDS+=("$!")
            for _ in $(seq 100); do
                if grep -q ready "$OUT/link$i" 2>/dev/null; then break; fi
                sleep 0.05
            done
            grep -q ready "$OUT/link$i" || { echo "netem-chain: link $i did not start" >&2; exit 1; }
            ip -n "$ns_a" link set "$if_b" netns "$ns_b"
            ip -n "$ns_a" addr add "$addr_a" peer "$addr_b" dev "$if_a"
            ip -n "$ns_b" addr add "$addr_b" peer "$addr_a" dev "$if_b"
            ip -n "$ns_a" link set "$if_a" up
            ip -n "$ns_b" link set "$if_b" up
        fi
    done
}

# routes: the user side reaches orders and inventory through the gateway (and orders), and their
# answers find their way back. Called after `links`, which makes the devices anew per setting.
routes() {
    ip netns exec "$NS_GW" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$NS_ORD" sysctl -qw net.ipv4.ip_forward=1
    ip -n "$NS_USER" route replace 10.231.2.0/24 via 10.231.1.2
    ip -n "$NS_USER" route replace 10.231.3.0/24 via 10.231.1.2
    ip -n "$NS_GW" route replace 10.231.3.0/24 via 10.231.2.2
    ip -n "$NS_ORD" route replace 10.231.1.0/24 via 10.231.2.1
    ip -n "$NS_INV" route replace 10.231.1.0/24 via 10.231.3.1
}

PLACE=(
    --netns "gateway=$NS_GW,orders=$NS_ORD,inventory=$NS_INV"
    --hop-listen "gateway=10.231.1.2:0,orders=10.231.2.2:0,inventory=10.231.3.2:0"
)

# The sum over the four namespaces of the named nstat counters (absolute values).
counters() {
    local total=0 n
    for ns in "${ALL_NS[@]}"; do
        n="$(ip netns exec "$ns" nstat -asz "$1" | awk -v c="$1" '$1 == c { print $2 }')"
        total=$((total + ${n:-0}))
    done
    echo "$total"
}

# What one TCP retransmission timeout may cost in work after a user left. A budget is relative, so
# a request a timeout held on the wire reaches its hop late, and that hop (and the ones it calls)
# then work up to as long past the user's deadline: at most TCP's initial 1 s for a lost SYN or
# SYN-ACK, for each of the three hops. Without a timeout in the run the allowance is zero.
LATE_MS_PER_TIMEOUT=3000
# What one segment retransmitted without a timeout may cost the same way: a request is one
# segment, so its loss is not repaired by fast retransmit (no later segment to echo) but by a tail
# loss probe about two round trips later, which TcpExtTCPTimeouts does not count: the segment
# arrives up to five crossings of at most delay + jitter late (two round trips, then the crossing
# itself), for each of the three hops. Per setting, from its delay and jitter.
late_ms_per_probe() { echo $((3 * 5 * ($1 + $2))); }

failed=0
fail() {
    echo "  CHECK FAILED: $*"
    failed=1
}

for setting in "${SETTINGS[@]}"; do
    read -r delay jitter loss margin <<<"$setting"
    margin="${MARGIN:-$margin}"
    name="${delay} ms +- ${jitter} ms, ${loss} % loss, margin ${margin} ms"
    echo
    echo "== setting: $name, on each direction of each link ($(date -u +%H:%M:%S), load average $(cut -d' ' -f1-3 /proc/loadavg))"
    stop_emulators
    links "$delay" "$jitter" "$loss"
    routes
    placed=("${PLACE[@]}" --margin "$margin")

    demo_rto0="$(counters TcpExtTCPTimeouts)"
    ip netns exec "$NS_USER" "$BIN" demo --json "${placed[@]}" >"$OUT/demo.json"
    demo_rto=$(($(counters TcpExtTCPTimeouts) - demo_rto0))
    for way in 0 1; do
        jq -r --argjson i "$way" '.runs[$i] |
            "  demo " + (if .deadlines then "with:    " else "without: " end)
            + (if .user_status then "user heard \(.user_status) at \(.user_heard_back_ms | floor) ms"
               else "user gave up at \(.user_gave_up_ms | floor) ms with no answer" end)
            + ", \(.calls) calls, \(.calls_after_user_left) after the user left, "
            + "\(.worker_ms_after_user_left | floor) ms of worker time after the user left"' \
            "$OUT/demo.json"
    done
    # Read through the shared reader: a field missing or null fails the run (jq's `null > N` is
    # false, which would pass).
    demo_with=$(python3 scripts/lib/report.py "$OUT/demo.json" runs.1.deadlines \
        runs.1.calls_after_user_left runs.1.worker_ms_after_user_left)
    read -r with_way calls_after work_after <<<"$demo_with"
    [ "$with_way" = true ] || fail "demo: the second run of $OUT/demo.json is not the one with deadlines"
    if [ "$calls_after" != "0" ] || [ "$(jq -n "$work_after > $demo_rto * $LATE_MS_PER_TIMEOUT")" = "true" ]; then
        fail "demo with deadlines: $calls_after calls and $(printf '%.0f' "$work_after") ms of work after the user left ($demo_rto retransmission timeouts during both demo runs)"
    elif [ "$(jq -n "$work_after > 0")" = "true" ]; then
        echo "  demo with: $(printf '%.0f' "$work_after") ms of work after the user left, within the allowance of $demo_rto retransmission timeouts"
    fi

    load=(load --json --rate "$RATE" --seconds "$SECONDS_OF_LOAD" "${placed[@]}")
    ip netns exec "$NS_USER" "$BIN" "${load[@]}" --only without >"$OUT/without.json"
    syn0="$(counters TcpExtTCPSynRetrans)"
    rto0="$(counters TcpExtTCPTimeouts)"
    seg0="$(counters TcpRetransSegs)"
    ip netns exec "$NS_USER" "$BIN" "${load[@]}" --only with >"$OUT/with.json"
    syn=$(($(counters TcpExtTCPSynRetrans) - syn0))
    rto=$(($(counters TcpExtTCPTimeouts) - rto0))
    seg=$(($(counters TcpRetransSegs) - seg0))
    for way in without with; do
        jq -r --arg way "$way" '.runs[0] |
            "  load \($way):" + (" " * (8 - ($way | length)))
            + "\(.requests) requests (\(.slow_requests) slow), \(.in_time) in time, "
            + "missed \(.slow_missed) slow + \(.fast_missed) fast, "
            + "p50/p99 \(.latency_p50_ms)/\(.latency_p99_ms) ms, "
            + "\(.worker_ms_after_users_left / 1000 * 100 | floor / 100) s of \(.worker_ms / 1000 * 100 | floor / 100) s worker time after users left"' \
            "$OUT/$way.json"
    done
    echo "  load with, TCP in the namespaces: $rto retransmission timeouts ($syn of them SYN or SYN-ACK, 1 s each), $seg segments retransmitted"
    load_with=$(python3 scripts/lib/report.py "$OUT/with.json" runs.0.deadlines \
        runs.0.fast_missed runs.0.slow_missed runs.0.worker_ms_after_users_left)
    read -r with_way fast slow work_after <<<"$load_with"
    [ "$with_way" = true ] || fail "load: $OUT/with.json is not a run with deadlines"
    if [ "$fast" -gt 0 ]; then
        echo "  load with: $fast misses beyond the slow requests, against $rto retransmission timeouts (the allowance)"
    fi
    if [ "$fast" -gt "$rto" ]; then
        fail "load with deadlines: $fast fast misses, more than the $rto retransmission timeouts explain"
    fi
    probes=$((seg > rto ? seg - rto : 0))
    allowance=$((rto * LATE_MS_PER_TIMEOUT + probes * $(late_ms_per_probe "$delay" "$jitter")))
    if [ "$(jq -n "$work_after > $allowance")" = "true" ]; then
        fail "load with deadlines: $(printf '%.0f' "$work_after") ms of worker time after users left, more than the $rto retransmission timeouts and $probes other retransmitted segments explain ($allowance ms)"
    elif [ "$(jq -n "$work_after > 0")" = "true" ]; then
        echo "  load with: $(printf '%.0f' "$work_after") ms of worker time after users left, within the allowance of $rto retransmission timeouts and $probes other retransmitted segments ($allowance ms)"
    fi
done

echo
if [ "$failed" -ne 0 ]; then
    echo "netem-chain: check FAILED"
    exit 1
fi
echo "netem-chain: check passed (nothing ran after a user left beyond what retransmissions explain; fast misses within the timeouts)"
