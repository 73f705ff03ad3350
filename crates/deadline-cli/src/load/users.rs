//! The users of `deadline load`: each sent on the open-loop schedule with what is left of its
//! wait as its budget (and, when asked, the instant it gives up), and what became of it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use deadline::Budget;
use deadline::absolute::WallInstant;
use deadline::dialect::{AbsoluteFormat, Dialect};
use indicatif::ProgressBar;
use tokio::time::Instant;

use super::LoadArgs;
use crate::grpc::users::Users;
use crate::harness::user_budget;
use crate::holds::{epoch_ms_now, wall_now};

/// One user's fate.
#[derive(Debug, Clone)]
pub(super) struct Outcome {
    pub(super) id: String,
    pub(super) sent_at: f64,
    pub(super) lateness_ms: f64,
    pub(super) in_time: bool,
    /// The status heard before the wait ran out, if any.
    pub(super) status: Option<u16>,
    pub(super) elapsed_ms: f64,
    /// When the user stopped waiting (epoch ms): answered or gave up.
    pub(super) left_at_ms: f64,
    /// The user's class in `--budget-mix` (0 without one).
    pub(super) class: usize,
    /// Why the call failed before the wait ran out, if it did.
    pub(super) error: Option<&'static str>,
}

/// The `user_errors` kind of a user the generator reached only after its wait was over.
const NOT_SENT: &str = "not sent, too late";

/// One user of the load: arrives at `due` and waits `wait` from then.
struct LoadUser {
    id: String,
    due: Instant,
    wait: Duration,
    margin: u64,
    /// Whether it also sends the instant it gives up (`--absolute-deadline`).
    absolute: bool,
    class: usize,
}

impl LoadUser {
    /// Sends the user's request and waits for the answer at most until `due + wait`.
    async fn send(self, client: &Users, url: &str) -> anyhow::Result<Outcome> {
        // A generator running late (or a spawned task that starts late) has already spent part
        // of the user's wait, so the user sends what is left of it and gives up at `due +
        // wait`: a late generator must not hand out time the user no longer has. Lateness and
        // budget come from the same instant: the user is sent now, however late the loop or
        // this task started.
        let now = Instant::now();
        let lateness_ms = now.saturating_duration_since(self.due).as_secs_f64() * 1_000.0;
        let (budget, left) = budget_left(self.due, self.wait, self.margin, now);
        if left.is_zero() {
            // The generator reached this user after its wait was over: a real user would have
            // sent nothing, so nothing is sent (and no hop is handed a budget nobody has).
            let at = epoch_ms_now();
            return Ok(Outcome {
                in_time: false,
                status: None,
                id: self.id,
                sent_at: at,
                lateness_ms,
                elapsed_ms: lateness_ms,
                left_at_ms: at,
                class: self.class,
                error: Some(NOT_SENT),
            });
        }
        // The instant the user gives up, on the wall clock every hop on this machine reads.
        let gives_up = self
            .absolute
            .then(|| gives_up_header(left, wall_now()))
            .flatten();
        let user = client
            .one(url, &self.id, Some(budget), gives_up, left)
            .await?;
        Ok(Outcome {
            in_time: user.status == Some(200),
            status: user.status,
            id: self.id,
            sent_at: user.sent_ms,
            lateness_ms,
            elapsed_ms: user.elapsed.as_secs_f64() * 1_000.0,
            left_at_ms: user.left_ms,
            class: self.class,
            error: user.error,
        })
    }
}

/// How many loopback addresses the users connect from when the edge is on 127.0.0.1.
pub(super) const SOURCE_ADDRESSES: u8 = 16;

/// The local addresses the users' connections are made from, one client each: with the edge on
/// `127.0.0.1`, the addresses 127.0.0.2 to 127.0.0.17 (every 127.0.0.0/8 address is this host's
/// own); elsewhere, one client that lets the system choose.
///
/// Why: a user who gives up closes its connection, and past capacity most users do, so the
/// generator opens connections by the thousand a second to one address and port. For each, the
/// kernel searches one source address's ephemeral ports for a 4-tuple not in use (connections
/// in `TIME_WAIT` included): in a run without deadlines at 4,000 users a second that search was
/// 43 % of the generator's CPU, and the generator fell 2 s behind. Users come from many hosts;
/// sixteen source addresses give the search sixteen times the room, and each client's pool of
/// idle connections a sixteenth of the length to sweep.
pub(super) fn source_addresses(edge_url: &str) -> Vec<Option<std::net::IpAddr>> {
    let on_loopback = edge_url
        .strip_prefix("http://127.0.0.1:")
        .is_some_and(|port| port.parse::<u16>().is_ok());
    if !on_loopback {
        return vec![None];
    }
    (2..2 + SOURCE_ADDRESSES)
        .map(|last| Some(std::net::IpAddr::from([127, 0, 0, last])))
        .collect()
}

