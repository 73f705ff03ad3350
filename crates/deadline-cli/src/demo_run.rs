//! [`DemoRun`]: one run's figures, as `deadline demo` and `deadline demo --peer` report them.
//!
//! A leaf of its own: the demo computes them and the peer comparison tabulates them, and
//! neither should have to import the other for the type.

use serde::Serialize;

use crate::holds::HoldLine;
use crate::svg::timeline::TimelineRun;

/// One run's figures. Field names are part of the `--json` interface: add fields, rename none.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DemoRun {
    /// Which chain ran, when it was not this project's (`deadline demo --peer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) chain: Option<&'static str>,
    pub(crate) deadlines: bool,
    pub(crate) user_status: Option<u16>,
    /// The gRPC status the user heard (`--protocol grpc`); `user_status` is then the HTTP status
    /// it stands for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user_grpc_status: Option<String>,
    pub(crate) user_heard_back_ms: Option<f64>,
    pub(crate) user_gave_up_ms: Option<f64>,
    pub(crate) calls: usize,
    pub(crate) calls_after_user_left: usize,
    pub(crate) last_work_end_ms: f64,
    pub(crate) worker_ms: f64,
    pub(crate) worker_ms_after_user_left: f64,
    pub(crate) user_trace: Option<String>,
    pub(crate) user_body: Option<String>,
    /// With `--postgres`: the database's own figures, from `pg_stat_activity`.
    #[serde(flatten)]
    pub(crate) database: Option<crate::pg::DbFigures>,
    /// With `--postgres`: ms from the moment the user stopped waiting to the first sample of
    /// `pg_stat_activity` with none of inventory's statements active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) db_empty_ms_after_user_left: Option<f64>,
    #[serde(skip)]
    pub(crate) holds: Vec<HoldLine>,
    #[serde(skip)]
    pub(crate) start_ms: f64,
}

impl DemoRun {
    /// What the user heard: the gRPC status's name for a gRPC user, else the HTTP status.
    pub(crate) fn heard(&self) -> Option<String> {
        self.user_grpc_status
            .clone()
            .or_else(|| self.user_status.map(|s| s.to_string()))
    }

    /// Worker time after the user left, in ms.
    pub(crate) fn waste_ms(&self) -> f64 {
        self.worker_ms_after_user_left
    }

    /// When the user heard back or gave up, in ms from when they sent.
    pub(crate) fn user_left_ms(&self) -> f64 {
        self.user_heard_back_ms
            .or(self.user_gave_up_ms)
            .unwrap_or(0.0)
    }

    /// What the timeline draws of this run.
    pub(crate) fn timeline(&self) -> TimelineRun<'_> {
        TimelineRun {
            label: self.chain,
            deadlines: self.deadlines,
            holds: &self.holds,
            start_ms: self.start_ms,
            user_status: self.user_status,
            user_heard_back_ms: self.user_heard_back_ms,
            user_left_ms: self.user_left_ms(),
            calls: self.calls,
            calls_after_user_left: self.calls_after_user_left,
            last_work_end_ms: self.last_work_end_ms,
            db_seconds_after_user_left: self.database.map(|d| d.db_seconds_after_users_left),
        }
    }
}
