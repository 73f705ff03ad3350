//! The timers along a request's path, read from each hop's configuration, and the rules that
//! find the ones that disagree.
//!
//! A request crosses a cloud balancer, nginx, HAProxy, one or more services and a database.
//! Each has timeouts of its own, configured in its own file by its own team, and each looks
//! sensible alone. The failure is in how they line up: nginx gives up after `proxy_read_timeout
//! 1s` and answers 504 while the service behind it, with no limit of its own, works on for
//! nobody. This module puts every hop's timers side by side ([`Hop`], [`Timer`]) and checks them
//! ([`check`]).
//!
//! # What a timer is
//!
//! Every timer has a [`Kind`] (a total, an inactivity timer between two reads, a connect, a
//! queue wait or a keep-alive) and a [`Role`]: what it bounds. The rules compare roles, not
//! names: nginx's `proxy_read_timeout`, HAProxy's `timeout server` and a service's per-attempt
//! timeout all *wait on the next hop* ([`Role::Waits`]); a budget, a service's front timeout
//! and a statement limit bound the hop's *own* answer ([`Role::Own`]). An inactivity timer
//! between reads is compared as if it were a total: for a request whose answer comes in one
//! piece (the common case) it is one, and when it fires the proxy answers 504 and hangs up.
//!
//! # The rules, and why
//!
//! - **Inner outlasts outer** ([`Rule::InnerOutlastsOuter`]): a hop's answer bound must be at
//!   most the tightest bound of every hop in front of it, less a margin (the reply's way back).
//!   A longer (or unset) inner limit means work continues after the front has answered 504. A
//!   hop that reads a budget from the hop in front (a deadline service behind one that
//!   propagates) is bounded by it and is not checked.
//! - **Keep-alive reversed** ([`Rule::KeepAliveReversed`]): the opposite order holds for idle
//!   connections: a server must keep an idle connection open *longer* than the proxy in front
//!   keeps it in its pool, or the proxy sends a request on a connection the server is closing
//!   at that moment and answers 502.
//! - **Retry on timeout without a cap** ([`Rule::RetryWithoutCap`]): a proxy that retries a
//!   timed-out request on another server with no limit on the total time does the work twice
//!   and makes the user wait twice (nginx's default `proxy_next_upstream error timeout` with
//!   `proxy_next_upstream_timeout 0`; HAProxy's opt-in `retry-on response-timeout`).
//! - **Server timeout unset** ([`Rule::ServerTimeoutUnset`]): HAProxy's `timeout server` unset
//!   waits forever.
//! - **Statement limit** ([`Rule::StatementLimit`]): a database statement limit of 0 (none), or
//!   longer than what the hops in front allow, runs statements nobody waits for.
//! - **Pool wait unset** ([`Rule::PoolWaitUnset`]): a request without a budget waits for a
//!   pooled connection forever.
//! - **Attempt below the retransmission timeout** ([`Rule::AttemptBelowRto`]): TCP sends its
//!   first retransmission of a lost SYN after 1 s; a connect or per-attempt timeout shorter
//!   than that fails the attempt on one lost packet.
//!
//! Everything here is pure: the configuration parsers ([`nginx`], [`haproxy`]) take text and a
//! loader for includes, and the caller does the reading.

use std::fmt;
use std::time::Duration;

pub mod haproxy;
pub mod nginx;
pub mod service;

/// TCP's initial retransmission timeout (RFC 6298): a lost SYN is sent again after this.
pub const TCP_INITIAL_RTO: Duration = Duration::from_secs(1);

/// What a timer measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Kind {
    /// From the start to the end of something, whatever happens in between.
    Total,
    /// Between two reads (or writes): reset by every byte that moves.
    Inactivity,
    /// Making a connection.
    Connect,
    /// Waiting for a slot, a server or a pooled connection.
    Queue,
    /// How long an idle connection is kept open.
    KeepAlive,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Total => "total",
            Kind::Inactivity => "inactivity",
            Kind::Connect => "connect",
            Kind::Queue => "queue",
            Kind::KeepAlive => "keep-alive",
        })
    }
}

/// What a timer bounds, which decides which rules compare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Role {
    /// The hop's whole answer: a budget, a front timeout, a statement limit.
    Own,
    /// How long the hop waits on the next hop (per attempt) before it answers its caller.
    Waits,
    /// The side facing the caller: client inactivity, the idle time of a caller's connection.
    Caller,
    /// The side facing the next hop: connect, queue, the idle time of a pooled connection.
    Callee,
}

