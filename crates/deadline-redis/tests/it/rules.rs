//! One test per rule (1, 2, 3 and 6 of the crate docs); each says which rule it checks and
//! fails when that rule is removed.

use std::time::Duration;

use deadline_http::DeadlineContext;
use deadline_http::metrics::{DeadlineMetrics, Registry};
use deadline_redis::{ConnectError, DeadlinePool, Error};
use tokio::time::Instant;

use crate::support::{Watcher, context, ms, name_it, outcomes, pool, unique, url};

/// Rule 1: with less than the minimum useful time plus the margin left (50 + 50 ms by
/// default), the command is not sent: a typed deadline error (504), a `not-sent` span, a
/// count, and the server never sees it; a blocking command is not sent either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_not_sent_without_time_for_it() {
    let mut registry = Registry::default();
    let metrics = DeadlineMetrics::register(&mut registry).service("svc");
    let pool = pool(1).await.record_metrics(&metrics);
    let watcher = Watcher::new().await;
    let key = unique("notsent");
    let mut conn = pool.get().await.unwrap();

    let ctx = context(80);
    let err = ctx
        .clone()
        .scope(conn.query::<()>(redis::cmd("SET").arg(&key).arg("x")))
        .await
        .expect_err("80 ms left, a command needs 100 ms");
    assert!(matches!(err, Error::NotSent { .. }), "{err}");
    assert!(err.is_deadline());
    assert_eq!(
        err.deadline_exceeded().unwrap().to_string(),
        "deadline exceeded while calling redis"
    );
    assert!(
        err.to_string().starts_with("SET on redis not sent: "),
        "{err}"
    );
    assert_eq!(outcomes(&ctx, "query"), ["not-sent"]);
    let seen: Option<String> = watcher.run(redis::cmd("GET").arg(&key)).await;
    assert_eq!(seen, None, "the command reached the server");
    let text = deadline_http::metrics::encode(&registry).unwrap();
    assert!(
        text.contains("deadline_queries_total{service=\"svc\",outcome=\"not_sent\"} 1"),
        "{text}"
    );

    let ctx = context(80);
    let start = Instant::now();
    let err = ctx
        .clone()
        .scope(conn.query::<Option<Vec<String>>>(redis::cmd("BLPOP").arg(&key).arg(10)))
        .await
        .expect_err("not sent");
    assert!(matches!(err, Error::NotSent { .. }), "{err}");
    assert!(Instant::now().saturating_duration_since(start) < ms(50));

    // 250 ms is enough for a command (100 ms).
    let ctx = context(250);
    ctx.clone()
        .scope(conn.query::<()>(redis::cmd("SET").arg(&key).arg("x")))
        .await
        .unwrap();
    assert_eq!(outcomes(&ctx, "query"), ["ok"]);
    let seen: Option<String> = watcher.run(redis::cmd("GET").arg(&key)).await;
    assert_eq!(seen.as_deref(), Some("x"));
    let _: () = watcher.run(redis::cmd("DEL").arg(&key)).await;
}

