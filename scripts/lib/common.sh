# Shared by the check scripts that run real processes: source it after `cd` to the repository's
# root. It installs what a script needs on a fresh Debian machine, starts `deadline service`
# processes and stops everything it started when the script exits, however it exits.
#
#   deadline_bin               sets BIN: DEADLINE_BIN, or target/release/deadline (built if missing)
#   need_apt PKG...            installs Debian packages (apt-get update once; sudo when not root)
#   need_tools CMD...          installs each missing command from the package of the same name
#   python_venv DIR MODULE SPEC...
#                              a virtual environment at DIR in which MODULE imports (pip installs
#                              SPEC... there when it does not)
#   work_dir                   sets WORK (a temporary directory) and PIDS; on exit, every pid in
#                              PIDS is stopped and WORK removed
#   stop_services              stops every pid in PIDS now (SIGTERM: a service drains and
#                              completes its hold log), waits for them, and empties PIDS
#   start_service NAME SCHEME ARG...
#                              runs `$BIN service --name NAME ARG...` (stdout and stderr in
#                              $WORK/NAME.out and .err), waits for its `listening on SCHEME://`
#                              line and sets ADDR (HOST:PORT); exits the script if it does not start
#   make_certs DIR             a private CA (DIR/ca.pem) and a server certificate for localhost and
#                              127.0.0.1 signed by it (DIR/server.pem, DIR/server.key), ECDSA P-256,
#                              valid one day: made for this run, never committed

deadline_bin() {
    BIN="${DEADLINE_BIN:-target/release/deadline}"
    if [ ! -x "$BIN" ]; then
        cargo build --release --bin deadline
    fi
}

_apt_updated=
need_apt() {
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    if [ -z "$_apt_updated" ]; then
        "${sudo[@]}" apt-get update -qq
        _apt_updated=1
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

need_tools() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || need_apt "$tool"
    done
}

python_venv() {
    local dir="$1" module="$2"
    shift 2
    need_tools python3
    python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt python3-venv
    if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c "import $module" 2>/dev/null; then
        python3 -m venv "$dir"
        "$dir/bin/pip" install -q --disable-pip-version-check "$@"
    fi
}

stop_services() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
}

_stop_all() {
    stop_services
    rm -rf "$WORK"
}

work_dir() {
    WORK="$(mktemp -d)"
    PIDS=()
    trap _stop_all EXIT
}

start_service() {
    local name="$1" scheme="$2"
    shift 2
    "$BIN" service --name "$name" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=("$!")
    for _ in $(seq 1 150); do
        if grep -q "^listening on $scheme://" "$WORK/$name.out" 2>/dev/null; then
            ADDR="$(sed -n "s|^listening on $scheme://||p" "$WORK/$name.out" | head -1)"
            return
        fi
        sleep 0.1
    done
    echo "$name did not start:" >&2
    cat "$WORK/$name.err" >&2
    exit 1
}

make_certs() {
    local dir="$1"
    need_tools openssl
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
        -subj "/CN=deadline test CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
        -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$dir/ext.cnf"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 1 -extfile "$dir/ext.cnf" -out "$dir/server.pem" 2>/dev/null
}
