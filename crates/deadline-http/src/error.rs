//! Errors a caller can match on (downcast from a `BoxError` where a tower stack erases them).
//!
//! An outbound call through [`PropagateDeadline`](crate::PropagateDeadline) fails with a
//! [`CallError`]; the deadline-related variants wrap the concrete [`DeadlineExceeded`] and
//! [`AttemptSkipped`] types, so a handler can answer 504 for either the same way it does for
//! [`check`](crate::check)'s error.

use std::fmt;
use std::time::Duration;

use deadline::Stop;
use deadline::trace::outcome;

use crate::activity::Activity;

/// A boxed error, as tower and hyper use for errors they erase.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request's deadline (less its reply reserve) passed: the work was, or must be, stopped.
///
/// From an outbound call it also says how many attempts were sent and why the planner sent no
/// more ([`attempts_sent`](Self::attempts_sent), [`stop`](Self::stop)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlineExceeded {
    activity: Activity,
    call: Option<CallFigures>,
    /// What the downstream answered, when it said the deadline ran out there.
    answered: Option<&'static str>,
}

/// What an outbound call had done when its deadline ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CallFigures {
    attempts_sent: u32,
    stop: Stop,
}

impl DeadlineExceeded {
    /// The deadline passed while the hop was doing `activity`.
    pub fn new(activity: Activity) -> DeadlineExceeded {
        DeadlineExceeded {
            activity,
            call: None,
            answered: None,
        }
    }

    /// The deadline ran out during an outbound call to `target`: `attempts_sent` attempts were
    /// sent and the planner stopped with `stop`.
    pub fn calling(target: impl Into<String>, attempts_sent: u32, stop: Stop) -> DeadlineExceeded {
        DeadlineExceeded {
            activity: Activity::Calling {
                target: target.into(),
            },
            call: Some(CallFigures {
                attempts_sent,
                stop,
            }),
            answered: None,
        }
    }

    /// The downstream `target` answered that the deadline the call carried ran out there:
    /// `answer` is what it said (`"504"`, or `"DEADLINE_EXCEEDED"` from a gRPC callee). See
    /// [`PropagateDeadline::deadline_answer_as_error`](crate::PropagateDeadline::deadline_answer_as_error).
    pub fn answered(target: impl Into<String>, answer: &'static str) -> DeadlineExceeded {
        DeadlineExceeded {
            activity: Activity::Calling {
                target: target.into(),
            },
            call: None,
            answered: Some(answer),
        }
    }

    /// What the downstream answered, when its answer said that the deadline ran out there.
    pub fn downstream_answer(&self) -> Option<&'static str> {
        self.answered
    }

    /// What the hop was doing when time ran out.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// For an outbound call, the attempts that were sent.
    pub fn attempts_sent(&self) -> Option<u32> {
        self.call.map(|c| c.attempts_sent)
    }

    /// For an outbound call, why no further attempt was sent.
    pub fn stop(&self) -> Option<Stop> {
        self.call.map(|c| c.stop)
    }
}

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "deadline exceeded while {}", self.activity)?;
        if let Some(CallFigures {
            attempts_sent,
            stop,
        }) = self.call
        {
            write!(f, " after {attempts_sent} attempt(s) sent ({stop})")?;
        }
        if let Some(answer) = self.answered {
            write!(f, " (it answered {answer})")?;
        }
        Ok(())
    }
}

impl std::error::Error for DeadlineExceeded {}

/// An outbound attempt was not sent because it could not have finished (or every attempt was
/// used), with the planner's figures.
///
/// Its figures are read with [`sent`](Self::sent), [`stop`](Self::stop),
/// [`remaining`](Self::remaining) and [`needed`](Self::needed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptSkipped {
    sent: u32,
    stop: Stop,
    remaining: Option<Duration>,
}