/// A timer's value: a time, or no limit at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Never fires (unset, or set to 0 where 0 means off).
    Unlimited,
    /// Fires after this long.
    After(Duration),
}

impl Limit {
    /// The time, if there is a limit.
    pub fn duration(self) -> Option<Duration> {
        match self {
            Limit::Unlimited => None,
            Limit::After(d) => Some(d),
        }
    }

    /// `After(ms)`, or `Unlimited` for 0 (the usual meaning of a 0 timeout).
    pub fn from_millis_zero_off(ms: u64) -> Limit {
        if ms == 0 {
            Limit::Unlimited
        } else {
            Limit::After(Duration::from_millis(ms))
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Unlimited => f.write_str("no limit"),
            Limit::After(d) => write!(f, "{} ms", d.as_millis()),
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.duration() {
            None => s.serialize_none(),
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        }
    }
}

/// Where a timer was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case", tag = "from"))]
pub enum Origin {
    /// A line of a configuration file.
    Line {
        /// The file, as its reader named it.
        file: String,
        /// The line, from 1.
        line: u32,
    },
    /// Not set: the program's default applies to the block that starts at this line.
    Default {
        /// The file, as its reader named it.
        file: String,
        /// The line of the block (or directive) the default applies to, from 1.
        line: u32,
    },
    /// A key of a document or a setting: a service's `/deadline/limits` key, a database
    /// setting and its source, a command-line flag.
    Key {
        /// Where the document came from (a URL, a database, the command line).
        source: String,
        /// The key or setting, with its own source where it has one.
        key: String,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Line { file, line } => write!(f, "{file}:{line}"),
            Origin::Default { file, line } => write!(f, "{file}:{line} (default)"),
            Origin::Key { source, key } => write!(f, "{source} {key}"),
        }
    }
}

/// One timer of one hop.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Timer {
    /// Its name in its own configuration (`proxy_read_timeout`, `timeout server`,
    /// `front_timeout_ms`).
    pub name: String,
    /// What it measures.
    pub kind: Kind,
    /// What it bounds.
    pub role: Role,
    /// Its value.
    pub limit: Limit,
    /// Where it was read.
    pub origin: Origin,
    /// The part of the configuration it applies to (`server 127.0.0.1:8080 location /`,
    /// `backend app`), empty for a hop with one scope.
    pub scope: String,
}

/// A proxy that retries a request that timed out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TimeoutRetry {
    /// The directive that turns it on (`proxy_next_upstream error timeout`, `retry-on ...`).
    pub directive: String,
    /// Where that directive was read (or the block its default applies to).
    pub origin: Origin,
    /// The cap on the time all tries together may take.
    pub cap: Limit,
    /// The part of the configuration it applies to.
    pub scope: String,
}

/// What kind of hop a [`Hop`] is, which decides what the rules ask of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum HopKind {
    /// What the user waits (`--budget`).
    Budget,
    /// A cloud balancer known by its idle timeout.
    Balancer,
    /// nginx.
    Nginx,
    /// HAProxy.
    Haproxy,
    /// A deadline service (its `/deadline/limits`).
    Service,
    /// PostgreSQL.
    Postgres,
}

/// One hop of the path and its timers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Hop {
    /// The hop's name: its file, URL or flag.
    pub name: String,
    /// What it is.
    pub kind: HopKind,
    /// Its timers, in the order they were read.
    pub timers: Vec<Timer>,
    /// Its retries of timed-out requests.
    pub retries: Vec<TimeoutRetry>,
    /// Whether it sends the next hop a budget (a deadline service that propagates): a next
    /// hop that reads budgets is then bounded by it.
    pub sends_budget: bool,
    /// Whether it reads a budget from its caller (a deadline service).
    pub reads_budget: bool,
}

impl Hop {
    /// A hop with no timers yet.
    pub fn new(name: impl Into<String>, kind: HopKind) -> Hop {
        Hop {
            name: name.into(),
            kind,
            timers: Vec::new(),
            retries: Vec::new(),
            sends_budget: false,
            reads_budget: false,
        }
    }

    /// The hop of `--budget`: the user waits `budget`.
    pub fn budget(budget: Duration) -> Hop {
        let mut hop = Hop::new("budget", HopKind::Budget);
        hop.timers.push(Timer {
            name: "budget".into(),
            kind: Kind::Total,
            role: Role::Own,
            limit: Limit::After(budget),
            origin: Origin::Key {
                source: "command line".into(),
                key: "--budget".into(),
            },
            scope: String::new(),
        });
        hop
    }

