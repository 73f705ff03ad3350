//! Blocking commands: which argument is their own timeout, and how it is capped to the time
//! left.
//!
//! A blocking command (`BLPOP k 10`) makes Redis itself wait, up to its timeout argument, for
//! data. Giving up on the reply locally does not stop that wait: the server keeps the client
//! blocked, and every later command on the connection queues behind it. So under a deadline the
//! argument is rewritten to what is left, and Redis stops waiting on its own, answering the
//! command's "nothing came" reply (a nil, or for `WAIT` the replicas reached so far).
//!
//! | command | timeout argument | unit, `0` |
//! |---|---|---|
//! | `BLPOP`, `BRPOP`, `BRPOPLPUSH`, `BLMOVE`, `BZPOPMIN`, `BZPOPMAX` | the last | seconds (a decimal since Redis 6), `0` = for ever |
//! | `BLMPOP`, `BZMPOP` | the first | seconds, `0` = for ever |
//! | `XREAD`, `XREADGROUP` | after `BLOCK` (before `STREAMS`); none without `BLOCK` | milliseconds, `0` = for ever |
//! | `WAIT` | the second | milliseconds, `0` = for ever |
//! | `WAITAOF` | the third | milliseconds, `0` = for ever |
//!
//! The cap is what is left less the margin and less Redis's timer tick (see
//! [`DeadlinePool::server_tick`](crate::DeadlinePool::server_tick)), at least 1 ms, rounded
//! **down** to whole milliseconds (written `S.mmm` for the commands that take seconds, which
//! Redis 6 and later read), so Redis never waits past it. A cap below 1 ms would have to be
//! written `0`, which means "for ever": such a command is not sent (the minimum useful time, at
//! least 1 ms, already refuses it first).
//! A timeout argument the command already gives that is no longer than the cap is left as it
//! is: the command's own choice, and its nil then means what it always meant.

use std::time::Duration;

use redis::{Arg, Cmd};

/// How a command's timeout argument is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// Seconds, a decimal (`BLPOP`): `0` is for ever.
    Seconds,
    /// Whole milliseconds (`XREAD BLOCK`, `WAIT`): `0` is for ever.
    Millis,
}

/// What capping did to a command.
#[derive(Debug)]
pub(crate) enum Capped {
    /// Not a blocking command (or `XREAD` without `BLOCK`): sent as it is.
    NotBlocking,
    /// A blocking command whose own timeout is within the cap: sent as it is.
    Within,
    /// A blocking command whose timeout argument was rewritten to `ms`: this command is sent
    /// instead, and its "nothing came" reply is the deadline's doing.
    Rewritten {
        /// The command with the capped argument.
        cmd: Cmd,
        /// Whether a nil reply means Redis stopped waiting (every blocking command but `WAIT`
        /// and `WAITAOF`, whose reply is a count).
        nil_is_timeout: bool,
    },
    /// Less than 1 ms left: the argument would be `0`, "for ever". Not sent.
    TooShort,
}

/// The upper-cased name of `cmd` (its first argument), if it has one of at most 16 bytes.
pub(crate) fn name(cmd: &Cmd) -> Option<String> {
    match cmd.args_iter().next()? {
        Arg::Simple(bytes) if bytes.len() <= 16 => {
            Some(String::from_utf8_lossy(bytes).to_ascii_uppercase())
        }
        _ => None,
    }
}

/// Where `cmd`'s timeout argument is (its index among the arguments, the name being 0) and how
/// it is written; `None` for a command that does not block.
fn timeout_arg(name: &str, args: &[&[u8]]) -> Option<(usize, Unit)> {
    let n = args.len();
    match name {
        "BLPOP" | "BRPOP" | "BRPOPLPUSH" | "BLMOVE" | "BZPOPMIN" | "BZPOPMAX" if n >= 3 => {
            Some((n - 1, Unit::Seconds))
        }
        "BLMPOP" | "BZMPOP" if n >= 2 => Some((1, Unit::Seconds)),
        "WAIT" if n >= 3 => Some((2, Unit::Millis)),
        "WAITAOF" if n >= 4 => Some((3, Unit::Millis)),
        "XREAD" | "XREADGROUP" => {
            // `BLOCK ms` among the options, all of which come before `STREAMS` (a key or an ID
            // after it may well be spelled "block"); XREADGROUP's options follow `GROUP group
            // consumer`, names that may be spelled "block" or "streams" too.
            let mut i = if name == "XREADGROUP" { 4 } else { 1 };
            while i < n {
                if args[i].eq_ignore_ascii_case(b"STREAMS") {
                    return None;
                }
                if args[i].eq_ignore_ascii_case(b"BLOCK") && i + 1 < n {
                    return Some((i + 1, Unit::Millis));
                }
                i += 1;
            }
            None
        }
        _ => None,
    }
}