impl AttemptSkipped {
    /// The planner's `stop` after `sent` attempts, with the time left taken from it.
    pub fn new(sent: u32, stop: Stop) -> AttemptSkipped {
        let remaining = match stop {
            Stop::NotEnoughTime { remaining, .. } => Some(remaining),
            _ => None,
        };
        AttemptSkipped {
            sent,
            stop,
            remaining,
        }
    }

    /// Attempts sent before this one.
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// Why the planner stopped.
    pub fn stop(&self) -> Stop {
        self.stop
    }

    /// Time left before the caller's deadline when the attempt was considered, when lack of
    /// time was the reason.
    pub fn remaining(&self) -> Option<Duration> {
        self.remaining
    }

    /// The time an attempt needs (margin plus the minimum useful budget), when lack of time
    /// was the reason.
    pub fn needed(&self) -> Option<Duration> {
        match self.stop {
            Stop::NotEnoughTime { needed, .. } => Some(needed),
            _ => None,
        }
    }
}

impl fmt::Display for AttemptSkipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sent {
            0 => write!(f, "call not sent: {}", self.stop),
            sent => write!(f, "after {sent} attempt(s) sent: {}", self.stop),
        }
    }
}

impl std::error::Error for AttemptSkipped {}

/// Why an outbound call through [`PropagateDeadline`](crate::PropagateDeadline) produced no
/// response.
///
/// A response, whatever its status, is not an error: a 4xx or a 5xx (after the retries) is
/// returned as `Ok`, because its status and its callee's `Deadline-Trace` are what the caller
/// needs. `CallError` is for calls that ended with no response at all.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError {
    /// The caller's deadline ran out: the last attempt timed out because the deadline capped
    /// its wait, or the planner stopped sending attempts for lack of time after timeouts or
    /// connection errors.
    DeadlineExceeded(DeadlineExceeded),
    /// Not even the first attempt was sent: too little time was left for the callee to do
    /// anything useful (see [`AttemptSkipped::remaining`] and [`AttemptSkipped::needed`]).
    AttemptSkipped(AttemptSkipped),
    /// The last attempt timed out after its full per-attempt timeout (not cut short by a
    /// deadline), and no further attempt was allowed.
    #[non_exhaustive]
    TimedOut {
        /// Attempts sent.
        attempts_sent: u32,
        /// The per-attempt timeout that elapsed.
        timeout: Duration,
    },
    /// The inner service (the connection, for an HTTP client) failed on the last attempt, and
    /// no further attempt was allowed.
    #[non_exhaustive]
    Inner {
        /// Attempts sent.
        attempts_sent: u32,
        /// The inner service's error.
        source: BoxError,
    },
    /// The request could not be built (an unparsable URI given to
    /// [`DeadlineClient::get`](crate::DeadlineClient::get)); nothing was sent.
    InvalidRequest(http::Error),
}

impl CallError {
    /// Whether the caller's deadline is why the call failed: it ran out during the call, or
    /// too little was left to send the first attempt. A handler usually answers 504 to these.
    pub fn is_deadline(&self) -> bool {
        matches!(
            self,
            CallError::DeadlineExceeded(_) | CallError::AttemptSkipped(_)
        )
    }

    /// Whether no attempt was sent for lack of time.
    pub fn is_skipped(&self) -> bool {
        matches!(self, CallError::AttemptSkipped(_))
    }

