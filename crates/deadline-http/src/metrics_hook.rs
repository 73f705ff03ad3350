//! Where the layers call into the [`metrics`](crate::metrics) module: with the `metrics` feature
//! these hold the resolved series; without it they are empty and every call does nothing, so
//! the layers' code has one line per hook and no `cfg` of its own.

#[cfg(feature = "metrics")]
pub(crate) use on::{CallHook, ClientHook, HopHook};

#[cfg(not(feature = "metrics"))]
pub(crate) use off::{CallHook, ClientHook, HopHook};

#[cfg(feature = "metrics")]
mod on {
    use std::sync::Arc;

    use deadline::Stop;
    use http::Request;

    use crate::hold::HoldFacts;
    use crate::metrics::{
        AttemptKind, CallRecorder, HopRecorder, ServiceMetrics, SkipReason, TargetRecorder,
    };

    /// The enforce layer's series, if it records any.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct HopHook(Option<Arc<HopRecorder>>);

    impl HopHook {
        pub(crate) fn new(metrics: &ServiceMetrics) -> HopHook {
            HopHook(Some(metrics.hop()))
        }

        pub(crate) fn record(&self, hold: &HoldFacts) {
            if let Some(hop) = &self.0 {
                hop.record(hold);
            }
        }
    }

    /// An outbound client's series: its service's, and its configured target's once both are
    /// known.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct ClientHook {
        service: Option<ServiceMetrics>,
        target: Option<Arc<TargetRecorder>>,
    }

    impl ClientHook {
        /// Records into `metrics`, for calls to `target` when one is configured.
        pub(crate) fn new(metrics: &ServiceMetrics, target: Option<&str>) -> ClientHook {
            ClientHook {
                service: Some(metrics.clone()),
                target: target.map(|t| metrics.target(t)),
            }
        }

        /// The configured target is now `target`.
        pub(crate) fn retarget(&mut self, target: &str) {
            if let Some(service) = &self.service {
                self.target = Some(service.target(target));
            }
        }

        /// The recorder of one call of `request`: to the configured target, or else to the
        /// request URI's authority (looked up now).
        pub(crate) fn call<B>(&self, request: &Request<B>) -> CallHook {
            let target = match (&self.target, &self.service) {
                (Some(target), _) => target.clone(),
                (None, Some(service)) => service.target(
                    request
                        .uri()
                        .authority()
                        .map_or("downstream", |a| a.as_str()),
                ),
                (None, None) => return CallHook(None),
            };
            CallHook(Some(CallRecorder::start(target)))
        }
    }

    /// One call's recorder, if its client records: observes the call's duration when dropped.
    #[derive(Debug)]
    pub(crate) struct CallHook(Option<CallRecorder>);

    impl CallHook {
        /// The `sent`-th attempt (from 1) went out, sequentially.
        pub(crate) fn attempt(&self, sent: u32) {
            self.attempt_of(AttemptKind::nth(sent));
        }

        /// A hedge (an attempt sent while an earlier one is still in flight) went out.
        pub(crate) fn hedge(&self) {
            self.attempt_of(AttemptKind::Hedge);
        }

        fn attempt_of(&self, kind: AttemptKind) {
            if let Some(call) = &self.0 {
                call.attempt(kind);
            }
        }

        /// The planner stopped the call with `stop`: counts a skipped attempt if it skipped one.
        pub(crate) fn stopped(&self, stop: &Stop) {
            if let Some(reason) = SkipReason::of_stop(stop) {
                self.skipped(reason);
            }
        }

        fn skipped(&self, reason: SkipReason) {
            if let Some(call) = &self.0 {
                call.skipped(reason);
            }
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    use deadline::Stop;
    use http::Request;

    use crate::hold::HoldFacts;

    /// Nothing to record without the `metrics` feature.
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct HopHook;

    impl HopHook {
        #[inline]
        pub(crate) fn record(&self, _hold: &HoldFacts) {}
    }

    /// Nothing to record without the `metrics` feature. (Not `Copy`, as the real one is not,
    /// so the code that clones it is the same either way.)
    #[derive(Clone, Debug, Default)]
    pub(crate) struct ClientHook;

    impl ClientHook {
        #[inline]
        pub(crate) fn retarget(&mut self, _target: &str) {}

        #[inline]
        pub(crate) fn call<B>(&self, _request: &Request<B>) -> CallHook {
            CallHook
        }
    }

    /// Nothing to record without the `metrics` feature.
    #[derive(Debug)]
    pub(crate) struct CallHook;

    impl CallHook {
        #[inline]
        pub(crate) fn attempt(&self, _sent: u32) {}

        #[inline]
        pub(crate) fn stopped(&self, _stop: &Stop) {}

        #[inline]
        pub(crate) fn hedge(&self) {}
    }
}
