#!/usr/bin/env bash
# Makes sure a Redis server answers PING on 127.0.0.1:6379, for the deadline-redis tests.
#
# - Already answering: nothing to do (a running server is never restarted: others may use it).
# - Installed but not running: started with `redis-server --daemonize yes`, bound to loopback,
#   nothing saved to disk.
# - Not installed: installed from Debian's packages (`apt-get install redis-server`, as root or
#   through sudo), then started.
# Then waits up to 30 s for it to answer, and fails loudly if it does not.
#
# Usage: scripts/ensure-redis.sh      (DEADLINE_REDIS_PORT to use another port)
set -euo pipefail

HOST=127.0.0.1
PORT="${DEADLINE_REDIS_PORT:-6379}"

answers() { redis-cli -h "$HOST" -p "$PORT" ping 2>/dev/null | grep -q PONG; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "Redis: not installed; installing redis-server from Debian's packages" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

if answers; then
    echo "Redis: $HOST:$PORT already answers"
    exit 0
fi

echo "Redis: starting it (redis-server --daemonize yes --port $PORT)" >&2
redis-server --daemonize yes --bind "$HOST" --port "$PORT" --save '' --appendonly no \
    --dir /tmp --logfile "/tmp/redis-$PORT.log"

for _ in $(seq 1 30); do
    if answers; then
        echo "Redis: $HOST:$PORT answers"
        exit 0
    fi
    sleep 1
done
echo "Redis did not answer on $HOST:$PORT within 30 s (see /tmp/redis-$PORT.log)" >&2
exit 1