    /// Whether every allowed attempt used its full timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, CallError::TimedOut { .. })
    }

    /// How many attempts were sent before the call gave up.
    pub fn attempts_sent(&self) -> u32 {
        match self {
            CallError::DeadlineExceeded(e) => e.attempts_sent().unwrap_or(0),
            CallError::AttemptSkipped(e) => e.sent,
            CallError::TimedOut { attempts_sent, .. } | CallError::Inner { attempts_sent, .. } => {
                *attempts_sent
            }
            CallError::InvalidRequest(_) => 0,
        }
    }

    /// Why the planner sent no further attempt, when it was the planner that stopped the call.
    pub fn stop(&self) -> Option<Stop> {
        match self {
            CallError::DeadlineExceeded(e) => e.stop(),
            CallError::AttemptSkipped(e) => Some(e.stop),
            _ => None,
        }
    }

    /// The short word the call's trace span ends with.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            CallError::DeadlineExceeded(_) => outcome::DEADLINE,
            CallError::AttemptSkipped(_) => outcome::SKIPPED,
            CallError::TimedOut { .. } => outcome::TIMEOUT,
            CallError::Inner { .. } => outcome::ERROR,
            CallError::InvalidRequest(_) => outcome::INVALID,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::DeadlineExceeded(e) => e.fmt(f),
            CallError::AttemptSkipped(e) => e.fmt(f),
            CallError::TimedOut {
                attempts_sent,
                timeout,
            } => write!(
                f,
                "the last of {attempts_sent} attempt(s) timed out after {} ms",
                timeout.as_millis()
            ),
            CallError::Inner { attempts_sent, .. } => {
                write!(f, "the last of {attempts_sent} attempt(s) failed")
            }
            CallError::InvalidRequest(_) => f.write_str("invalid request, nothing sent"),
        }
    }
}

/// The deadline variants are transparent: their message is the wrapped error's, and their
/// source is the wrapped error's source (none), so a printer of whole chains (`{:#}` with
/// `anyhow`) shows the message once. Match the variant to reach the [`DeadlineExceeded`] or
/// [`AttemptSkipped`]. The other variants say what failed and give the cause as their source.
impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::DeadlineExceeded(e) => e.source(),
            CallError::AttemptSkipped(e) => e.source(),
            CallError::TimedOut { .. } => None,
            CallError::Inner { source, .. } => Some(source.as_ref()),
            CallError::InvalidRequest(e) => Some(e),
        }
    }
}

/// A handler that returns `Result<_, CallError>` can use `?` on [`check`](crate::check()) too.
impl From<DeadlineExceeded> for CallError {
    fn from(error: DeadlineExceeded) -> CallError {
        CallError::DeadlineExceeded(error)
    }
}