/// The command's own timeout in milliseconds (`None`: for ever, or unreadable, which is
/// treated as "longer than any cap" so the cap applies).
fn own_ms(arg: &[u8], unit: Unit) -> Option<u64> {
    let text = std::str::from_utf8(arg).ok()?;
    let ms = match unit {
        Unit::Millis => text.trim().parse::<u64>().ok()?,
        Unit::Seconds => {
            let seconds: f64 = text.trim().parse().ok()?;
            if !seconds.is_finite() || seconds < 0.0 {
                return None;
            }
            // Redis rounds a decimal timeout to milliseconds; compare the same way (saturating
            // cast).
            (seconds * 1_000.0).round() as u64
        }
    };
    (ms > 0).then_some(ms)
}

/// `ms` written as `unit`: `S.mmm` seconds or whole milliseconds.
fn write(ms: u64, unit: Unit) -> String {
    match unit {
        Unit::Millis => ms.to_string(),
        Unit::Seconds => format!("{}.{:03}", ms / 1_000, ms % 1_000),
    }
}

/// Caps `cmd`'s timeout argument to `left` (rounded down to whole milliseconds).
pub(crate) fn cap(cmd: &Cmd, name: Option<&str>, left: Duration) -> Capped {
    let Some(name) = name else {
        return Capped::NotBlocking;
    };
    let mut args: Vec<&[u8]> = Vec::with_capacity(cmd.args_iter().len());
    for arg in cmd.args_iter() {
        match arg {
            Arg::Simple(bytes) => args.push(bytes),
            // A cursor belongs to SCAN-like commands, none of which block.
            _ => return Capped::NotBlocking,
        }
    }
    let Some((index, unit)) = timeout_arg(name, &args) else {
        return Capped::NotBlocking;
    };
    let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Capped::TooShort;
    }
    if own_ms(args[index], unit).is_some_and(|own| own <= ms) {
        return Capped::Within;
    }
    let value = write(ms, unit);
    let mut capped = Cmd::new();
    for (i, arg) in args.iter().enumerate() {
        if i == index {
            capped.arg(value.as_bytes());
        } else {
            capped.arg(*arg);
        }
    }
    Capped::Rewritten {
        cmd: capped,
        nil_is_timeout: !matches!(name, "WAIT" | "WAITAOF"),
    }
}

