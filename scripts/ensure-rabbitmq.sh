#!/usr/bin/env bash
# Makes sure a RabbitMQ broker accepts AMQP connections on 127.0.0.1:5672 (guest/guest, the
# broker's default account, which it allows on loopback), for the deadline-lapin tests and
# `deadline jobs`.
#
# - Already accepting: nothing to do (a running broker is never restarted: others may use it).
# - Installed but not running: started with `rabbitmq-server -detached`.
# - Not installed: installed from Debian's packages (`apt-get install rabbitmq-server`, as root
#   or through sudo), then started.
# Then waits up to 120 s for the port to accept connections, and fails loudly if it does not.
#
# Usage: scripts/ensure-rabbitmq.sh      (DEADLINE_RABBITMQ_PORT to wait on another port)
set -euo pipefail

HOST=127.0.0.1
PORT="${DEADLINE_RABBITMQ_PORT:-5672}"

accepts() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

if accepts; then
    echo "RabbitMQ: $HOST:$PORT already accepts connections"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! command -v rabbitmq-server >/dev/null 2>&1; then
    echo "RabbitMQ: not installed; installing rabbitmq-server from Debian's packages" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
fi

# The package's own start (where an init system runs) may have brought it up meanwhile.
if ! accepts; then
    echo "RabbitMQ: starting it (rabbitmq-server -detached)" >&2
    # A node that is still booting refuses a second start; the wait below decides.
    $SUDO rabbitmq-server -detached || true
fi

for _ in $(seq 1 120); do
    if accepts; then
        echo "RabbitMQ: $HOST:$PORT accepts connections"
        exit 0
    fi
    sleep 1
done
echo "RabbitMQ did not accept connections on $HOST:$PORT within 120 s (see /var/log/rabbitmq/)" >&2
exit 1