    /// The hop of a cloud balancer whose idle timeout is `idle`: it closes a connection, to
    /// either side, with no data for that long, so it both bounds the wait for an answer and
    /// keeps idle upstream connections that long.
    pub fn balancer(idle: Duration) -> Hop {
        let mut hop = Hop::new("balancer", HopKind::Balancer);
        let origin = Origin::Key {
            source: "command line".into(),
            key: "--balancer-idle".into(),
        };
        for (kind, role) in [
            (Kind::Inactivity, Role::Waits),
            (Kind::KeepAlive, Role::Callee),
        ] {
            hop.timers.push(Timer {
                name: "idle timeout".into(),
                kind,
                role,
                limit: Limit::After(idle),
                origin: origin.clone(),
                scope: String::new(),
            });
        }
        hop
    }

    /// The timers that bound this hop's answer to its caller: its own, or else (a proxy has
    /// none) its waits on the next hop.
    fn answer_bounds(&self) -> impl Iterator<Item = &Timer> {
        let has_own = self.timers.iter().any(|t| t.role == Role::Own);
        self.timers.iter().filter(move |t| {
            if has_own {
                t.role == Role::Own
            } else {
                t.role == Role::Waits
            }
        })
    }
}

/// A rule of [`check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Rule {
    /// An inner hop may take longer than a hop in front waits for it, less the margin.
    InnerOutlastsOuter,
    /// A server's idle timeout is not longer than the upstream keep-alive of the proxy in
    /// front.
    KeepAliveReversed,
    /// A proxy retries timed-out requests with no cap on the total time.
    RetryWithoutCap,
    /// HAProxy's `timeout server` is unset: no limit.
    ServerTimeoutUnset,
    /// A database statement limit is unset or longer than the hops in front allow.
    StatementLimit,
    /// A pool wait is unset.
    PoolWaitUnset,
    /// A connect or per-attempt timeout is below TCP's initial retransmission timeout.
    AttemptBelowRto,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::InnerOutlastsOuter => "inner-outlasts-outer",
            Rule::KeepAliveReversed => "keep-alive-reversed",
            Rule::RetryWithoutCap => "retry-without-cap",
            Rule::ServerTimeoutUnset => "server-timeout-unset",
            Rule::StatementLimit => "statement-limit",
            Rule::PoolWaitUnset => "pool-wait-unset",
            Rule::AttemptBelowRto => "attempt-below-rto",
        })
    }
}

/// One end of a violation: a timer of a hop.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct End {
    /// The hop's name.
    pub hop: String,
    /// The timer (or retry directive).
    pub name: String,
    /// Its value.
    pub limit: Limit,
    /// Where it was read.
    pub origin: Origin,
    /// Its scope in the hop.
    pub scope: String,
}

impl End {
    fn of(hop: &Hop, timer: &Timer) -> End {
        End {
            hop: hop.name.clone(),
            name: timer.name.clone(),
            limit: timer.limit,
            origin: timer.origin.clone(),
            scope: timer.scope.clone(),
        }
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} = {} at {}",
            self.hop, self.name, self.limit, self.origin
        )?;
        if !self.scope.is_empty() {
            write!(f, " ({})", self.scope)?;
        }
        Ok(())
    }
}

/// A broken rule, with both ends where there are two and a one-line fix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The outer end (the hop in front), where the rule compares two timers.
    pub outer: Option<End>,
    /// The timer at fault.
    pub inner: End,
    /// What goes wrong, in one line.
    pub problem: String,
    /// How to fix it, in one line.
    pub fix: String,
}