/// Rule 2: the wait for a reply ends at the cutoff. A blocking command in a pipeline keeps its
/// own 10 s timeout (only single commands are capped), so Redis would answer in 10 s; the
/// command ends at the 300 ms cutoff instead, as a `deadline` span, and the blocked client is
/// closed with the connection: 100 ms later the server has no blocked client of the pool's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_a_reply_ends_at_the_cutoff() {
    let pool = pool(1).await;
    let watcher = Watcher::new().await;
    let (name, key) = (unique("cutoff"), unique("cutoff_key"));
    let mut conn = pool.get().await.unwrap();
    name_it(&mut conn, &name).await;

    let ctx = context(300);
    let start = Instant::now();
    let mut pipe = redis::pipe();
    pipe.cmd("BLPOP").arg(&key).arg(10);
    let (result, ()) = tokio::join!(
        ctx.clone()
            .scope(conn.pipeline::<Vec<Option<Vec<String>>>>(&pipe)),
        watcher.until_blocked(&name, ms(250)),
    );
    let took = Instant::now().saturating_duration_since(start);
    let err = result.expect_err("cut at the cutoff");
    assert!(
        matches!(
            err,
            Error::Deadline {
                by_server: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(took >= ms(300), "ended before the cutoff: {took:?}");
    assert!(
        took < ms(600),
        "ended {took:?} after its start, the cutoff was 300 ms (at most twice that)"
    );
    assert_eq!(outcomes(&ctx, "query"), ["deadline"]);
    drop(conn);
    tokio::time::sleep(ms(100)).await;
    assert!(
        !watcher.blocked(&name).await,
        "still blocked: {:?}",
        watcher.clients(&name).await
    );
    // The pool gives a working connection.
    let mut conn = pool.get().await.unwrap();
    let pong: String = conn.query(&redis::cmd("PING")).await.unwrap();
    assert_eq!(pong, "PONG");
}

/// Rule 3: a blocking command's own timeout is capped to what is left less the margin and the
/// server tick, so Redis itself stops waiting before the cutoff: `BLPOP k 10` under 400 ms
/// comes back as a `deadline` error (by the server) before the 400 ms, on a connection still clean and still
/// open. The same for `XREAD BLOCK 0` (for ever) and `WAIT 1 0`. A timeout already within the
/// cap is the command's own: its nil is an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_commands_timeout_is_capped_to_the_budget() {
    // A server tick taken as 250 ms (Redis's is 100 ms): the cap comes 300 ms before the
    // cutoff, so Redis's answer, due at most one real tick after the cap, has 190 ms to spare
    // on a loaded machine before the client's own cut at the cutoff.
    let pool = pool(1).await.server_tick(ms(250));
    let watcher = Watcher::new().await;
    let (name, key) = (unique("cap"), unique("cap_key"));
    let mut conn = pool.get().await.unwrap();
    name_it(&mut conn, &name).await;

    let blpop = redis::cmd("BLPOP").arg(&key).arg(10).clone();
    let ctx = context(400);
    let start = Instant::now();
    let (result, ()) = tokio::join!(
        ctx.clone().scope(conn.query::<Option<Vec<String>>>(&blpop)),
        watcher.until_blocked(&name, ms(300)),
    );
    let took = Instant::now().saturating_duration_since(start);
    let err = result.expect_err("capped");
    assert!(
        matches!(
            err,
            Error::Deadline {
                by_server: true,
                ..
            }
        ),
        "{err}"
    );
    // The cap: 400 ms less the 50 ms margin and the 250 ms tick taken; Redis answers on its
    // next tick after it, up to 100 ms later.
    assert!(took >= ms(95), "Redis stopped early: {took:?}");
    assert!(took < ms(400), "Redis stopped at {took:?}, past the cutoff");
    assert_eq!(outcomes(&ctx, "query"), ["deadline"]);
    // The same client, open and not blocked: the connection was not closed.
    let clients = watcher.clients(&name).await;
    assert_eq!(clients.len(), 1, "{clients:?}");
    assert!(!crate::support::blocked_line(&clients[0]), "{clients:?}");
    let pong: String = conn.query(&redis::cmd("PING")).await.unwrap();
    assert_eq!(pong, "PONG");

    // XREAD ... BLOCK 0 waits for ever without the cap.
    let stream = unique("cap_stream");
    let _: String = watcher
        .run(redis::cmd("XADD").arg(&stream).arg("*").arg("f").arg("v"))
        .await;
    let ctx = context(500);
    let start = Instant::now();
    let err = ctx
        .clone()
        .scope(
            conn.query::<redis::Value>(
                redis::cmd("XREAD")
                    .arg("BLOCK")
                    .arg(0)
                    .arg("STREAMS")
                    .arg(&stream)
                    .arg("$"),
            ),
        )
        .await
        .expect_err("capped");
    let took = Instant::now().saturating_duration_since(start);
    assert!(
        matches!(
            err,
            Error::Deadline {
                by_server: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(took >= ms(195) && took < ms(500), "{took:?}");

    // WAIT 1 0: no replica here, so it would wait for ever; capped to 200 ms, it answers the
    // count (or, should Redis be later than its tick, is cut at the cutoff).
    let ctx = context(500);
    let start = Instant::now();
    let replicas = ctx
        .clone()
        .scope(conn.query::<i64>(redis::cmd("WAIT").arg(1).arg(0)))
        .await;
    let took = Instant::now().saturating_duration_since(start);
    match replicas {
        Ok(count) => assert_eq!(count, 0),
        Err(e) => assert!(
            matches!(
                e,
                Error::Deadline {
                    by_server: false,
                    ..
                }
            ),
            "{e}"
        ),
    }
    assert!(took >= ms(195) && took < ms(600), "{took:?}");

    // The command's own 100 ms is within the cap: its nil is an answer, not the deadline's.
    let ctx = context(1_000);
    let got: Option<Vec<String>> = ctx
        .clone()
        .scope(conn.query(redis::cmd("BLPOP").arg(&key).arg("0.1")))
        .await
        .unwrap();
    assert_eq!(got, None);
    assert_eq!(outcomes(&ctx, "query"), ["ok"]);
    let _: () = watcher.run(redis::cmd("DEL").arg(&stream)).await;
}

/// Rule 6: outside any deadline it is plain redis-rs: a blocking command's own timeout is
/// left as it is (`BLPOP k 0.3` waits its 300 ms), and redis-rs's default 500 ms response
/// timeout still applies (`BLPOP k 2` fails with redis-rs's timeout at 500 ms, as through a
/// plain deadpool-redis pool): no limit added, none removed. A request context without a
/// deadline still records the command's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_deadline_it_is_plain_redis_rs() {
    let pool = pool(1).await;
    let watcher = Watcher::new().await;
    let (name, key) = (unique("plain"), unique("plain_key"));
    let mut conn = pool.get().await.unwrap();
    name_it(&mut conn, &name).await;

    let ctx = DeadlineContext::new(None, Duration::ZERO, Instant::now());
    let start = Instant::now();
    let got: Option<Vec<String>> = ctx
        .clone()
        .scope(conn.query(redis::cmd("BLPOP").arg(&key).arg("0.3")))
        .await
        .unwrap();
    let took = Instant::now().saturating_duration_since(start);
    assert_eq!(got, None);
    assert!(took >= ms(300) && took < ms(500), "{took:?}");
    assert_eq!(outcomes(&ctx, "query"), ["ok"]);

    let start = Instant::now();
    let err = conn
        .query::<Option<Vec<String>>>(redis::cmd("BLPOP").arg(&key).arg(2))
        .await
        .expect_err("redis-rs's response timeout");
    let ours = Instant::now().saturating_duration_since(start);
    assert!(
        err.as_redis().is_some_and(redis::RedisError::is_timeout),
        "{err}"
    );
    assert!(!err.is_deadline());

    let plain = deadpool_redis::Config::from_url(url())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let mut plain = plain.get().await.unwrap();
    let start = Instant::now();
    let e = redis::cmd("BLPOP")
        .arg(unique("plain_key"))
        .arg(2)
        .query_async::<Option<Vec<String>>>(&mut plain)
        .await
        .expect_err("redis-rs's response timeout");
    let theirs = Instant::now().saturating_duration_since(start);
    assert!(e.is_timeout(), "{e}");
    for took in [ours, theirs] {
        assert!(took >= ms(500) && took < ms(900), "{ours:?} {theirs:?}");
    }
    // The abandoned BLPOP's connection is closed when given back: its client is not left
    // blocked for the rest of its 2 s.
    drop(conn);
    tokio::time::sleep(ms(100)).await;
    assert!(
        !watcher.blocked(&name).await,
        "{:?}",
        watcher.clients(&name).await
    );
}

/// Connecting: a bad URL and an unreachable server are errors of `connect`, not of the first
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_or_an_unreachable_server_is_a_clear_error() {
    let err = DeadlinePool::connect("http://nowhere", 1)
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::BadUrl(_)), "{err}");
    // A port nothing listens on (bound, then released).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let err = DeadlinePool::connect(&format!("redis://:secret@127.0.0.1:{port}"), 1)
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::Unreachable { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("cannot connect to Redis at redis://127.0.0.1:{port}")
    );
}
