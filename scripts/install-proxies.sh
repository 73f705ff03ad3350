#!/usr/bin/env bash
# Installs the proxies `deadline demo --proxy` and its tests put in front of the gateway: nginx
# and HAProxy from Debian's packages, when missing. Neither is left running: the package's
# service is stopped and disabled right after installing (the demo and the tests start their own,
# on free loopback ports, with generated configurations).
set -euo pipefail

missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
echo "install-proxies.sh: installing ${missing[*]} from Debian's packages" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# A policy-rc.d that refuses service starts during installation, so no packaged proxy takes
# port 80; only when the machine has none of its own (many container images ship one), and
# removed afterwards only if this script wrote it.
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
for service in nginx haproxy; do
    if command -v systemctl >/dev/null 2>&1; then
        $SUDO systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
done