/// The outcome of [`check`]: every violation, and the path's effective limit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Report {
    /// The violations, hop by hop in path order.
    pub violations: Vec<Violation>,
    /// The shortest answer bound on the path and who owns it (`None` when no hop has one).
    pub effective: Option<End>,
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Checks the hops, given in path order from the user inward, against every rule; `margin`
/// is what each inner hop must leave its outer one for the answer's way back.
pub fn check(hops: &[Hop], margin: Duration) -> Report {
    let mut violations = Vec::new();
    // The tightest answer bound of the hops in front, and its owner.
    let mut outer: Option<(&Hop, &Timer, Duration)> = None;
    let mut effective: Option<(&Hop, &Timer, Duration)> = None;
    for (i, hop) in hops.iter().enumerate() {
        let previous = i.checked_sub(1).map(|p| &hops[p]);
        let bounded_by_budget = previous.is_some_and(|p| p.sends_budget) && hop.reads_budget;
        if let Some((outer_hop, outer_timer, outer_limit)) = outer {
            if hop.kind == HopKind::Postgres {
                statement_limits(hop, Some((outer_hop, outer_timer, outer_limit)), margin)
                    .for_each(|v| violations.push(v));
            } else if !bounded_by_budget {
                inner_outlasts(
                    hop,
                    (outer_hop, outer_timer, outer_limit),
                    margin,
                    &mut violations,
                );
            }
        } else if hop.kind == HopKind::Postgres {
            statement_limits(hop, None, margin).for_each(|v| violations.push(v));
        }
        if let Some(previous) = previous {
            keep_alive(previous, hop, &mut violations);
        }
        single_hop_rules(hop, &mut violations);
        for timer in hop
            .timers
            .iter()
            .filter(|t| matches!(t.role, Role::Own | Role::Waits))
        {
            if let Some(d) = timer.limit.duration() {
                if hop.kind != HopKind::Postgres && outer.is_none_or(|(_, _, o)| d < o) {
                    outer = Some((hop, timer, d));
                }
                if effective.is_none_or(|(_, _, e)| d < e) {
                    effective = Some((hop, timer, d));
                }
            }
        }
    }
    Report {
        violations,
        effective: effective.map(|(hop, timer, _)| End::of(hop, timer)),
    }
}

/// The first rule for one inner hop against the tightest bound in front of it.
fn inner_outlasts(
    hop: &Hop,
    (outer_hop, outer_timer, outer): (&Hop, &Timer, Duration),
    margin: Duration,
    violations: &mut Vec<Violation>,
) {
    let allowed = outer.saturating_sub(margin);
    for timer in hop.answer_bounds() {
        // HAProxy's unset `timeout server` has a rule of its own.
        if timer.limit == Limit::Unlimited && hop.kind == HopKind::Haproxy {
            continue;
        }
        let too_long = timer.limit.duration().is_none_or(|d| d > allowed);
        if !too_long {
            continue;
        }
        let fix = match hop.kind {
            HopKind::Service => format!(
                "start {} with --front-timeout {} (or lower it to at most that)",
                hop.name,
                ms(outer)
            ),
            _ => format!(
                "set {} to at most {} ms (the outer {} ms less {} ms margin), or raise the outer one",
                timer.name,
                ms(allowed),
                ms(outer),
                ms(margin)
            ),
        };
        violations.push(Violation {
            rule: Rule::InnerOutlastsOuter,
            outer: Some(End::of(outer_hop, outer_timer)),
            inner: End::of(hop, timer),
            problem: format!(
                "{} may take {} but {} gives up after {} ms: work goes on after the front has answered",
                hop.name, timer.limit, outer_hop.name, ms(outer)
            ),
            fix,
        });
    }
}

/// The database rule: a statement limit unset, or longer than the hops in front allow.
fn statement_limits<'a>(
    hop: &'a Hop,
    outer: Option<(&'a Hop, &'a Timer, Duration)>,
    margin: Duration,
) -> impl Iterator<Item = Violation> + 'a {
    hop.timers
        .iter()
        .filter(|t| t.name == "statement_timeout")
        .filter_map(move |timer| {
            let outer_end = outer.map(|(h, t, _)| End::of(h, t));
            match (timer.limit.duration(), outer) {
                (None, _) => Some(Violation {
                    rule: Rule::StatementLimit,
                    outer: outer_end,
                    inner: End::of(hop, timer),
                    problem: "statement_timeout is 0: a statement nobody waits for runs to its end"
                        .into(),
                    fix: format!(
                        "ALTER DATABASE/ROLE ... SET statement_timeout = '{}ms' (or in postgresql.conf)",
                        outer.map_or(30_000, |(_, _, o)| ms(o.saturating_sub(margin)))
                    ),
                }),
                (Some(d), Some((outer_hop, _, o))) if d > o.saturating_sub(margin) => {
                    Some(Violation {
                        rule: Rule::StatementLimit,
                        outer: outer_end,
                        inner: End::of(hop, timer),
                        problem: format!(
                            "a statement may run {} ms but {} gives up after {} ms",
                            ms(d),
                            outer_hop.name,
                            ms(o)
                        ),
                        fix: format!(
                            "lower statement_timeout to at most {} ms",
                            ms(o.saturating_sub(margin))
                        ),
                    })
                }
                _ => None,
            }
        })
}