/// Whether `name` is a command that makes the server wait ([`cap`] rewrites its timeout): a
/// reply abandoned on one leaves the connection blocked on the server, so it is closed rather
/// than drained.
pub(crate) fn is_blocking(name: Option<&str>) -> bool {
    matches!(
        name,
        Some(
            "BLPOP"
                | "BRPOP"
                | "BRPOPLPUSH"
                | "BLMOVE"
                | "BZPOPMIN"
                | "BZPOPMAX"
                | "BLMPOP"
                | "BZMPOP"
                | "WAIT"
                | "WAITAOF"
                | "XREAD"
                | "XREADGROUP"
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".to_owned(),
            })
            .collect()
    }

    fn capped(cmd: &Cmd, ms: u64) -> Vec<String> {
        let cmd_name = name(cmd);
        match cap(cmd, cmd_name.as_deref(), Duration::from_millis(ms)) {
            Capped::Rewritten { cmd, .. } => args(&cmd),
            other => panic!("{:?} not rewritten: {other:?}", args(cmd)),
        }
    }

    #[test]
    fn each_blocking_command_has_its_timeout_capped_where_it_is() {
        assert_eq!(
            capped(redis::cmd("BLPOP").arg("a").arg("b").arg(10), 240),
            ["BLPOP", "a", "b", "0.240"]
        );
        assert_eq!(
            capped(redis::cmd("brpop").arg("a").arg(0), 1_500),
            ["brpop", "a", "1.500"]
        );
        assert_eq!(
            capped(
                redis::cmd("BLMOVE")
                    .arg("s")
                    .arg("d")
                    .arg("LEFT")
                    .arg("RIGHT")
                    .arg(5),
                999
            ),
            ["BLMOVE", "s", "d", "LEFT", "RIGHT", "0.999"]
        );
        assert_eq!(
            capped(redis::cmd("BZPOPMAX").arg("z").arg("2.5"), 2_000),
            ["BZPOPMAX", "z", "2.000"]
        );
        assert_eq!(
            capped(redis::cmd("BLMPOP").arg(0).arg(1).arg("k").arg("LEFT"), 70),
            ["BLMPOP", "0.070", "1", "k", "LEFT"]
        );
        assert_eq!(
            capped(
                redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(1)
                    .arg("block")
                    .arg(0)
                    .arg("STREAMS")
                    .arg("s")
                    .arg("$"),
                300
            ),
            ["XREAD", "COUNT", "1", "block", "300", "STREAMS", "s", "$"]
        );
        // A group called "streams" and a consumer called "block" are names, not options.
        assert_eq!(
            capped(
                redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg("streams")
                    .arg("block")
                    .arg("COUNT")
                    .arg(1)
                    .arg("BLOCK")
                    .arg(5_000)
                    .arg("STREAMS")
                    .arg("s")
                    .arg(">"),
                300
            ),
            [
                "XREADGROUP",
                "GROUP",
                "streams",
                "block",
                "COUNT",
                "1",
                "BLOCK",
                "300",
                "STREAMS",
                "s",
                ">"
            ]
        );
        assert_eq!(
            capped(redis::cmd("WAIT").arg(1).arg(0), 120),
            ["WAIT", "1", "120"]
        );
        assert_eq!(
            capped(redis::cmd("WAITAOF").arg(1).arg(0).arg(5_000), 120),
            ["WAITAOF", "1", "0", "120"]
        );
    }

    #[test]
    fn a_timeout_already_within_the_cap_is_left_alone() {
        let cmd = redis::cmd("BLPOP").arg("k").arg("0.1").clone();
        let cmd_name = name(&cmd);
        assert!(matches!(
            cap(&cmd, cmd_name.as_deref(), Duration::from_millis(100)),
            Capped::Within
        ));
        let cmd = redis::cmd("XREAD")
            .arg("BLOCK")
            .arg(50)
            .arg("STREAMS")
            .arg("s")
            .arg("0")
            .clone();
        let cmd_name = name(&cmd);
        assert!(matches!(
            cap(&cmd, cmd_name.as_deref(), Duration::from_millis(51)),
            Capped::Within
        ));
    }

    #[test]
    fn the_cap_rounds_down_and_is_never_zero() {
        let cmd = redis::cmd("BLPOP").arg("k").arg(10).clone();
        let cmd_name = name(&cmd);
        // 240.9 ms left: Redis is told 240 ms, never 241.
        match cap(&cmd, cmd_name.as_deref(), Duration::from_micros(240_900)) {
            Capped::Rewritten { cmd, .. } => {
                assert_eq!(args(&cmd), ["BLPOP", "k", "0.240"]);
            }
            other => panic!("{other:?}"),
        }
        // 0.9 ms left would be written 0, "for ever": not sent.
        assert!(matches!(
            cap(&cmd, cmd_name.as_deref(), Duration::from_micros(900)),
            Capped::TooShort
        ));
        let wait = redis::cmd("WAIT").arg(1).arg(10).clone();
        assert!(matches!(
            cap(&wait, Some("WAIT"), Duration::ZERO),
            Capped::TooShort
        ));
    }

    #[test]
    fn commands_that_do_not_block_are_sent_as_they_are() {
        for cmd in [
            redis::cmd("GET").arg("k").clone(),
            redis::cmd("LPOP").arg("k").clone(),
            // XREAD without BLOCK does not block; a stream named "block" is not the option.
            redis::cmd("XREAD")
                .arg("STREAMS")
                .arg("block")
                .arg("0")
                .clone(),
            // Too few arguments to be a valid BLPOP: Redis answers the error itself.
            redis::cmd("BLPOP").arg("k").clone(),
        ] {
            let cmd_name = name(&cmd);
            assert!(
                matches!(
                    cap(&cmd, cmd_name.as_deref(), Duration::from_millis(100)),
                    Capped::NotBlocking
                ),
                "{:?}",
                args(&cmd)
            );
        }
    }
}
