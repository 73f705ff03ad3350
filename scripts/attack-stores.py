#!/usr/bin/env python3
"""Attacks on a `deadline service --postgres` through its database, on loopback.

pinned_pool: a table lock held elsewhere (a `psql` session), then more callers without a budget
than the service's pool holds, each hanging up once its statement waits on the lock. Figures:
how many of their statements still wait on the lock 1 s after the callers left (each pins a
pooled session for as long as the lock is held), and the answer to a budgeted request sent while
the lock is held, read once the lock goes. With --check it fails unless none waits and the budgeted request is served.

Usage: python3 scripts/attack-stores.py BIN [--check] [--callers N] [--pool N]
The database is DEADLINE_TEST_POSTGRES (default postgres://postgres@127.0.0.1:5432/test);
scripts/ensure-postgres.sh starts one. Needs psql.
"""
import argparse
import os
import socket
import subprocess
import sys
import time

URL = os.environ.get("DEADLINE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test")


def psql(sql):
    out = subprocess.run(["psql", "-Atqc", sql, URL], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"attack-stores: psql failed on {sql!r} at {URL}: {out.stderr.strip()}")
    return out.stdout.strip()


def active(mark):
    return int(psql("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                    f"AND pid <> pg_backend_pid() AND query LIKE '%{mark}%'"))


def until(limit_s, done):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if done():
            return True
        time.sleep(0.02)
    return done()


def request(addr, headers=b"", timeout=30.0):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    return s


def status_of(s):
    raw = b""
    while b"\r\n" not in raw:
        chunk = s.recv(4096)
        if not chunk:
            break
        raw += chunk
    line = raw.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else None


def pinned_pool(bin_path, callers, pool):
    tag = f"atk_{os.getpid()}"
    table, mark = f"{tag}_locked", f"{tag}_behind_lock"
    psql(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (x int)")
    service = subprocess.Popen(
        [bin_path, "service", "--name", "db", "--postgres", URL, "--postgres-pool", str(pool),
         "--query", f"SELECT count(*) FROM {table} /* {mark} */"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    locker = subprocess.Popen(["psql", "-Atq", URL], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True)
    try:
        line = service.stdout.readline()
        if "listening on http://" not in line:
            sys.exit(f"attack-stores: the service did not start: {line!r}")
        addr = line.split("http://", 1)[1].split()[0].rstrip("/")
        locker.stdin.write(f"BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;\n")
        locker.stdin.flush()
        held = ("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                f"WHERE c.relname = '{table}' AND l.mode = 'AccessExclusiveLock' AND l.granted")
        if not until(10, lambda: psql(held) == "1"):
            sys.exit("attack-stores: the lock was never granted")
        sockets = [request(addr) for _ in range(callers)]
        until(10, lambda: active(mark) >= min(callers, pool))
        waiting_before = active(mark)
        for s in sockets:
            s.close()
        time.sleep(1.0)
        waiting = active(mark)
        budgeted = request(addr, b"Deadline-Budget-Ms: 5000\r\n")
        until(5, lambda: active(mark) > waiting)
        locker.stdin.write("COMMIT;\n")
        locker.stdin.close()
        locker.wait(timeout=10)
        status = status_of(budgeted)
        return {
            "callers": callers,
            "pool": pool,
            "waiting_on_lock_before_hang_up": waiting_before,
            "waiting_on_lock_1s_after_hang_up": waiting,
            "budgeted_status_after_lock": status,
        }
    finally:
        if locker.poll() is None:
            locker.kill()
            locker.wait()
        service.kill()
        service.wait()
        psql(f"DROP TABLE IF EXISTS {table}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bin")
    p.add_argument("--check", action="store_true")
    p.add_argument("--callers", type=int, default=20)
    p.add_argument("--pool", type=int, default=16)
    a = p.parse_args()
    r = pinned_pool(a.bin, a.callers, a.pool)
    print(f"pinned_pool: {r['callers']} callers without a budget on a pool of {r['pool']}: "
          f"{r['waiting_on_lock_before_hang_up']} statements waited on the lock before they hung up, "
          f"{r['waiting_on_lock_1s_after_hang_up']} still waited 1 s after; a budgeted request "
          f"(5 s budget) sent while the lock was held, answered once it went: {r['budgeted_status_after_lock']}")
    if a.check:
        problems = []
        if r["waiting_on_lock_before_hang_up"] < 1:
            problems.append("no statement ever waited on the lock: the attack did not take")
        if r["waiting_on_lock_1s_after_hang_up"] != 0:
            problems.append(f"{r['waiting_on_lock_1s_after_hang_up']} statements still waited on the lock")
        if r["budgeted_status_after_lock"] != 200:
            problems.append(f"the budgeted request got {r['budgeted_status_after_lock']}, not 200")
        for problem in problems:
            print("  -", problem)
        print("attack-stores:", "FAILED" if problems else "passed")
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