/// The keep-alive rule between a proxy and the server behind it.
fn keep_alive(proxy: &Hop, server: &Hop, violations: &mut Vec<Violation>) {
    let pooled = proxy
        .timers
        .iter()
        .filter(|t| t.kind == Kind::KeepAlive && t.role == Role::Callee);
    for kept in pooled {
        for idle in server
            .timers
            .iter()
            .filter(|t| t.kind == Kind::KeepAlive && t.role == Role::Caller)
        {
            let reversed = match (idle.limit.duration(), kept.limit.duration()) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(i), Some(k)) => i <= k,
            };
            if reversed {
                violations.push(Violation {
                    rule: Rule::KeepAliveReversed,
                    outer: Some(End::of(proxy, kept)),
                    inner: End::of(server, idle),
                    problem: format!(
                        "{} closes idle connections after {} while {} keeps them {}: requests race the close (502)",
                        server.name, idle.limit, proxy.name, kept.limit
                    ),
                    fix: format!(
                        "make {} longer than {} (or shorten the proxy's)",
                        idle.name, kept.limit
                    ),
                });
            }
        }
    }
}

/// The rules that look at one hop alone.
fn single_hop_rules(hop: &Hop, violations: &mut Vec<Violation>) {
    for retry in &hop.retries {
        if retry.cap == Limit::Unlimited {
            violations.push(Violation {
                rule: Rule::RetryWithoutCap,
                outer: None,
                inner: End {
                    hop: hop.name.clone(),
                    name: retry.directive.clone(),
                    limit: retry.cap,
                    origin: retry.origin.clone(),
                    scope: retry.scope.clone(),
                },
                problem: "a timed-out request is sent again with no cap on the total time: the work is done twice".into(),
                fix: match hop.kind {
                    HopKind::Nginx => "add proxy_next_upstream_timeout (at most the read timeout), or drop `timeout` from proxy_next_upstream".into(),
                    _ => "drop response-timeout from retry-on (keep conn-failure)".into(),
                },
            });
        }
    }
    for timer in &hop.timers {
        let end = || End::of(hop, timer);
        if hop.kind == HopKind::Haproxy
            && timer.name == "timeout server"
            && timer.limit == Limit::Unlimited
        {
            violations.push(Violation {
                rule: Rule::ServerTimeoutUnset,
                outer: None,
                inner: end(),
                problem: "timeout server is unset: HAProxy waits for the server forever".into(),
                fix: "set timeout server (in defaults or the backend) below the front's limit"
                    .into(),
            });
        }
        if timer.name.ends_with("pool_wait_ms") && timer.limit == Limit::Unlimited {
            violations.push(Violation {
                rule: Rule::PoolWaitUnset,
                outer: None,
                inner: end(),
                problem: "a request without a budget waits for a pooled connection forever".into(),
                fix: "set --postgres-pool-wait MS on the service".into(),
            });
        }
        let per_attempt = timer.kind == Kind::Connect
            || (hop.kind == HopKind::Service && timer.role == Role::Waits);
        if let Some(d) = timer
            .limit
            .duration()
            .filter(|d| per_attempt && *d < TCP_INITIAL_RTO)
        {
            violations.push(Violation {
                rule: Rule::AttemptBelowRto,
                outer: None,
                inner: end(),
                problem: format!(
                    "{} is {} ms, below TCP's 1 s initial retransmission timeout: one lost SYN fails the attempt",
                    timer.name,
                    ms(d)
                ),
                fix: format!("raise {} to at least 1000 ms", timer.name),
            });
        }
    }
}

/// A malformed configuration: what is wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The file, as its reader named it.
    pub file: String,
    /// The line, from 1.
    pub line: u32,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Reads a time: digits and units in `units` (longest names first), several parts allowed
/// (`1m30s`); `bare` is the unit of a number without one. `None` when malformed or too long.
fn parse_time(text: &str, units: &[(&str, Duration)], bare: Duration) -> Option<Duration> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 12 {
            return None;
        }
        let n: u32 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = if rest.is_empty() {
            bare
        } else {
            let (name, unit) = units.iter().find(|(name, _)| rest.starts_with(name))?;
            rest = &rest[name.len()..];
            *unit
        };
        total = total.checked_add(unit.checked_mul(n)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests;