impl From<AttemptSkipped> for CallError {
    fn from(error: AttemptSkipped) -> CallError {
        CallError::AttemptSkipped(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn not_enough(attempt: u32) -> Stop {
        Stop::NotEnoughTime {
            attempt,
            remaining: ms(50),
            needed: ms(100),
        }
    }

    #[test]
    fn each_call_error_has_its_own_message() {
        let errors = [
            CallError::DeadlineExceeded(DeadlineExceeded::calling("orders", 2, not_enough(3))),
            CallError::AttemptSkipped(AttemptSkipped::new(0, not_enough(1))),
            CallError::TimedOut {
                attempts_sent: 3,
                timeout: ms(1_000),
            },
            CallError::Inner {
                attempts_sent: 3,
                source: "connection refused".into(),
            },
            CallError::InvalidRequest(http::Uri::try_from("http://a b").unwrap_err().into()),
        ];
        let messages: HashSet<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), errors.len(), "{messages:?}");
        assert_eq!(
            errors[0].to_string(),
            "deadline exceeded while calling orders after 2 attempt(s) sent (attempt 3 not sent: \
             50 ms left, an attempt needs at least 100 ms)"
        );
        assert_eq!(
            errors[1].to_string(),
            "call not sent: attempt 1 not sent: 50 ms left, an attempt needs at least 100 ms"
        );
        assert_eq!(
            errors[2].to_string(),
            "the last of 3 attempt(s) timed out after 1000 ms"
        );
        assert_eq!(errors[3].to_string(), "the last of 3 attempt(s) failed");
        let source = std::error::Error::source(&errors[3]).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("connection refused"));
    }

    #[test]
    fn helpers_classify_the_variants() {
        let deadline =
            CallError::DeadlineExceeded(DeadlineExceeded::calling("orders", 2, not_enough(3)));
        assert!(deadline.is_deadline() && !deadline.is_skipped() && !deadline.is_timeout());
        assert_eq!(deadline.attempts_sent(), 2);
        assert_eq!(deadline.stop(), Some(not_enough(3)));

        let skipped = CallError::AttemptSkipped(AttemptSkipped::new(0, not_enough(1)));
        assert!(skipped.is_deadline() && skipped.is_skipped());
        assert_eq!(skipped.attempts_sent(), 0);
        let CallError::AttemptSkipped(inner) = &skipped else {
            unreachable!()
        };
        assert_eq!(
            (inner.remaining(), inner.needed()),
            (Some(ms(50)), Some(ms(100)))
        );
        assert_eq!((inner.sent(), inner.stop()), (0, not_enough(1)));

        let timed_out = CallError::TimedOut {
            attempts_sent: 3,
            timeout: ms(1_000),
        };
        assert!(timed_out.is_timeout() && !timed_out.is_deadline());
        assert_eq!((timed_out.attempts_sent(), timed_out.stop()), (3, None));
    }

    #[test]
    fn call_errors_downcast_from_a_box_error() {
        let boxed: BoxError = Box::new(CallError::AttemptSkipped(AttemptSkipped::new(
            0,
            not_enough(1),
        )));
        let call = boxed.downcast_ref::<CallError>().expect("a CallError");
        assert!(call.is_skipped());
        let boxed: BoxError = Box::new(DeadlineExceeded::new(Activity::Queued));
        assert!(boxed.downcast_ref::<DeadlineExceeded>().is_some());
    }

    /// Every message of an error and its sources, as `anyhow`'s `{:#}` joins them.
    fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
        std::iter::successors(Some(error), |e| e.source())
            .map(ToString::to_string)
            .collect()
    }

    /// Regression: the deadline variants printed the wrapped error and also returned it as
    /// their source, so a printer of whole chains showed the same message twice.
    #[test]
    fn a_chain_printer_shows_each_message_once() {
        let errors = [
            CallError::DeadlineExceeded(DeadlineExceeded::calling("orders", 2, not_enough(3))),
            CallError::DeadlineExceeded(DeadlineExceeded::answered("orders", "504")),
            CallError::AttemptSkipped(AttemptSkipped::new(0, not_enough(1))),
            CallError::TimedOut {
                attempts_sent: 3,
                timeout: ms(1_000),
            },
            CallError::Inner {
                attempts_sent: 3,
                source: "connection refused".into(),
            },
            CallError::InvalidRequest(http::Uri::try_from("http://a b").unwrap_err().into()),
        ];
        for error in &errors {
            let messages = chain(error);
            let unique: HashSet<&String> = messages.iter().collect();
            assert_eq!(unique.len(), messages.len(), "{messages:?}");
            assert!(
                messages.windows(2).all(|w| !w[0].contains(w[1].as_str())),
                "a message repeats its source: {messages:?}"
            );
        }
        assert_eq!(
            chain(&errors[4]),
            ["the last of 3 attempt(s) failed", "connection refused"]
        );
    }

    #[test]
    fn handler_errors_convert_into_call_errors() {
        let from_check: CallError = DeadlineExceeded::new(Activity::Working).into();
        assert!(from_check.is_deadline() && !from_check.is_skipped());
        let skipped: CallError = AttemptSkipped::new(0, not_enough(1)).into();
        assert!(skipped.is_skipped());
        let answered = DeadlineExceeded::answered("inventory", "DEADLINE_EXCEEDED");
        assert_eq!(answered.downstream_answer(), Some("DEADLINE_EXCEEDED"));
        assert_eq!((answered.attempts_sent(), answered.stop()), (None, None));
        assert_eq!(
            answered.to_string(),
            "deadline exceeded while calling inventory (it answered DEADLINE_EXCEEDED)"
        );
    }

    #[test]
    fn plain_deadline_exceeded_reads_as_before() {
        let e = DeadlineExceeded::new(Activity::Working);
        assert_eq!(e.to_string(), "deadline exceeded while working");
        assert_eq!((e.attempts_sent(), e.stop()), (None, None));
    }
}