/// Sends the run's users on their open-loop schedule, user `i` through `clients[i % n]`, and
/// waits for every one of them.
pub(super) async fn send_users(
    args: &LoadArgs,
    deadlines: bool,
    clients: &[Users],
    url: Arc<str>,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<Outcome>> {
    anyhow::ensure!(!clients.is_empty(), "no client to send the users with");
    let total = (args.rate * args.seconds).round().max(1.0) as usize;
    let period = Duration::from_secs_f64(1.0 / args.rate);
    // Each user's class, wait and budget: one class of `--user-wait` without a mix.
    let waits: Vec<u64> = match &args.budget_mix {
        Some(mix) => mix.0.iter().map(|c| c.wait_ms).collect(),
        None => vec![args.user_wait],
    };
    progress.set_length(total as u64);
    progress.set_position(0);
    progress.set_message(if deadlines {
        "with deadlines"
    } else {
        "without deadlines"
    });
    let start = Instant::now();
    let mut users = tokio::task::JoinSet::new();
    for i in 0..total {
        let due = start + period.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        let client = clients[i % clients.len()].clone();
        let (url, progress) = (url.clone(), progress.clone());
        let id = format!("load-{}-{i}", args.seed);
        let class = args.budget_mix.as_ref().map_or(0, |mix| mix.class_of(i));
        let wait = Duration::from_millis(waits[class]);
        let user = LoadUser {
            id,
            due,
            wait,
            margin: args.margin,
            absolute: deadlines && args.absolute_deadline,
            class,
        };
        users.spawn(async move {
            let outcome = user.send(&client, &url).await;
            progress.inc(1);
            outcome
        });
    }
    let mut outcomes = Vec::with_capacity(total);
    while let Some(joined) = users.join_next().await {
        outcomes.push(joined.context("a user task failed")??);
    }
    Ok(outcomes)
}

/// The `X-Request-Deadline` of a user who still waits `left` at `now` on the wall clock (the
/// core's dialect writes it), or `None` once nothing is left.
fn gives_up_header(left: Duration, now: WallInstant) -> Option<http::HeaderValue> {
    let left = Budget::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))?;
    Dialect::RequestDeadline(AbsoluteFormat::Rfc3339Millis).encode(left, now)
}

/// What a user who arrived at `due` and waits `wait` sends at `now`: the budget (what is left of
/// the wait, less `margin`; at least 1 ms) and how long it still waits.
fn budget_left(due: Instant, wait: Duration, margin: u64, now: Instant) -> (u64, Duration) {
    let left = (due + wait).saturating_duration_since(now);
    let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    (user_budget(left_ms, margin), left)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use deadline::absolute::WallInstant;
    use tokio::time::Instant;

    use super::{LoadUser, NOT_SENT, budget_left, gives_up_header};

    #[tokio::test]
    async fn a_user_reached_after_its_wait_is_not_sent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/order", listener.local_addr().unwrap());
        let client = crate::grpc::users::Users::new(crate::grpc::users::Protocol::Http1);
        let user = |due| LoadUser {
            id: "u-1".to_owned(),
            due,
            wait: Duration::from_millis(100),
            margin: 50,
            absolute: false,
            class: 0,
        };
        let gone = user(Instant::now() - Duration::from_millis(300));
        let outcome = gone.send(&client, &url).await.unwrap();
        assert_eq!(outcome.error, Some(NOT_SENT));
        assert!(outcome.lateness_ms >= 300.0 && !outcome.in_time);
        // Nothing reached the service: no connection is waiting to be accepted.
        let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(
            accepted.is_err(),
            "the generator connected for a user already gone"
        );
        // A user on time is sent (and, with nobody answering, waits its wait out).
        let on_time = user(Instant::now());
        let (outcome, accepted) = tokio::join!(on_time.send(&client, &url), listener.accept());
        assert!(accepted.is_ok());
        assert_eq!(outcome.unwrap().error, None);
    }

    #[test]
    fn users_of_a_loopback_edge_come_from_sixteen_addresses() {
        let addresses = super::source_addresses("http://127.0.0.1:4000");
        assert_eq!(addresses.len(), 16);
        assert_eq!(addresses[0], Some([127, 0, 0, 2].into()));
        assert_eq!(addresses[15], Some([127, 0, 0, 17].into()));
        assert_eq!(super::source_addresses("http://10.0.0.1:4000"), vec![None]);
        assert_eq!(super::source_addresses("http://[::1]:4000"), vec![None]);
    }

    #[tokio::test]
    async fn a_client_bound_to_a_source_address_connects_from_it_and_counts() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/order", listener.local_addr().unwrap());
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let client = crate::grpc::users::Users::Http(crate::users::counted_user_client(
            Some([127, 0, 0, 9].into()),
            opened.clone(),
        ));
        let user = LoadUser {
            id: "u-1".to_owned(),
            due: Instant::now(),
            wait: Duration::from_millis(200),
            margin: 50,
            absolute: false,
            class: 0,
        };
        let (outcome, accepted) = tokio::join!(user.send(&client, &url), listener.accept());
        let (_, peer) = accepted.unwrap();
        assert_eq!(peer.ip(), std::net::IpAddr::from([127, 0, 0, 9]));
        assert!(outcome.is_ok());
        assert_eq!(opened.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn a_late_send_carries_only_what_is_left_of_the_users_wait() {
        let due = Instant::now();
        let wait = Duration::from_millis(2_000);
        // On time: the whole wait less the margin.
        assert_eq!(budget_left(due, wait, 50, due), (1_950, wait));
        // 190 ms late: 190 ms less of both.
        let late = due + Duration::from_millis(190);
        assert_eq!(
            budget_left(due, wait, 50, late),
            (1_760, Duration::from_millis(1_810))
        );
        // Later than the whole wait: nothing left to wait, the smallest budget.
        let gone = due + Duration::from_millis(2_500);
        assert_eq!(budget_left(due, wait, 50, gone), (1, Duration::ZERO));
    }

    #[test]
    fn a_users_give_up_instant_is_sent_as_the_services_read_it() {
        let now = WallInstant::from_system_time(
            std::time::UNIX_EPOCH + Duration::from_millis(1_796_367_398_003),
        );
        let at = now.after(Duration::from_millis(1_800));
        let value =
            gives_up_header(Duration::from_millis(1_800), now).expect("a spellable instant");
        assert_eq!(value, "2026-12-04T06:56:39.803Z");
        assert_eq!(WallInstant::parse(value.as_bytes()), Ok(at));
        assert_eq!(gives_up_header(Duration::ZERO, now), None);
    }
}
