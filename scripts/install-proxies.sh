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
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d refuses service starts during installation, so no packaged proxy takes port 80.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq "${missing[@]}" >/dev/null
for service in nginx haproxy; do
    if command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
done
