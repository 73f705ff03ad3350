//! Faults over the real database: a backend that dies mid-statement, a cancel request that
//! is lost on a cut network, a pool exhausted by a slow statement. Each test says which fault
//! it makes and what the caller and the database must see; each ends every backend it started.
//!
//! A bad URL and an unreachable database are
//! `rules::a_bad_url_or_an_unreachable_database_is_a_clear_error`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadline_http::DeadlineContext;
use deadline_http::metrics::{DeadlineMetrics, Registry};
use deadline_postgres::{DeadlinePool, Error};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::support::{Watcher, context, limit_seen, marker, outcomes, pool, url};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits (up to 2 s) until a statement containing `mark` runs on the server.
async fn until_active(watcher: &Watcher, mark: &str) {
    let start = Instant::now();
    while !watcher.active(mark).await {
        assert!(
            Instant::now().saturating_duration_since(start) < ms(2_000),
            "the statement {mark} never started on the server"
        );
        tokio::time::sleep(ms(5)).await;
    }
}

/// Runs `body` in its own task, then ends every backend of the application `app` (whatever
/// `body` did, pass or panic), then passes the panic on.
async fn cleaning_up(app: &str, body: impl Future<Output = ()> + Send + 'static) {
    let result = tokio::spawn(body).await;
    Watcher::new().await.terminate_application(app).await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Fault: the backend dies mid-statement (`pg_terminate_backend`, as an administrator's kill, a
/// server crash or a failover does). The caller gets the database's error at once, not a hang
/// until its deadline, and not a deadline error (this was no deadline); the dead connection is
/// not handed out again: the next statement gets a new one and works. The same under a
/// deadline, under a deadline without `statement_timeout`, and outside any deadline.
///
/// Regression: without `statement_timeout` or outside any deadline, nothing was queued behind
/// the statement to fail with it, so the dead connection went back to the pool as it was, and
/// deadpool's check (`is_closed`) could pass before the client had read the connection's end:
/// the next statement failed with "connection closed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_mid_statement_is_an_error_at_once_not_a_hang() {
    let watcher = Watcher::new().await;
    let cases = [
        ("under a deadline", pool(1).await, Some(context(5_000))),
        (
            "under a deadline, without statement_timeout",
            pool(1).await.statement_timeout(false),
            Some(context(5_000)),
        ),
        ("outside any deadline", pool(1).await, None),
    ];
    for (case, pool, ctx) in cases {
        kill_mid_statement(&watcher, case, pool, ctx).await;
    }
}

/// Kills the backend of a `pg_sleep(10)` run on `pool`, under `ctx` if any, and checks what the
/// caller and the next statement see; `case` names the case in failures.
async fn kill_mid_statement(
    watcher: &Watcher,
    case: &str,
    pool: DeadlinePool,
    ctx: Option<DeadlineContext>,
) {
    let mark = marker("killed");
    let conn = pool.get().await.unwrap();
    let pid: i32 = conn
        .client()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let sql = format!("SELECT pg_sleep(10) /* {mark} */");
    let killer = async {
        until_active(watcher, &mark).await;
        let killed_at = Instant::now();
        assert_eq!(watcher.terminate(&mark).await, 1, "one backend killed");
        killed_at
    };
    let statement = conn.query(sql.as_str(), &[]);
    let call = async {
        match &ctx {
            Some(ctx) => ctx.clone().scope(statement).await,
            None => statement.await,
        }
    };
    let (result, killed_at) = tokio::join!(tokio::time::timeout(ms(8_000), call), killer);
    let answered = Instant::now().saturating_duration_since(killed_at);
    let result = result.unwrap_or_else(|_| panic!("{case}: the statement hung after the kill"));
    let err = result.expect_err("its backend was killed");
    assert!(
        answered < ms(1_000),
        "{case}: answered {answered:?} after the kill"
    );
    assert!(!err.is_deadline(), "{case}: not a deadline: {err}");
    assert!(matches!(err, Error::Postgres(_)), "{case}: {err}");
    assert_eq!(
        err.as_postgres().and_then(tokio_postgres::Error::code),
        Some(&SqlState::ADMIN_SHUTDOWN),
        "{case}: the server's own reason: {err}"
    );
    if let Some(ctx) = &ctx {
        assert_eq!(outcomes(ctx, "query"), ["error"], "{case}");
    }
    drop(conn);

    // The next statement, at once, gets a new connection, and it works.
    let next = tokio::time::timeout(ms(5_000), pool.get())
        .await
        .unwrap_or_else(|_| panic!("{case}: the pool gave no connection after the kill"))
        .expect("a new connection");
    let row = next
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|e| panic!("{case}: the pool handed out the killed connection: {e}"));
    assert_ne!(
        row.get::<_, i32>(0),
        pid,
        "{case}: the pool handed out the killed connection"
    );
}

