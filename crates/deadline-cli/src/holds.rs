//! The services' `--log` files: one JSON line per worker hold, and the figures the demo and the
//! load command compute from them.
//!
//! Times are wall-clock milliseconds since the Unix epoch (with a fractional part), so holds
//! written by several processes on one host can be laid on one timeline. Each service turns its
//! monotonic instants into wall time once, when it writes the line, by subtracting their age
//! from one wall-clock read.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
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
    /// `ok`, `deadline`, `hung-up`, `rejected`, `error` or `shed`.
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
    /// How long the response body streamed after its head, in ms (0 for a body sent at once).
    #[serde(default)]
    pub streamed_ms: f64,
    /// Where the time ran out when the layer answered 504 or cut the stream: `queue`, `work`,
    /// `calling` or `stream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exceeded: Option<String>,
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

/// Now on the wall clock, as the core's instant: what an absolute deadline (`X-Request-Deadline`,
/// a message's expiry) is measured against.
pub(crate) fn wall_now() -> deadline::absolute::WallInstant {
    #[allow(clippy::disallowed_methods)] // absolute deadlines are wall time by definition
    let now = SystemTime::now();
    deadline::absolute::WallInstant::from_system_time(now)
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

/// How long the writer gathers lines after the first one of a batch before writing them: every
/// hold reaches the file within this (plus the write itself) of its end. A quarter of the 100 ms
/// a `SIGKILL` may cost, so a writer thread the scheduler delays by tens of milliseconds on a busy
/// machine still keeps the promise.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(25);

/// How many lines may wait for the writer. At 25 ms a batch this is over 300,000 holds a second;
/// beyond it (a disk that stalls) lines are dropped and counted rather than slowing requests.
/// Each waiting line is a [`HoldLine`], a few hundred bytes, so the bound is about 2 MB.
pub(crate) const QUEUE_LINES: usize = 8_192;

/// What the writer thread is sent.
enum Message {
    Hold(HoldLine),
    /// Write everything sent before this, then answer.
    Flush(SyncSender<()>),
}

/// What the writer did: counts any thread may read.
#[derive(Debug, Default)]
struct Counts {
    /// Lines written to the file.
    written: AtomicU64,
    /// Lines dropped because the queue was full.
    dropped: AtomicU64,
    /// Lines lost to a failed write (and every line after it).
    failed: AtomicU64,
    /// Whether the first drop has been reported.
    drop_reported: AtomicBool,
}

/// How many holds a log wrote and lost, for the exit summary and the service's runtime figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct LogCounts {
    /// Lines written to the file.
    pub written: u64,
    /// Lines dropped because the writer was behind (the queue was full).
    pub dropped: u64,
    /// Lines lost to a failed write.
    pub failed: u64,
}

impl LogCounts {
    /// Lines that never reached the file.
    pub(crate) fn lost(&self) -> u64 {
        self.dropped + self.failed
    }
}

