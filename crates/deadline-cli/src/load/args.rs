//! `deadline load`'s arguments checked before anything starts, the scenario they describe, and
//! the one-line description of a run's settings.

use anyhow::bail;

use super::LoadArgs;
use crate::harness::Scenario;

pub(super) fn validate(args: &LoadArgs) -> anyhow::Result<()> {
    if !(args.rate > 0.0 && args.rate.is_finite() && args.rate <= 100_000.0) {
        bail!(
            "--rate must be above 0 and at most 100000, not {}",
            args.rate
        );
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite() && args.seconds <= 3_600.0) {
        bail!(
            "--seconds must be above 0 and at most 3600, not {}",
            args.seconds
        );
    }
    // Every user is held in memory until the end: keep the total sane.
    let users = args.rate * args.seconds;
    if users > 1_000_000.0 {
        bail!("--rate times --seconds is {users:.0} users; at most 1,000,000 per run");
    }
    if users < 1.0 {
        bail!("--rate times --seconds must be at least one user, not {users}");
    }
    if !(0.0..=1.0).contains(&args.slow_share) {
        bail!(
            "--slow-share must be between 0 and 1, not {}",
            args.slow_share
        );
    }
    if args.slots == 0 {
        bail!("--slots must be at least 1");
    }
    if args
        .retry_504_share
        .is_some_and(|s| !(0.0..=1.0).contains(&s))
    {
        bail!("--retry-504-share must be between 0 and 1");
    }
    if args.user_wait < 100 {
        bail!("--user-wait must be at least 100 ms");
    }
    if args.max_queue_wait == Some(0) {
        bail!("--max-queue-wait must be at least 1 ms");
    }
    if args.margin >= args.user_wait {
        bail!("--margin must be below --user-wait, or the user sends no budget");
    }
    if args.max_lag == Some(0) {
        bail!("--max-lag must be at least 1 ms");
    }
    if args.hop_slots == Some(0) {
        bail!("--hop-slots must be at least 1");
    }
    if args.hop_max_queue_wait.is_some()
        && args.hop_slots.is_none()
        && args.hop_slots_per_rate.is_none()
    {
        bail!("--hop-max-queue-wait needs --hop-slots or --hop-slots-per-rate");
    }
    if args
        .hop_slots_per_rate
        .is_some_and(|f| !(f > 0.0 && f.is_finite() && f <= 100.0))
    {
        bail!("--hop-slots-per-rate must be above 0 and at most 100");
    }
    if args.hop_max_queue_wait == Some(0) {
        bail!("--hop-max-queue-wait must be at least 1 ms");
    }
    if args.overload.is_some() {
        if !(args.search_seconds > 0.0
            && args.search_seconds.is_finite()
            && args.search_seconds <= 600.0)
        {
            bail!(
                "--search-seconds must be above 0 and at most 600, not {}",
                args.search_seconds
            );
        }
        if args.search_steps > 10 {
            bail!(
                "--search-steps must be at most 10, not {}",
                args.search_steps
            );
        }
        if !(args.slots_per_rate > 0.0
            && args.slots_per_rate.is_finite()
            && args.slots_per_rate <= 100.0)
        {
            bail!(
                "--slots-per-rate must be above 0 and at most 100, not {}",
                args.slots_per_rate
            );
        }
        // The search may double the rate up to 100,000 a second, and the multiples offer up
        // to 20 times the capacity: each run is held to the same bound on users.
        if 100_000.0 * args.search_seconds > 1_000_000.0 {
            bail!(
                "--search-seconds must be at most 10 (the search may reach 100,000 users a second)"
            );
        }
    }
    if let Some(mix) = &args.budget_mix
        && args.margin >= mix.shortest_wait()
    {
        bail!(
            "--margin must be below every wait of --budget-mix ({} ms), or those users send no budget",
            mix.shortest_wait()
        );
    }
    Ok(())
}

pub(super) fn scenario(args: &LoadArgs) -> Scenario {
    let flag = |name: &str, value: &dyn ToString| [name.to_owned(), value.to_string()];
    Scenario {
        gateway_timeout: args.gateway_timeout,
        gateway_attempts: args.gateway_attempts,
        orders_work: args.orders_work,
        orders_timeout: args.orders_timeout,
        orders_attempts: args.orders_attempts,
        inventory: [
            flag("--work", &args.fast_work),
            flag("--slots", &args.slots),
            flag("--slow-share", &args.slow_share),
            flag("--slow-work", &args.slow_work),
            flag("--seed", &args.seed),
        ]
        .concat(),
    }
}

impl LoadArgs {
    /// The run's settings in one line, for the table's header.
    pub(super) fn describe(&self) -> String {
        let mut extra = String::new();
        if let Some(window) = self.outage {
            extra.push_str(&format!(
                "; inventory down from {} s for {} s",
                window.start, window.seconds
            ));
        }
        if self.no_retry_budget {
            extra.push_str("; no retry budget");
        } else if let Some(budget) = self.retry_budget {
            extra.push_str(&format!("; retry budget {budget}"));
        }
        if let Some(share) = self.retry_504_share {
            extra.push_str(&format!("; 504 retried with {share} of its budget"));
        }
        if self.slow_per_attempt {
            extra.push_str("; slowness per attempt");
        }
        if let Some(hedge) = self.hedge {
            extra.push_str(&format!("; hedge {hedge}"));
        }
        if self.absolute_deadline {
            extra.push_str("; users also send X-Request-Deadline");
        }
        if let Some(f) = self.hop_slots_per_rate {
            extra.push_str(&format!("; gateway and orders {f} slots per user/s"));
            if let Some(wait) = self.hop_max_queue_wait {
                extra.push_str(&format!(", wait cap {wait} ms"));
            }
        } else if let Some(slots) = self.hop_slots {
            extra.push_str(&format!("; gateway and orders {slots} slots"));
            if let Some(wait) = self.hop_max_queue_wait {
                extra.push_str(&format!(", wait cap {wait} ms"));
            }
        }
        if let Some(max_lag) = self.max_lag {
            extra.push_str(&format!("; every hop sheds at {max_lag} ms of runtime lag"));
        }
        let base = format!(
            "{}/s for {} s; inventory {} slots, {} ms ({} % of requests {} ms, seed {}), queue {}{}; users wait {}",
            self.rate,
            self.seconds,
            self.slots,
            self.fast_work,
            self.slow_share * 100.0,
            self.slow_work,
            self.seed,
            self.queue,
            match (self.admission, self.max_queue_wait) {
                (true, Some(ms)) => format!(" with admission, wait cap {ms} ms"),
                (false, Some(ms)) => format!(" with a wait cap of {ms} ms"),
                (true, None) => " with admission".to_owned(),
                (false, None) => String::new(),
            },
            match &self.budget_mix {
                Some(mix) => format!("{mix} (ms:share)"),
                None => format!("{} ms", self.user_wait),
            }
        );
        base + &extra
    }
}
