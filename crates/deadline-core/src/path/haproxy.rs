//! HAProxy's timers, read from its configuration.
//!
//! The grammar is HAProxy's: one keyword and its arguments a line, sections opened by a line
//! starting with a section keyword (`global`, `defaults`, `frontend`, `backend`, `listen`, ...),
//! `#` starting a comment, arguments quoted with `"` or `'` and `\` escapes. A keyword this
//! reader does not know is skipped; a quote never closed or a time that does not parse is an
//! error naming the file and line.
//!
//! A proxy section takes what it does not set from the `defaults` section before it (or the one
//! it names with `from`). HAProxy's own defaults, which the rules depend on: `timeout server`
//! and `timeout client` unset mean no limit at all (HAProxy only warns at startup); `timeout
//! queue` defaults to `timeout connect`; `timeout http-keep-alive` to `timeout http-request`,
//! then to `timeout client`; `retries` to 3; `retry-on` to `conn-failure`, so retrying a request
//! whose answer timed out (`response-timeout`, or `all-retryable-errors` which includes it) is
//! opt-in, and then has no cap on the total time but the user's patience. Idle server
//! connections are kept for reuse up to `pool-purge-delay` (default 5 s).
//!
//! Times: `us`, `ms`, `s`, `m`, `h`, `d`; a bare number is milliseconds; 0 means no limit.

use std::collections::HashMap;
use std::time::Duration;

use super::{Hop, HopKind, Kind, Limit, Origin, ParseError, Role, TimeoutRetry, Timer};

/// HAProxy's default `pool-purge-delay`: how long idle server connections are kept.
const DEFAULT_POOL_PURGE: Duration = Duration::from_secs(5);

/// Reads an HAProxy time: one number and an optional unit (`us`, `ms`, `s`, `m`, `h`, `d`), a
/// bare number in milliseconds.
pub fn parse_time(text: &str) -> Option<Duration> {
    const UNITS: [(&str, Duration); 6] = [
        ("us", Duration::from_micros(1)),
        ("ms", Duration::from_millis(1)),
        ("s", Duration::from_secs(1)),
        ("m", Duration::from_secs(60)),
        ("h", Duration::from_secs(3_600)),
        ("d", Duration::from_secs(86_400)),
    ];
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    // One part only: `1m30s` is not HAProxy's.
    if text[digits..].bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    super::parse_time(text, &UNITS, Duration::from_millis(1))
}

/// The keywords that open a section.
const SECTIONS: [&str; 17] = [
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "resolvers",
    "peers",
    "userlist",
    "mailers",
    "program",
    "http-errors",
    "ring",
    "cache",
    "log-forward",
    "fcgi-app",
    "crt-store",
    "traces",
];

/// What a section sets, each with where.
#[derive(Debug, Clone, Default)]
struct Settings {
    timeouts: HashMap<String, (Limit, Origin)>,
    retries: Option<(u32, Origin)>,
    retry_on: Option<(Vec<String>, Origin)>,
    purge: Option<(Duration, Origin)>,
}