/// A `--log` file being written, as holds end, by a thread of its own.
///
/// **Why a thread, and why batches.** The hook that reports a hold runs on the request's task:
/// it must never wait for a disk. [`write`](HoldLog::write) only puts the line in a bounded
/// queue ([`QUEUE_LINES`]); a plain OS thread takes the first line, lets more gather for
/// [`FLUSH_EVERY`], then writes the whole batch with one `write` call and no user-space buffer
/// left behind. So a reader following the file sees holds within about 25 ms of their end, a
/// `SIGKILL` loses at most the last batch, and an idle service costs nothing (the thread sleeps
/// on the queue). A write per line was measured too (see the log paragraph in docs/reference.md): it costs
/// a thread wake-up and a system call per hold for no durability a reader could notice.
///
/// **When the queue is full** (the disk stalls longer than the queue lasts) the line is dropped
/// and counted, and the first drop is reported on stderr: serving never waits on the log. The
/// count is in the exit summary.
///
/// **When a write fails** (a full disk) the error is reported once on stderr, naming the file;
/// the writer then stops writing (a retried write after a partial one would leave a torn line
/// in the middle of the file) and counts what it could not log. Serving goes on.
#[derive(Debug)]
pub(crate) struct HoldLog {
    tx: SyncSender<Message>,
    counts: Arc<Counts>,
    path: PathBuf,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl HoldLog {
    /// Creates (or truncates) the file and starts its writer thread.
    pub(crate) fn create(path: &Path) -> anyhow::Result<HoldLog> {
        HoldLog::with_batching(path, FLUSH_EVERY)
    }

    /// As [`create`](HoldLog::create), gathering each batch for `window` (zero: write whatever
    /// is queued as soon as the thread wakes, about one write per line at low rates).
    pub(crate) fn with_batching(path: &Path, window: Duration) -> anyhow::Result<HoldLog> {
        let file =
            File::create(path).with_context(|| format!("creating log file {}", path.display()))?;
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let counts = Arc::new(Counts::default());
        let writer = Writer {
            file,
            path: path.to_owned(),
            counts: counts.clone(),
            window,
            broken: false,
        };
        let thread = std::thread::Builder::new()
            .name("hold-log".into())
            .spawn(move || writer.run(&rx))
            .context("starting the log writer thread")?;
        Ok(HoldLog {
            tx,
            counts,
            path: path.to_owned(),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues one line; never waits. A full queue drops the line and counts it.
    pub(crate) fn write(&self, line: HoldLine) {
        if self.tx.try_send(Message::Hold(line)).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            if !self.counts.drop_reported.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "deadline: the hold log {} is behind (its queue of {QUEUE_LINES} lines is full); \
                     dropping lines rather than holding up requests (the count is reported at exit)",
                    self.path.display()
                );
            }
        }
    }

    /// What was written and lost so far.
    pub(crate) fn counts(&self) -> LogCounts {
        LogCounts {
            written: self.counts.written.load(Ordering::Relaxed),
            dropped: self.counts.dropped.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
        }
    }

    /// Waits (blocking, up to `within`) until every line queued so far is written or counted
    /// as lost; returns the counts. `Err` if the writer did not answer in time.
    pub(crate) fn flush(&self, within: Duration) -> anyhow::Result<LogCounts> {
        let (ack, done) = sync_channel(1);
        let late = || {
            anyhow::anyhow!(
                "the hold log {} was not written within {within:?}",
                self.path.display()
            )
        };
        // Never a blocking send: with a stalled disk the queue may stay full, and exit must not
        // wait for it longer than `within`.
        #[allow(clippy::disallowed_methods)] // a plain thread at exit, bounded by `within`
        let until = std::time::Instant::now() + within;
        let mut message = Message::Flush(ack);
        loop {
            match self.tx.try_send(message) {
                Ok(()) => break,
                Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return Ok(self.counts()),
                Err(std::sync::mpsc::TrySendError::Full(back)) => {
                    #[allow(clippy::disallowed_methods)] // as above
                    if std::time::Instant::now() >= until {
                        return Err(late());
                    }
                    message = back;
                    #[allow(clippy::disallowed_methods)] // as above: not on the runtime
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        done.recv_timeout(within).map_err(|_| late())?;
        Ok(self.counts())
    }
}

impl Drop for HoldLog {
    fn drop(&mut self) {
        // Ask for a last write; the thread ends when the queue's sender (ours) is gone.
        let _ = self.flush(Duration::from_secs(5));
        if let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let (tx, _) = sync_channel(0);
            drop(std::mem::replace(&mut self.tx, tx));
            let _ = thread.join();
        }
    }
}

/// The writer thread's side.
struct Writer {
    file: File,
    path: PathBuf,
    counts: Arc<Counts>,
    window: Duration,
    /// A write failed: stop writing, count the rest.
    broken: bool,
}

impl Writer {
    fn run(mut self, rx: &Receiver<Message>) {
        let mut batch: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut acks = Vec::new();
        // Sleeps on the queue while the service is idle; ends when the log is dropped.
        while let Ok(first) = rx.recv() {
            let mut lines = self.take(first, &mut batch, &mut acks);
            if acks.is_empty() && !self.window.is_zero() {
                // A plain OS thread, not the runtime: sleeping here holds up no request.
                #[allow(clippy::disallowed_methods)]
                std::thread::sleep(self.window);
            }
            // Everything that arrived meanwhile, but no more than a queue's worth, so a flood
            // cannot keep one batch (and its lines) from the file forever.
            for _ in 0..QUEUE_LINES {
                match rx.try_recv() {
                    Ok(message) => lines += self.take(message, &mut batch, &mut acks),
                    Err(_) => break,
                }
            }
            self.write(&batch, lines);
            batch.clear();
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
        }
    }

    /// Adds a message to the batch; how many lines it added.
    fn take(&self, message: Message, batch: &mut Vec<u8>, acks: &mut Vec<SyncSender<()>>) -> u64 {
        match message {
            Message::Hold(line) => {
                // Serialising plain strings and numbers into memory cannot fail.
                if serde_json::to_writer(&mut *batch, &line).is_ok() {
                    batch.push(b'\n');
                    1
                } else {
                    0
                }
            }
            Message::Flush(ack) => {
                acks.push(ack);
                0
            }
        }
    }

    fn write(&mut self, batch: &[u8], lines: u64) {
        if lines == 0 {
            return;
        }
        if self.broken {
            self.counts.failed.fetch_add(lines, Ordering::Relaxed);
            return;
        }
        match self.file.write_all(batch) {
            Ok(()) => {
                self.counts.written.fetch_add(lines, Ordering::Relaxed);
            }
            Err(err) => {
                self.broken = true;
                self.counts.failed.fetch_add(lines, Ordering::Relaxed);
                eprintln!(
                    "deadline: writing the hold log {} failed: {err}; serving goes on, but holds \
                     are no longer logged (the count is reported at exit)",
                    self.path.display()
                );
            }
        }
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
            streamed_ms: 0.0,
            exceeded: None,
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
        log.write(h.clone());
        log.write(h.clone());
        let counts = log.flush(Duration::from_secs(5)).unwrap();
        assert_eq!(
            counts,
            LogCounts {
                written: 2,
                dropped: 0,
                failed: 0
            }
        );
        assert_eq!(read_log(&path).unwrap(), vec![h.clone(), h]);
        std::fs::write(&path, "{\"service\": 1}\n").unwrap();
        let err = read_log(&path).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Needs `/dev/full`, a device every write to fails with "no space left": Linux has it, so
    /// there a missing device fails the test rather than passing it unchecked; elsewhere the
    /// test is ignored, which `cargo test` reports.
    #[test]
    #[cfg_attr(not(target_os = "linux"), ignore = "needs /dev/full (Linux)")]
    fn a_failing_write_is_counted_and_the_writer_stops() {
        assert!(
            Path::new("/dev/full").exists(),
            "/dev/full is missing: this check of a failing log cannot run"
        );
        let log = HoldLog::create(Path::new("/dev/full")).unwrap();
        log.write(hold(None, None));
        let counts = log.flush(Duration::from_secs(5)).unwrap();
        assert_eq!(
            counts,
            LogCounts {
                written: 0,
                dropped: 0,
                failed: 1
            }
        );
        log.write(hold(None, None));
        log.write(hold(None, None));
        let counts = log.flush(Duration::from_secs(5)).unwrap();
        assert_eq!(counts.failed, 3);
        assert_eq!(counts.lost(), 3);
    }

    /// What the writer costs at 3,000 holds a second, batched and (nearly) a write per line:
    /// `cargo test --release -p deadline-cli --bin deadline -- --ignored --nocapture
    /// log_writer_cost`. Prints the whole process's CPU time for each, and for pacing alone.
    #[test]
    #[ignore = "a measurement, not a check: about 10 s of real time"]
    fn log_writer_cost() {
        use crate::harness::ProcessUsage;
        const RATE: u32 = 3_000;
        const SECONDS: u32 = 3;
        let dir = std::env::temp_dir().join(format!("deadline-log-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = hold(Some(1.5), Some(2.5));
        let pace = |log: Option<&HoldLog>| {
            let before = ProcessUsage::of("x", None).cpu_ms.unwrap_or(0.0);
            #[allow(clippy::disallowed_methods)] // a measurement in real time
            let start = std::time::Instant::now();
            for i in 0..RATE * SECONDS {
                let due = start + Duration::from_secs_f64(f64::from(i) / f64::from(RATE));
                #[allow(clippy::disallowed_methods)]
                let now = std::time::Instant::now();
                if due > now {
                    #[allow(clippy::disallowed_methods)]
                    std::thread::sleep(due - now);
                }
                if let Some(log) = log {
                    log.write(line.clone());
                }
            }
            if let Some(log) = log {
                let counts = log.flush(Duration::from_secs(5)).unwrap();
                assert_eq!(counts.written, u64::from(RATE * SECONDS));
            }
            ProcessUsage::of("x", None).cpu_ms.unwrap_or(0.0) - before
        };
        let idle = pace(None);
        let per_line = HoldLog::with_batching(&dir.join("per-line.jsonl"), Duration::ZERO).unwrap();
        let per_line = pace(Some(&per_line));
        let batched = HoldLog::create(&dir.join("batched.jsonl")).unwrap();
        let batched = pace(Some(&batched));
        println!(
            "{} holds at {RATE}/s: pacing alone {idle:.0} ms CPU; written as they come {per_line:.0} ms; \
             batched every {} ms {batched:.0} ms",
            RATE * SECONDS,
            FLUSH_EVERY.as_millis()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