/// A TCP relay in front of the test database that can cut the network: the connections it
/// carries stop forwarding (in both directions, not even a close gets through), and new
/// connections (a cancel request is one) are accepted and left unanswered, their bytes never
/// forwarded.
struct Relay {
    addr: SocketAddr,
    state: Arc<RelayState>,
    accept: JoinHandle<()>,
}

#[derive(Default)]
struct RelayState {
    /// New connections are held, never forwarded.
    blackhole: AtomicBool,
    /// How many connections were held so.
    blackholed: AtomicUsize,
    held: Mutex<Vec<TcpStream>>,
    links: Mutex<Vec<Link>>,
}

/// One relayed connection: its stall switch and its two pipes.
struct Link {
    stall: Arc<AtomicBool>,
    pipes: [JoinHandle<()>; 2],
}

impl Relay {
    /// A relay on 127.0.0.1, port chosen by the system, to the test database's TCP address.
    async fn start() -> Relay {
        let config: tokio_postgres::Config = url().parse().expect("the test URL parses");
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            other => panic!(
                "the fault tests relay TCP to the database, and the test URL names {other:?}"
            ),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a relay port");
        let addr = listener.local_addr().expect("its address");
        let state = Arc::new(RelayState::default());
        let shared = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                if shared.blackhole.load(Ordering::SeqCst) {
                    shared.blackholed.fetch_add(1, Ordering::SeqCst);
                    shared.held.lock().unwrap().push(socket);
                    continue;
                }
                let Ok(upstream) = TcpStream::connect((host.as_str(), port)).await else {
                    continue; // the client sees its connection closed
                };
                // As the database's own sockets: without it, a message the relay forwards in two
                // writes waits for the peer's delayed acknowledgement (about 40 ms), which moved
                // the timing the reuse test depends on.
                let _ = socket.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                let stall = Arc::new(AtomicBool::new(false));
                let (client_read, client_write) = socket.into_split();
                let (server_read, server_write) = upstream.into_split();
                let pipes = [
                    tokio::spawn(pipe(client_read, server_write, Arc::clone(&stall))),
                    tokio::spawn(pipe(server_read, client_write, Arc::clone(&stall))),
                ];
                shared.links.lock().unwrap().push(Link { stall, pipes });
            }
        });
        Relay {
            addr,
            state,
            accept,
        }
    }

    /// A pool of one connection through the relay, its backends named `application`.
    fn pool(&self, application: &str) -> DeadlinePool {
        let base: tokio_postgres::Config = url().parse().expect("the test URL parses");
        let mut config = tokio_postgres::Config::new();
        if let Some(user) = base.get_user() {
            config.user(user);
        }
        if let Some(password) = base.get_password() {
            config.password(password);
        }
        if let Some(dbname) = base.get_dbname() {
            config.dbname(dbname);
        }
        config
            .host("127.0.0.1")
            .port(self.addr.port())
            .application_name(application)
            .connect_timeout(ms(5_000));
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        DeadlinePool::new(Pool::builder(manager).max_size(1).build().expect("a pool"))
    }

    /// New connections are held unanswered from now on (the carried ones go on working).
    fn lose_new_connections(&self) {
        self.state.blackhole.store(true, Ordering::SeqCst);
    }

    /// New connections go through again (the ones cut stay cut).
    fn restore_new_connections(&self) {
        self.state.blackhole.store(false, Ordering::SeqCst);
    }

    /// The network is cut: nothing more gets through the connections carried now, and new ones
    /// are held unanswered.
    fn cut(&self) {
        self.lose_new_connections();
        for link in self.state.links.lock().unwrap().iter() {
            link.stall.store(true, Ordering::SeqCst);
        }
    }

    fn blackholed(&self) -> usize {
        self.state.blackholed.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        for link in self.state.links.lock().unwrap().drain(..) {
            for pipe in link.pipes {
                pipe.abort();
            }
        }
        self.state.held.lock().unwrap().clear();
    }
}