/// Splits one line into words (quotes and escapes resolved, comment dropped).
fn words(file: &str, number: u32, line: &str) -> Result<Vec<String>, ParseError> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '#' if word.is_none() => break,
            c if c.is_whitespace() => out.extend(word.take()),
            '\\' => {
                let w = word.get_or_insert_with(String::new);
                w.extend(chars.next());
            }
            '"' | '\'' => {
                let w = word.get_or_insert_with(String::new);
                let mut closed = false;
                while let Some(d) = chars.next() {
                    if d == c {
                        closed = true;
                        break;
                    }
                    if d == '\\' && c == '"' {
                        w.extend(chars.next());
                    } else {
                        w.push(d);
                    }
                }
                if !closed {
                    return Err(ParseError {
                        file: file.to_owned(),
                        line: number,
                        message: format!("a {c} quote is never closed"),
                    });
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    Ok(out)
}

/// A proxy section being read.
#[derive(Debug)]
struct Section {
    keyword: String,
    name: String,
    line: u32,
    base: Settings,
    own: Settings,
}

/// Reads the HAProxy configuration `text` (named `file`) into a hop.
pub fn parse(file: &str, text: &str) -> Result<Hop, ParseError> {
    let mut hop = Hop::new(format!("haproxy {file}"), HopKind::Haproxy);
    let mut defaults: HashMap<String, Settings> = HashMap::new();
    let mut last_defaults = Settings::default();
    let mut current: Option<Section> = None;
    let error = |line: u32, message: String| ParseError {
        file: file.to_owned(),
        line,
        message,
    };
    for (i, raw) in text.lines().enumerate() {
        let number = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let words = words(file, number, raw)?;
        let Some(keyword) = words.first() else {
            continue;
        };
        if SECTIONS.contains(&keyword.as_str()) {
            if let Some(done) = current.take() {
                finish(file, done, &mut hop, &mut defaults, &mut last_defaults);
            }
            let name = words
                .get(1)
                .filter(|w| *w != "from")
                .cloned()
                .unwrap_or_default();
            let base = match words.iter().position(|w| w == "from") {
                Some(at) => {
                    let Some(from) = words.get(at + 1) else {
                        return Err(error(
                            number,
                            "`from` needs a defaults section's name".into(),
                        ));
                    };
                    defaults.get(from).cloned().ok_or_else(|| {
                        error(
                            number,
                            format!("no defaults section named {from:?} before this"),
                        )
                    })?
                }
                None => last_defaults.clone(),
            };
            current = Some(Section {
                keyword: keyword.clone(),
                name,
                line: number,
                base: if keyword == "defaults" && !words.iter().any(|w| w == "from") {
                    Settings::default()
                } else {
                    base
                },
                own: Settings::default(),
            });
            continue;
        }
        let Some(section) = current.as_mut() else {
            return Err(error(
                number,
                format!(
                    "{keyword:?} is outside any section (global, defaults, frontend, backend, listen)"
                ),
            ));
        };
        if !matches!(
            section.keyword.as_str(),
            "defaults" | "frontend" | "backend" | "listen"
        ) {
            continue;
        }
        let origin = Origin::Line {
            file: file.to_owned(),
            line: number,
        };
        match keyword.as_str() {
            "timeout" => {
                let (Some(which), Some(value)) = (words.get(1), words.get(2)) else {
                    return Err(error(number, "timeout needs a name and a time".into()));
                };
                let t = parse_time(value).ok_or_else(|| {
                    error(number, format!("invalid time {value:?} in timeout {which}"))
                })?;
                let limit = if t.is_zero() {
                    Limit::Unlimited
                } else {
                    Limit::After(t)
                };
                section.own.timeouts.insert(which.clone(), (limit, origin));
            }
            "retries" => {
                let n = words
                    .get(1)
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| error(number, "retries needs a count".into()))?;
                section.own.retries = Some((n, origin));
            }
            "retry-on" => {
                if words.len() < 2 {
                    return Err(error(
                        number,
                        "retry-on needs at least one condition".into(),
                    ));
                }
                section.own.retry_on = Some((words[1..].to_vec(), origin));
            }
            "default-server" | "server" => {
                if let Some(at) = words.iter().position(|w| w == "pool-purge-delay") {
                    let value = words.get(at + 1).map(String::as_str).unwrap_or_default();
                    let t = parse_time(value).ok_or_else(|| {
                        error(
                            number,
                            format!("invalid time {value:?} in pool-purge-delay"),
                        )
                    })?;
                    if section.own.purge.as_ref().is_none_or(|(p, _)| t > *p) {
                        section.own.purge = Some((t, origin));
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(done) = current.take() {
        finish(file, done, &mut hop, &mut defaults, &mut last_defaults);
    }
    Ok(hop)
}

/// Ends a section: a `defaults` is kept for the sections after it, a proxy gives its timers.
fn finish(
    file: &str,
    section: Section,
    hop: &mut Hop,
    defaults: &mut HashMap<String, Settings>,
    last_defaults: &mut Settings,
) {
    let mut merged = section.base.clone();
    merged.timeouts.extend(section.own.timeouts.clone());
    for (slot, own) in [(&mut merged.retries, &section.own.retries)] {
        if own.is_some() {
            slot.clone_from(own);
        }
    }
    if section.own.retry_on.is_some() {
        merged.retry_on.clone_from(&section.own.retry_on);
    }
    if section.own.purge.is_some() {
        merged.purge.clone_from(&section.own.purge);
    }
    match section.keyword.as_str() {
        "defaults" => {
            if !section.name.is_empty() {
                defaults.insert(section.name.clone(), merged.clone());
            }
            *last_defaults = merged;
            return;
        }
        "frontend" | "backend" | "listen" => {}
        _ => return,
    }
    let scope = format!("{} {}", section.keyword, section.name)
        .trim()
        .to_owned();
    let unset = Origin::Default {
        file: file.to_owned(),
        line: section.line,
    };
    let get = |name: &str| merged.timeouts.get(name).cloned();
    let mut push = |name: &str, kind, role, value: (Limit, Origin)| {
        hop.timers.push(Timer {
            name: name.to_owned(),
            kind,
            role,
            limit: value.0,
            origin: value.1,
            scope: scope.clone(),
        });
    };
    let unlimited = || (Limit::Unlimited, unset.clone());
    let front = section.keyword != "backend";
    let back = section.keyword != "frontend";
    if front {
        let client = get("client").unwrap_or_else(unlimited);
        let request = get("http-request");
        let keep_alive = get("http-keep-alive")
            .or_else(|| request.clone())
            .unwrap_or_else(|| client.clone());
        push("timeout client", Kind::Inactivity, Role::Caller, client);
        if let Some(request) = request {
            push("timeout http-request", Kind::Total, Role::Caller, request);
        }
        push(
            "timeout http-keep-alive",
            Kind::KeepAlive,
            Role::Caller,
            keep_alive,
        );
    }
    if back {
        let connect = get("connect").unwrap_or_else(unlimited);
        let queue = get("queue").unwrap_or_else(|| connect.clone());
        push(
            "timeout server",
            Kind::Inactivity,
            Role::Waits,
            get("server").unwrap_or_else(unlimited),
        );
        push("timeout connect", Kind::Connect, Role::Callee, connect);
        push("timeout queue", Kind::Queue, Role::Callee, queue);
        let purge = merged.purge.clone().map_or(
            (Limit::After(DEFAULT_POOL_PURGE), unset.clone()),
            |(t, o)| (Limit::After(t), o),
        );
        push("pool-purge-delay", Kind::KeepAlive, Role::Callee, purge);
        let retries = merged.retries.as_ref().map_or(3, |(n, _)| *n);
        if let Some((conditions, origin)) = &merged.retry_on {
            let on_timeout = conditions
                .iter()
                .any(|c| c == "response-timeout" || c == "all-retryable-errors");
            if on_timeout && retries > 0 {
                hop.retries.push(TimeoutRetry {
                    directive: format!("retry-on {}", conditions.join(" ")),
                    origin: origin.clone(),
                    cap: Limit::Unlimited,
                    scope: scope.clone(),
                });
            }
        }
    }
}
