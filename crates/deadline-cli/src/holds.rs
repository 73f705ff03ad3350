//! The services' `--log` files: one JSON line per worker hold, and the figures the demo and the
//! load command compute from them.
//!
//! Times are wall-clock milliseconds since the Unix epoch (with a fractional part), so holds
//! written by several processes on one host can be laid on one timeline. Each service turns its
//! monotonic instants into wall time once, when it writes the line, by subtracting their age
//! from one wall-clock read.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// One line of a service's `--log`: one request's hold of this service (or its rejection).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct HoldLine {
    /// The service's `--name`.
    pub service: String,
    /// The request's `X-Request-Id`.
    pub request_id: Option<String>,
    /// `ok`, `deadline`, `hung-up`, `rejected` or `error`.
    pub outcome: String,
    /// The status the service answered (or would have, had the caller waited).
    pub status: Option<u16>,
    /// The budget the request carried in ms: absent, or 0 when it had already run out.
    pub budget_ms: Option<u64>,
    /// When the request arrived (epoch ms).
    pub arrival_ms: f64,
    /// When it got a worker and started (epoch ms), if it did.
    pub start_ms: Option<f64>,
    /// When its work ended, finished or stopped (epoch ms), if it started.
    pub end_ms: Option<f64>,
    /// Time spent waiting for a worker slot.
    pub queued_ms: f64,
    /// Time spent holding a worker.
    pub worked_ms: f64,
    /// Whether the reply reached the socket.
    pub reply_written: bool,
}

impl HoldLine {
    /// The whole time this hold held a worker, in ms.
    pub(crate) fn worker_ms(&self) -> f64 {
        self.worked_after(f64::NEG_INFINITY)
    }

    /// The part of this hold's work after `t` (epoch ms), in ms.
    pub(crate) fn worked_after(&self, t: f64) -> f64 {
        match (self.start_ms, self.end_ms) {
            (Some(start), Some(end)) => (end - start.max(t)).max(0.0),
            _ => 0.0,
        }
    }
}

/// Milliseconds since the Unix epoch now, as a float. The one wall-clock read of the logs.
pub(crate) fn epoch_ms_now() -> f64 {
    #[allow(clippy::disallowed_methods)] // log timestamps are wall time by design
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
        * 1_000.0
}

/// A `--log` file being written: buffered, flushed on shutdown.
#[derive(Debug)]
pub(crate) struct HoldLog {
    out: Mutex<BufWriter<File>>,
}

impl HoldLog {
    pub(crate) fn create(path: &Path) -> anyhow::Result<HoldLog> {
        let file =
            File::create(path).with_context(|| format!("creating log file {}", path.display()))?;
        Ok(HoldLog {
            out: Mutex::new(BufWriter::new(file)),
        })
    }

    pub(crate) fn write(&self, line: &HoldLine) {
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(err) = serde_json::to_writer(&mut *out, line)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
        {
            tracing::error!(%err, "could not write a hold to the log");
        }
    }

    pub(crate) fn flush(&self) -> std::io::Result<()> {
        self.out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .flush()
    }
}

/// Reads a `--log` file. A line that does not parse is an error naming the file and line.
pub(crate) fn read_log(path: &Path) -> anyhow::Result<Vec<HoldLine>> {
    let file = File::open(path).with_context(|| format!("opening log {}", path.display()))?;
    let mut holds = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading log {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let hold = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: not a hold record", path.display(), n + 1))?;
        holds.push(hold);
    }
    Ok(holds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(start: Option<f64>, end: Option<f64>) -> HoldLine {
        HoldLine {
            service: "inventory".into(),
            request_id: Some("r1".into()),
            outcome: "ok".into(),
            status: Some(200),
            budget_ms: None,
            arrival_ms: 0.0,
            start_ms: start,
            end_ms: end,
            queued_ms: 0.0,
            worked_ms: 0.0,
            reply_written: true,
        }
    }

    #[test]
    fn work_after_a_moment_is_clipped() {
        assert_eq!(hold(Some(100.0), Some(300.0)).worked_after(200.0), 100.0);
        assert_eq!(hold(Some(100.0), Some(300.0)).worked_after(50.0), 200.0);
        assert_eq!(hold(Some(100.0), Some(300.0)).worked_after(400.0), 0.0);
        assert_eq!(hold(None, None).worked_after(0.0), 0.0);
    }

    #[test]
    fn log_round_trips_and_bad_lines_are_named() {
        let dir = std::env::temp_dir().join(format!("deadline-holds-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        let log = HoldLog::create(&path).unwrap();
        let h = hold(Some(1.5), Some(2.5));
        log.write(&h);
        log.write(&h);
        log.flush().unwrap();
        assert_eq!(read_log(&path).unwrap(), vec![h.clone(), h]);
        std::fs::write(&path, "{\"service\": 1}\n").unwrap();
        let err = read_log(&path).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