/// Copies `from` to `to` until either ends, or forever nothing once `stall` is set.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, stall: Arc<AtomicBool>) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        if stall.load(Ordering::SeqCst) {
            // Cut: these bytes, and a close, never arrive.
            std::future::pending::<()>().await;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Fault: the cancel request is lost. The caller hangs up mid-statement and the crate sends
/// PostgreSQL's cancel request, which opens a *new* connection to the address the client used:
/// the relay, which now holds new connections unanswered. The statement must still end at its
/// `statement_timeout` (≤ 1 450 ms here), and its connection come back to the pool clean once
/// it has.
///
/// Were `statement_timeout` not sent, nothing would stop `pg_sleep(30)`: it would still be
/// active at the end of the 2.5 s bound below, and the test fails (checked by turning the rule
/// off). That it is the cancel that was lost, and not something else that stopped the statement,
/// is checked too: the relay held a new connection, and the statement was still running 400 ms
/// after the hang-up (a cancel that arrives ends it within 100 ms:
/// `rules::a_statement_is_cancelled_on_the_server_when_the_caller_hangs_up`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_cancel_request_leaves_the_statement_bounded_by_statement_timeout() {
    let watcher = Watcher::new().await;
    let app = marker("lostcancel_app");
    let name = app.clone();
    cleaning_up(&app, async move {
        let relay = Relay::start().await;
        let pool = relay.pool(&name);
        let mark = marker("lostcancel");
        let conn = pool.get().await.expect("a connection through the relay");
        let default: String = conn
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        relay.lose_new_connections();

        let ctx = context(1_500);
        let sql = format!("SELECT pg_sleep(30) /* {mark} */");
        let start = Instant::now();
        let call = ctx.clone().scope(conn.query(sql.as_str(), &[]));
        let hung_up = tokio::time::timeout(ms(200), call).await;
        assert!(hung_up.is_err(), "the statement should still be running");
        let hung_up_at = Instant::now();
        drop(conn);
        assert_eq!(outcomes(&ctx, "query"), ["cancelled"]);

        let waited = Instant::now();
        while relay.blackholed() == 0 {
            assert!(
                Instant::now().saturating_duration_since(waited) < ms(1_000),
                "no cancel request reached the relay"
            );
            tokio::time::sleep(ms(5)).await;
        }
        tokio::time::sleep_until(hung_up_at + ms(400)).await;
        assert!(
            watcher.active(&mark).await,
            "the statement stopped although its cancel request was lost"
        );

        let gone = watcher.gone_within(&mark, ms(3_000)).await;
        let ended = Instant::now().saturating_duration_since(start);
        assert!(
            gone.is_some() && ended < ms(2_500),
            "with its cancel request lost, the statement was still running {ended:?} after it \
             was sent under a 1500 ms deadline: statement_timeout did not stop it"
        );

        // Its connection comes back once the statement ended, with the server's default.
        let next = tokio::time::timeout(ms(5_000), pool.get())
            .await
            .expect("the connection never came back")
            .expect("a connection");
        let after: String = next
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(after, default, "the statement's limit leaked");
    })
    .await;
}

