//! `deadline service --postgres URL --query SQL` against the real PostgreSQL the tests use
//! (`DEADLINE_TEST_POSTGRES`, default `postgres://postgres@127.0.0.1:5432/test`; started by
//! `scripts/ensure-postgres.sh`). A test that cannot reach it fails.

use std::process::Command;
use std::time::Duration;

use crate::util::{Service, bin, get};

fn url() -> String {
    std::env::var("DEADLINE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Runs `sql` with `psql` and returns what it printed.
fn psql(sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-Atqc", sql, &url()])
        .output()
        .expect("psql runs (scripts/ensure-postgres.sh installs it)");
    assert!(
        out.status.success(),
        "psql failed on {sql} at {}: {}",
        url(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// How many statements containing `marker` are active, read with `psql`.
fn active(marker: &str) -> u32 {
    psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
         AND pid <> pg_backend_pid() AND query LIKE '%{marker}%'"
    ))
    .parse()
    .expect("a count")
}

fn marker(name: &str) -> String {
    format!("cli_{name}_{}", std::process::id())
}

#[test]
fn a_bad_or_unreachable_database_is_a_clear_error_before_serving() {
    let out = bin()
        .args([
            "service",
            "--name",
            "db",
            "--postgres",
            "postgres://postgres@127.0.0.1:9/test",
        ])
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "it never said it was listening");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--postgres: cannot connect to PostgreSQL at 127.0.0.1:9"),
        "{stderr}"
    );

    let out = bin()
        .args([
            "service",
            "--name",
            "db",
            "--postgres",
            "postgres://host:port:x/y",
        ])
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid PostgreSQL connection URL"),
        "{stderr}"
    );

    let out = bin()
        .args(["service", "--name", "db", "--query", "SELECT 1"])
        .output()
        .expect("the binary runs");
    assert!(!out.status.success(), "--query needs --postgres");
}

/// With enforcement the statement stops at the deadline (504, a `query` span `deadline`) and is
/// gone from the database; with `--no-enforce` it runs to its end after the caller left.
#[test]
fn the_query_stops_at_the_deadline_unless_enforcement_is_off() {
    let mark = marker("enforce");
    let query = format!("SELECT pg_sleep(1.5) /* {mark} */");
    let svc = Service::start(&["--name", "db", "--postgres", &url(), "--query", &query]);
    let reply = get(&svc.addr, b"Deadline-Budget-Ms: 600\r\n");
    assert_eq!(reply.status, 504, "{reply:?}");
    assert!(reply.elapsed < Duration::from_millis(1_200), "{reply:?}");
    let trace = reply.header("deadline-trace").expect("a trace");
    assert!(
        trace.contains("query@") && trace.contains("=deadline"),
        "{trace}"
    );
    assert!(reply.body.contains("deadline exceeded at db"), "{reply:?}");
    assert_eq!(active(&mark), 0, "the statement outlived the 504");
    drop(svc);

    let mark = marker("baseline");
    let query = format!("SELECT pg_sleep(1.5) /* {mark} */");
    let svc = Service::start(&[
        "--name",
        "db",
        "--postgres",
        &url(),
        "--query",
        &query,
        "--no-enforce",
    ]);
    // The caller leaves once its statement runs on the server (past its 300 ms budget).
    let caller = std::net::TcpStream::connect(&svc.addr).expect("connects");
    std::io::Write::write_all(
        &mut &caller,
        b"GET / HTTP/1.1\r\nHost: x\r\nDeadline-Budget-Ms: 300\r\n\r\n",
    )
    .expect("sent");
    assert!(
        within(Duration::from_secs(10), || active(&mark) == 1),
        "the statement never started"
    );
    #[allow(clippy::disallowed_methods)] // the caller's real-time wait
    std::thread::sleep(Duration::from_millis(300));
    drop(caller);
    // Nothing to wait for: what is checked is that nothing happens. 300 ms is a cancel's
    // time many times over (a cancelled statement is gone within 100 ms), and the statement
    // has at least 1.5 s less 300 ms left to run.
    #[allow(clippy::disallowed_methods)] // the database's real-time window
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        active(&mark),
        1,
        "without enforcement the statement runs on after the caller left"
    );
}

/// A `psql` holding a lock; killed if the test ends before it lets go.
struct Locker(std::process::Child);

impl Drop for Locker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `done` every 20 ms for up to `limit`; returns whether it came true.
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    #[allow(clippy::disallowed_methods)] // a real-time test measures real time
    let start = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        #[allow(clippy::disallowed_methods)] // polling the database from outside
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Regression: with a table lock held elsewhere, callers without a budget who hung up left
/// their statements waiting on the lock, never cancelled, pinning the pool's sessions. Now
/// each caller's hang-up cancels its statement (none waits a second later), and a budgeted
/// request is served once the lock goes.
#[test]
fn budgetless_callers_that_hang_up_behind_a_lock_leave_no_statement_waiting() {
    let table = marker("locked");
    psql(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (x int)"
    ));
    let mark = marker("behind_lock");
    let query = format!("SELECT count(*) FROM {table} /* {mark} */");
    let svc = Service::start(&["--name", "db", "--postgres", &url(), "--query", &query]);
    let mut locker = Locker(
        Command::new("psql")
            .args(["-Atq", &url()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("psql runs"),
    );
    let mut to_locker = locker.0.stdin.take().expect("psql's input");
    std::io::Write::write_all(
        &mut to_locker,
        format!("BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;\n").as_bytes(),
    )
    .expect("the lock is asked for");
    let held = format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
         WHERE c.relname = '{table}' AND l.mode = 'AccessExclusiveLock' AND l.granted"
    );
    assert!(within(Duration::from_secs(10), || psql(&held) == "1"));

    let callers: Vec<_> = (0..4)
        .map(|_| {
            let caller = std::net::TcpStream::connect(&svc.addr).expect("connects");
            std::io::Write::write_all(&mut &caller, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("sent");
            caller
        })
        .collect();
    assert!(
        within(Duration::from_secs(10), || active(&mark) == 4),
        "the four statements never waited on the lock ({} active)",
        active(&mark)
    );
    drop(callers);
    let gone = within(Duration::from_secs(1), || active(&mark) == 0);
    let left = active(&mark);

    let budgeted = {
        let addr = svc.addr.clone();
        std::thread::spawn(move || get(&addr, b"Deadline-Budget-Ms: 8000\r\n"))
    };
    assert!(within(Duration::from_secs(10), || active(&mark) == 1));
    std::io::Write::write_all(&mut to_locker, b"COMMIT;\n").expect("the lock is let go");
    drop(to_locker);
    let _ = locker.0.wait();
    let reply = budgeted.join().expect("the budgeted caller");
    psql(&format!("DROP TABLE {table}"));
    assert!(
        gone,
        "{left} statements still waited on the lock a second after their callers hung up"
    );
    assert_eq!(reply.status, 200, "{reply:?}");
}
