//! Rule 4: a connection whose reply was abandoned is drained or closed, never handed to the
//! next caller with a reply pending.

use tokio::time::Instant;

use crate::support::{Watcher, context, ms, name_it, outcomes, poll_once_and_drop, pool, unique};

/// The race, 300 rounds: a `BLPOP k 10` is abandoned (at its 30 ms deadline, or by a caller
/// that hangs up after 20 ms), or a `GET` is abandoned right after it is sent; then another
/// client pushes onto `k` (which an abandoned `BLPOP` still blocked on the server would pop
/// as its reply), and the next command on the pool, a `GET`, must get its own reply, at once,
/// not the `BLPOP`'s, and not after waiting behind the blocked client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_command_after_an_abandoned_one_gets_its_own_reply() {
    let pool = pool(1).await;
    let watcher = Watcher::new().await;
    let (list, value_key, other) = (unique("race_list"), unique("race_get"), unique("race_o"));
    let mut conn = pool.get().await.unwrap();
    let mut ways = [0_u32; 3];
    let mut answered_at_once = 0;
    for round in 0..300_u32 {
        let expected = format!("v{round}");
        let _: () = watcher
            .run(redis::cmd("SET").arg(&value_key).arg(&expected))
            .await;
        match round % 3 {
            0 => {
                // Abandoned at its deadline: a pipeline is not capped, so Redis would wait 10 s.
                let mut pipe = redis::pipe();
                pipe.cmd("BLPOP").arg(&list).arg(10);
                let ctx = context(130);
                let err = ctx
                    .clone()
                    .scope(conn.pipeline::<redis::Value>(&pipe))
                    .await
                    .expect_err("cut at the cutoff");
                assert!(
                    matches!(
                        err,
                        deadline_redis::Error::Deadline {
                            by_server: false,
                            ..
                        }
                    ),
                    "round {round}: {err}"
                );
                // The next caller takes the pool's one connection.
                drop(conn);
                conn = pool.get().await.unwrap();
            }
            1 => {
                // The caller hangs up: its future is dropped mid-wait; the same caller goes on.
                let cmd = redis::cmd("BLPOP").arg(&list).arg(10).clone();
                let gone =
                    tokio::time::timeout(ms(20), conn.query::<Option<Vec<String>>>(&cmd)).await;
                assert!(gone.is_err(), "round {round}: BLPOP answered {gone:?}");
            }
            _ => {
                // A plain command abandoned as soon as it is sent: its reply is drained.
                let cmd = redis::cmd("GET").arg(&other).clone();
                // Its reply can come within the one poll when this thread is preempted
                // between the write and the read (rarely, on a loaded machine): then nothing was
                // abandoned, and the round does not count as one.
                if !poll_once_and_drop(conn.query::<Option<String>>(&cmd)).await {
                    answered_at_once += 1;
                }
            }
        }
        ways[(round % 3) as usize] += 1;
        let _: i64 = watcher.run(redis::cmd("LPUSH").arg(&list).arg("x")).await;
        let start = Instant::now();
        let got = tokio::time::timeout(
            ms(2_000),
            conn.query::<Option<String>>(redis::cmd("GET").arg(&value_key)),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: the GET waited behind an abandoned command"));
        let got = got.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(
            got.as_deref(),
            Some(expected.as_str()),
            "round {round}: not the GET's own reply"
        );
        assert!(
            Instant::now().saturating_duration_since(start) < ms(1_000),
            "round {round}"
        );
        let _: () = watcher.run(redis::cmd("DEL").arg(&list)).await;
    }
    assert_eq!(ways, [100, 100, 100]);
    assert!(
        answered_at_once < 50,
        "{answered_at_once} of 100 GETs were not abandoned"
    );
    eprintln!("{answered_at_once} of the 100 abandoned GETs were answered within their one poll");
    let _: () = watcher
        .run(redis::cmd("DEL").arg(&value_key).arg(&other))
        .await;
}

/// A caller that hangs up on a blocking command outside any deadline: the command's future is
/// dropped, the connection is closed when given back, and with it the blocked client on the
/// server, well before the command's own 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_up_on_a_blocking_command_frees_the_server() {
    let pool = pool(1).await;
    let watcher = Watcher::new().await;
    let (name, key) = (unique("hangup"), unique("hangup_key"));
    let mut conn = pool.get().await.unwrap();
    name_it(&mut conn, &name).await;
    let cmd = redis::cmd("BLPOP").arg(&key).arg(10).clone();
    let (gone, ()) = tokio::join!(
        tokio::time::timeout(ms(300), conn.query::<Option<Vec<String>>>(&cmd)),
        watcher.until_blocked(&name, ms(250)),
    );
    assert!(gone.is_err(), "{gone:?}");
    drop(conn);
    tokio::time::sleep(ms(100)).await;
    assert!(
        watcher.clients(&name).await.is_empty(),
        "{:?}",
        watcher.clients(&name).await
    );
}

/// A plain command abandoned right after it was sent: its late reply is drained and the
/// connection goes back to the pool (not closed): the next caller gets the same client, and its
/// own reply; the abandoned command is a `cancelled` span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_plain_reply_is_drained_and_the_connection_kept() {
    let pool = pool(1).await;
    let watcher = Watcher::new().await;
    let name = unique("drain");
    let mut conn = pool.get().await.unwrap();
    name_it(&mut conn, &name).await;
    let ctx = context(5_000);
    let cmd = redis::cmd("CLIENT").arg("GETNAME").clone();
    // A reply can come within the one poll (this thread preempted between the write and the
    // read); then nothing was abandoned: try again.
    let mut tries = 0;
    while !poll_once_and_drop(ctx.clone().scope(conn.query::<Option<String>>(&cmd))).await {
        tries += 1;
        assert!(
            tries < 20,
            "20 replies in a row came within their first poll"
        );
        let _ = ctx.take_spans();
    }
    assert_eq!(outcomes(&ctx, "query"), ["cancelled"]);
    assert!(format!("{conn:?}").contains("reply pending"), "{conn:?}");
    drop(conn);
    tokio::time::sleep(ms(100)).await;
    assert_eq!(watcher.clients(&name).await.len(), 1);
    let mut conn = pool.get().await.unwrap();
    let got: Option<String> = conn.query(&cmd).await.unwrap();
    assert_eq!(
        got.as_deref(),
        Some(name.as_str()),
        "the same client, drained"
    );
}