/// Fault: the network to the database is cut mid-statement: neither the server's answer nor
/// the cancel request gets through. The caller still gets its deadline error on time (the local
/// timer, `server: None`), the server still stops the statement at its `statement_timeout`, and
/// the cut connection is not handed out again: its hand-back gives up after the drain limit
/// and closes it, so the next statement gets a new connection.
///
/// Were `statement_timeout` not sent, `pg_sleep(30)` would run on after the cut, and the test
/// fails (checked by turning the rule off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_network_gives_the_deadline_error_on_time_and_the_server_still_stops_the_statement() {
    let watcher = Watcher::new().await;
    let app = marker("cut_app");
    let name = app.clone();
    cleaning_up(&app, async move {
        let relay = Relay::start().await;
        let pool = relay.pool(&name).drain_limit(ms(500));
        let mark = marker("cut");
        let conn = pool.get().await.expect("a connection through the relay");
        let pid: i32 = conn
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);

        let ctx = context(800);
        let sql = format!("SELECT pg_sleep(30) /* {mark} */");
        let cutter = async {
            until_active(&watcher, &mark).await;
            relay.cut();
        };
        let start = Instant::now();
        let call =
            tokio::time::timeout(ms(5_000), ctx.clone().scope(conn.query(sql.as_str(), &[])));
        let (result, ()) = tokio::join!(call, cutter);
        let took = Instant::now().saturating_duration_since(start);
        let err = result
            .expect("the caller hung on a cut network")
            .expect_err("the network was cut");
        assert!(
            matches!(err, Error::Deadline { server: None, .. }),
            "the local timer's deadline error: {err}"
        );
        assert!(took < ms(1_300), "the deadline error came after {took:?}");
        assert_eq!(outcomes(&ctx, "query"), ["deadline"]);
        drop(conn);

        // The server's limit: 800 ms less the 50 ms margin, rounded up by half its slack
        // (750 + 37 ms), counted from the send: the statement ends about 790 ms after `start`.
        // Within twice that; without the limit it runs its 30 s.
        let gone = watcher.gone_within(&mark, ms(3_000)).await;
        let ended = Instant::now().saturating_duration_since(start);
        assert!(
            gone.is_some() && ended < ms(1_580),
            "on a cut network the statement was still running {ended:?} after it was sent \
             under an 800 ms deadline: statement_timeout did not stop it"
        );

        // The network is back for new connections; the cut one stays cut.
        relay.restore_new_connections();
        let ctx = context(8_000);
        let next = tokio::time::timeout(ms(5_000), ctx.clone().scope(pool.get()))
            .await
            .expect("no connection after the cut one was dropped")
            .expect("a new connection");
        let row = tokio::time::timeout(
            ms(5_000),
            ctx.clone()
                .scope(next.query_one("SELECT pg_backend_pid()", &[])),
        )
        .await
        .expect("the pool handed out the cut connection: the statement hung")
        .expect("the next statement works");
        assert_ne!(row.get::<_, i32>(0), pid, "the cut connection again");
    })
    .await;
}

