#!/usr/bin/env bash
# Makes sure a PostgreSQL server accepts connections for the tests and the --postgres runs:
# 127.0.0.1:5432, user postgres without a password, database `test` (the URL
# postgres://postgres@127.0.0.1:5432/test, which DEADLINE_TEST_POSTGRES overrides).
#
# - installs Debian's `postgresql` package when no cluster exists (needs root);
# - starts the cluster when it is not running (never stops or restarts one);
# - on a fresh install only, where the password-less TCP login is refused, adds a `trust` line
#   for 127.0.0.1 to pg_hba.conf and reloads; then creates the database `test` if missing.
# Exits non-zero, saying why, when the server still cannot be used.
set -euo pipefail

HOST=127.0.0.1
PORT=5432
DB=test

say() { printf 'ensure-postgres: %s\n' "$*" >&2; }
ready() { pg_isready -h "$HOST" -p "$PORT" -q 2>/dev/null; }
as_postgres() { if [ "$(id -u)" -eq 0 ]; then su postgres -c "$*"; else sh -c "$*"; fi; }

if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    say "PostgreSQL is not installed: installing Debian's postgresql package"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi

VERSION=$(ls /etc/postgresql | sort -V | tail -n 1)
if ! ready; then
    say "starting cluster $VERSION/main"
    pg_ctlcluster --skip-systemctl-redirect "$VERSION" main start || true
fi
for _ in $(seq 1 60); do
    ready && break
    sleep 0.5
done
if ! ready; then
    say "PostgreSQL $VERSION does not accept connections on $HOST:$PORT"
    exit 1
fi

if ! psql -h "$HOST" -p "$PORT" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1; then
    HBA=$(as_postgres "psql -Atqc 'SHOW hba_file'")
    say "password-less login refused: trusting 127.0.0.1 in $HBA"
    sed -i "1i host all all 127.0.0.1/32 trust" "$HBA"
    as_postgres "psql -Atqc 'SELECT pg_reload_conf()'" >/dev/null
    sleep 0.5
fi
if [ "$(psql -h "$HOST" -p "$PORT" -U postgres -d postgres -Atqc "SELECT count(*) FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
    say "creating database $DB"
    psql -h "$HOST" -p "$PORT" -U postgres -d postgres -qc "CREATE DATABASE $DB"
fi
psql -h "$HOST" -p "$PORT" -U postgres -d "$DB" -Atqc 'SELECT 1' >/dev/null
say "PostgreSQL $VERSION ready at postgres://postgres@$HOST:$PORT/$DB"