/// Fault: the only pooled connection is held by a slow statement. A second caller with a 300 ms
/// deadline gives up when a statement could no longer be sent (300 less 100 ms), not when the
/// slow one ends, and its queue wait is counted: in the error, a `pool` span, and
/// `deadline_pool_wait_seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_exhausted_by_a_slow_statement_makes_waiters_give_up_at_their_deadline() {
    let mut registry = Registry::default();
    let metrics = DeadlineMetrics::register(&mut registry).service("svc");
    let pool = pool(1).await.record_metrics(&metrics);
    let watcher = Watcher::new().await;
    let mark = marker("exhausted");
    let sql = format!("SELECT pg_sleep(30) /* {mark} */");
    let holder_pool = pool.clone();
    let holder = tokio::spawn(async move {
        let conn = holder_pool.get().await.expect("the holder's connection");
        let _ = context(3_000).scope(conn.query(sql.as_str(), &[])).await;
    });
    until_active(&watcher, &mark).await;

    let ctx = context(300);
    let start = Instant::now();
    let result = tokio::time::timeout(ms(3_000), ctx.clone().scope(pool.get()))
        .await
        .expect("the waiter did not give up on its own");
    let took = Instant::now().saturating_duration_since(start);
    let err = result.expect_err("the only connection is busy");
    assert!(err.is_deadline(), "{err}");
    let Error::PoolTimeout { waited, .. } = err else {
        panic!("a pool timeout: {err}");
    };
    // It gives up when a statement could no longer be sent: 300 ms less the 100 ms a
    // statement needs, about 200 ms; within twice that (the slow one holds it for 30 s).
    assert!(took >= ms(180) && took < ms(400), "gave up after {took:?}");
    assert!(
        waited >= ms(150) && waited <= took,
        "the error says it waited {waited:?} (the call took {took:?})"
    );
    let (spans, _) = ctx.take_spans();
    let pool_spans: Vec<_> = spans.iter().filter(|s| s.name == "pool").collect();
    assert_eq!(pool_spans.len(), 1, "{spans:?}");
    assert_eq!(pool_spans[0].outcome.as_deref(), Some("deadline"));
    assert!(
        pool_spans[0].end_ms - pool_spans[0].start_ms >= 150,
        "{:?}",
        pool_spans[0]
    );
    let text = deadline_http::metrics::encode(&registry).unwrap();
    let sum: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("deadline_pool_wait_seconds_sum{service=\"svc\"} "))
        .unwrap_or_else(|| panic!("no pool wait sum in {text}"))
        .parse()
        .expect("a number");
    assert!(sum >= 0.15, "pool waits counted {sum} s: {text}");

    holder.abort();
    let _ = holder.await;
    watcher.terminate(&mark).await;
    assert!(
        watcher.gone_within(&mark, ms(1_000)).await.is_some(),
        "the slow statement outlived the test"
    );
}

/// Rule (what each request pays): a connection keeps the limit a statement under a deadline
/// gave it, rounded up, and the next statements reuse it without a `SET` when it runs at most
/// max(10 %, 20 ms) past their own. With the client's cancel made impossible (the relay holds
/// every new connection, so the cancel request never arrives), the server's limit alone must
/// stop a statement that reuses it, no later than its deadline plus that slack.
///
/// A first request (1,000 ms) sets the connection's limit; the second (980 ms, its own limit
/// about 930 ms) finds it within the slack and sends no `SET`; its `pg_sleep(30)` is stopped
/// by the server by 980 + 98 ms. Were no limit on the connection (or one rounded up past the
/// slack), the sleep would run on and the bound fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_cancel_lost_a_statement_under_a_reused_limit_stops_by_its_deadline_and_the_slack()
{
    let watcher = Watcher::new().await;
    let app = marker("reused_app");
    let name = app.clone();
    cleaning_up(&app, async move {
        let relay = Relay::start().await;
        let pool = relay.pool(&name);
        let conn = pool.get().await.expect("a connection through the relay");

        // The first request leaves its limit on the connection.
        let set = limit_seen(&context(1_000), &conn).await;
        assert!((900..=1_000).contains(&set), "the first limit: {set} ms");
        relay.lose_new_connections();

        // The second, 20 ms shorter, reuses it: the same value, no SET.
        let budget = 980;
        let ctx = context(budget);
        let deadline = Instant::now() + ms(budget);
        assert_eq!(
            limit_seen(&ctx, &conn).await,
            set,
            "the limit was not reused"
        );
        let mark = marker("reused");
        let sql = format!("SELECT pg_sleep(30) /* {mark} */");
        let err = ctx
            .clone()
            .scope(conn.query(sql.as_str(), &[]))
            .await
            .expect_err("stopped");
        assert!(err.is_deadline(), "{err}");

        let slack = ms((budget / 10).max(20));
        let gone = watcher.gone_within(&mark, ms(3_000)).await;
        let stopped = Instant::now();
        assert!(
            gone.is_some() && stopped <= deadline + slack,
            "with its cancel lost, the statement ran until {:?} past its deadline (at most \
             {slack:?}): gone {gone:?}",
            stopped.saturating_duration_since(deadline)
        );
        assert!(relay.blackholed() > 0, "the cancel request was not lost");
        drop(conn);
    })
    .await;
}
