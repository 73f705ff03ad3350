//! The services' `--log` files: one JSON line per worker hold, and the figures the demo and the
//! load command compute from them.
//!
//! # Refusals at arrival are folded past an allowance
//!
//! A request refused at arrival (its budget already spent, a malformed header, a full queue)
//! costs the service almost nothing, but a line in the log costs a couple of hundred bytes: a
//! caller sending budgets of 1 ms could fill the disk at the rate it sends. So each log writes
//! the first [`RefusedLines`] refusals at arrival of each second (by arrival) in full, and folds
//! the rest of that second into one line per outcome and status with a `count` and the span of
//! their arrivals (no request id: they have none in common). Every request is still counted;
//! a reader that sums lines weighs each by its `count`. Lines for requests that queued or
//! worked are never folded: they are the ones that cost something. The demo and the load
//! command, which join every hold to its user by request id, ask for every line
//! (`--log-refused all`).
//!
//! Times are wall-clock milliseconds since the Unix epoch (with a fractional part), so holds
//! written by several processes on one host can be laid on one timeline. Each service turns its
//! monotonic instants into wall time once, when it writes the line, by subtracting their age
//! from one wall-clock read.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
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
    /// How many requests the line stands for: 1, or more on a line that folds refusals at
    /// arrival (see the [module docs](self)); such a line has no request id or budget.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u64,
    /// On a folded line, the last arrival it counts (`arrival_ms` is the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_arrival_ms: Option<f64>,
}

fn one() -> u64 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_one(count: &u64) -> bool {
    *count == 1
}

impl HoldLine {
    /// Whether this line is one request refused at arrival: it never queued nor worked.
    pub(crate) fn refused_at_arrival(&self) -> bool {
        self.count == 1 && self.start_ms.is_none() && self.queued_ms == 0.0
    }

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

/// How many refusals at arrival a log writes in full each second before folding the rest
/// (see the [module docs](self)): `--log-refused N|all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefusedLines {
    /// Every one in full.
    All,
    /// This many a second in full; the rest of the second folded.
    PerSecond(u32),
}

impl Default for RefusedLines {
    /// 100 a second: a few hundred requests refused in a burst stay readable one by one, and a
    /// flood costs at most about 25 KB of log a second.
    fn default() -> Self {
        RefusedLines::PerSecond(100)
    }
}

impl std::str::FromStr for RefusedLines {
    type Err = String;

    fn from_str(text: &str) -> Result<RefusedLines, String> {
        if text == "all" {
            return Ok(RefusedLines::All);
        }
        text.parse::<u32>()
            .map(RefusedLines::PerSecond)
            .map_err(|_| {
                format!(
                    "expected a number of lines a second or `all`, not {:?}",
                    text.chars().take(32).collect::<String>()
                )
            })
    }
}

/// How long after the end of a second its folded lines wait for stragglers (a refusal's line
/// reaches the writer a little after its arrival) before they are written.
const FOLD_GRACE_MS: f64 = 200.0;

/// The writer's folding of refusals at arrival, second by second of arrival.
#[derive(Debug, Default)]
struct Folder {
    allowance: Option<u32>,
    /// By second of arrival: the lines written in full so far and the folded lines waiting.
    seconds: std::collections::BTreeMap<i64, (u32, Vec<HoldLine>)>,
}

impl Folder {
    fn new(refused: RefusedLines) -> Folder {
        Folder {
            allowance: match refused {
                RefusedLines::All => None,
                RefusedLines::PerSecond(n) => Some(n),
            },
            seconds: std::collections::BTreeMap::new(),
        }
    }

    /// The line to write now, or `None` when it was folded.
    fn take(&mut self, line: HoldLine) -> Option<HoldLine> {
        let Some(allowance) = self.allowance else {
            return Some(line);
        };
        if !line.refused_at_arrival() {
            return Some(line);
        }
        let second = (line.arrival_ms / 1_000.0).floor() as i64;
        let (kept, folds) = self.seconds.entry(second).or_default();
        if *kept < allowance {
            *kept += 1;
            return Some(line);
        }
        let same = |fold: &&mut HoldLine| {
            fold.service == line.service
                && fold.outcome == line.outcome
                && fold.status == line.status
                && fold.exceeded == line.exceeded
        };
        match folds.iter_mut().find(|fold| same(fold)) {
            Some(fold) => {
                fold.count += 1;
                fold.arrival_ms = fold.arrival_ms.min(line.arrival_ms);
                let last = fold.last_arrival_ms.unwrap_or(fold.arrival_ms);
                fold.last_arrival_ms = Some(last.max(line.arrival_ms));
                fold.reply_written &= line.reply_written;
            }
            None => folds.push(HoldLine {
                request_id: None,
                budget_ms: None,
                last_arrival_ms: Some(line.arrival_ms),
                ..line
            }),
        }
        None
    }

    /// The folded lines of every second that ended over [`FOLD_GRACE_MS`] before `now_ms`
    /// (all of them with `None`), taken out.
    fn due(&mut self, now_ms: Option<f64>) -> Vec<HoldLine> {
        let keep = match now_ms {
            // Second `s` is due once `(s + 1) s + grace` has passed: every `s` below this.
            Some(now) => {
                let first_kept = ((now - FOLD_GRACE_MS) / 1_000.0).floor() as i64;
                self.seconds.split_off(&first_kept)
            }
            None => std::collections::BTreeMap::new(),
        };
        std::mem::replace(&mut self.seconds, keep)
            .into_values()
            .flat_map(|(_, folds)| folds)
            .collect()
    }

    /// How long until the next second's folded lines are due, from `now_ms`; `None` with
    /// nothing waiting.
    fn next_due(&self, now_ms: f64) -> Option<Duration> {
        let (second, _) = self
            .seconds
            .iter()
            .find(|(_, (_, folds))| !folds.is_empty())?;
        let due = (*second + 1) as f64 * 1_000.0 + FOLD_GRACE_MS;
        Some(Duration::from_secs_f64(((due - now_ms) / 1_000.0).max(0.0)))
    }
}

/// What the writer thread is sent.
enum Message {
    Hold(HoldLine),
    /// Write everything sent before this, then answer.
    Flush(SyncSender<()>),
}

/// What the writer did: counts any thread may read.
#[derive(Debug, Default)]
struct Counts {
    /// Holds written to the file.
    written: AtomicU64,
    /// Holds dropped because the queue was full.
    dropped: AtomicU64,
    /// Holds lost to a failed write (and every one after it).
    failed: AtomicU64,
    /// Whether the first drop has been reported.
    drop_reported: AtomicBool,
}

/// How many holds a log wrote and lost, for the exit summary and the service's runtime figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct LogCounts {
    /// Holds written to the file (a folded line counts every request it stands for).
    pub written: u64,
    /// Holds dropped because the writer was behind (the queue was full).
    pub dropped: u64,
    /// Holds lost to a failed write.
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
    /// Creates (or truncates) the file and starts its writer thread, writing `refused` lines
    /// for refusals at arrival.
    pub(crate) fn create(path: &Path, refused: RefusedLines) -> anyhow::Result<HoldLog> {
        HoldLog::with_batching(path, FLUSH_EVERY, refused)
    }

    /// As [`create`](HoldLog::create), gathering each batch for `window` (zero: write whatever
    /// is queued as soon as the thread wakes, about one write per line at low rates).
    pub(crate) fn with_batching(
        path: &Path,
        window: Duration,
        refused: RefusedLines,
    ) -> anyhow::Result<HoldLog> {
        let file =
            File::create(path).with_context(|| format!("creating log file {}", path.display()))?;
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let counts = Arc::new(Counts::default());
        let writer = Writer {
            file,
            path: path.to_owned(),
            counts: counts.clone(),
            window,
            folder: Folder::new(refused),
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
    /// Folds refusals at arrival past the allowance.
    folder: Folder,
    /// A write failed: stop writing, count the rest.
    broken: bool,
}

impl Writer {
    fn run(mut self, rx: &Receiver<Message>) {
        let mut batch: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut acks = Vec::new();
        // Sleeps on the queue while the service is idle (until the next folded lines are due,
        // if any wait); ends when the log is dropped.
        loop {
            let first = match self.folder.next_due(epoch_ms_now()) {
                None => match rx.recv() {
                    Ok(message) => Some(message),
                    Err(_) => break,
                },
                Some(wait) => match rx.recv_timeout(wait) {
                    Ok(message) => Some(message),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
            };
            let mut holds = 0;
            if let Some(first) = first {
                holds += self.take(first, &mut batch, &mut acks);
                if acks.is_empty() && !self.window.is_zero() {
                    // A plain OS thread, not the runtime: sleeping here holds up no request.
                    #[allow(clippy::disallowed_methods)]
                    std::thread::sleep(self.window);
                }
                // Everything that arrived meanwhile, but no more than a queue's worth, so a
                // flood cannot keep one batch (and its lines) from the file forever.
                for _ in 0..QUEUE_LINES {
                    match rx.try_recv() {
                        Ok(message) => holds += self.take(message, &mut batch, &mut acks),
                        Err(_) => break,
                    }
                }
            }
            // The folded lines of the seconds that are over; all of them for a flush, whose
            // caller expects every hold sent before it in the file.
            let now = acks.is_empty().then(epoch_ms_now);
            for fold in self.folder.due(now) {
                holds += Writer::serialise(&fold, &mut batch);
            }
            self.write(&batch, holds);
            batch.clear();
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
        }
        for fold in self.folder.due(None) {
            let holds = Writer::serialise(&fold, &mut batch);
            self.write(&batch, holds);
            batch.clear();
        }
    }

    /// Adds a message to the batch (unless the folder keeps it); how many holds it added.
    fn take(
        &mut self,
        message: Message,
        batch: &mut Vec<u8>,
        acks: &mut Vec<SyncSender<()>>,
    ) -> u64 {
        match message {
            Message::Hold(line) => match self.folder.take(line) {
                Some(line) => Writer::serialise(&line, batch),
                None => 0,
            },
            Message::Flush(ack) => {
                acks.push(ack);
                0
            }
        }
    }

    /// Appends `line` to the batch; how many holds it stands for.
    fn serialise(line: &HoldLine, batch: &mut Vec<u8>) -> u64 {
        // Serialising plain strings and numbers into memory cannot fail.
        if serde_json::to_writer(&mut *batch, line).is_ok() {
            batch.push(b'\n');
            line.count
        } else {
            0
        }
    }

    fn write(&mut self, batch: &[u8], holds: u64) {
        if holds == 0 {
            return;
        }
        if self.broken {
            self.counts.failed.fetch_add(holds, Ordering::Relaxed);
            return;
        }
        match self.file.write_all(batch) {
            Ok(()) => {
                self.counts.written.fetch_add(holds, Ordering::Relaxed);
            }
            Err(err) => {
                self.broken = true;
                self.counts.failed.fetch_add(holds, Ordering::Relaxed);
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
            count: 1,
            last_arrival_ms: None,
        }
    }

    /// A request refused at arrival at `arrival_ms` with `outcome`.
    fn refused(id: usize, arrival_ms: f64, outcome: &str) -> HoldLine {
        HoldLine {
            request_id: Some(format!("r{id}")),
            outcome: outcome.into(),
            status: Some(if outcome == "shed" { 503 } else { 504 }),
            budget_ms: Some(1),
            arrival_ms,
            ..hold(None, None)
        }
    }

    #[test]
    fn refusals_past_the_allowance_fold_into_one_line_per_second_and_outcome() {
        let mut folder = Folder::new(RefusedLines::PerSecond(3));
        let mut written = Vec::new();
        // Second 10: five 504s and two 503s refused, one request served in between.
        for i in 0..5 {
            written.extend(folder.take(refused(i, 10_000.0 + i as f64, "deadline")));
        }
        written.extend(folder.take(hold(Some(10_100.0), Some(10_200.0))));
        for i in 5..7 {
            written.extend(folder.take(refused(i, 10_500.0 + i as f64, "shed")));
        }
        // Second 11: one refusal, under its own allowance.
        written.extend(folder.take(refused(7, 11_000.0, "deadline")));
        let ids: Vec<_> = written.iter().map(|h| h.request_id.clone()).collect();
        assert_eq!(
            ids,
            [Some("r0"), Some("r1"), Some("r2"), Some("r1"), Some("r7")]
                .map(|id| id.map(String::from)),
            "the first three refusals of second 10, the served request, second 11's refusal"
        );
        // Nothing of second 10 is due before it ended and its grace passed.
        assert!(folder.due(Some(11_000.0 + FOLD_GRACE_MS - 1.0)).is_empty());
        assert_eq!(
            folder.next_due(11_000.0),
            Some(Duration::from_secs_f64(FOLD_GRACE_MS / 1_000.0))
        );
        let folds = folder.due(Some(11_000.0 + FOLD_GRACE_MS));
        assert_eq!(folds.len(), 2, "{folds:?}");
        assert_eq!(
            (
                folds[0].outcome.as_str(),
                folds[0].count,
                folds[0].request_id.as_deref()
            ),
            ("deadline", 2, None)
        );
        assert_eq!(folds[0].arrival_ms, 10_003.0);
        assert_eq!(folds[0].last_arrival_ms, Some(10_004.0));
        assert_eq!(folds[0].budget_ms, None);
        assert_eq!((folds[1].outcome.as_str(), folds[1].count), ("shed", 2));
        assert_eq!(folds[1].status, Some(503));
        // Every request is counted once: 5 lines in full and 4 folded.
        let total: u64 = written.iter().chain(&folds).map(|h| h.count).sum();
        assert_eq!(total, 9);
        assert!(folder.due(None).is_empty(), "second 11 folded nothing");
        assert_eq!(folder.next_due(12_000.0), None);
    }

    #[test]
    fn with_every_line_asked_for_nothing_folds() {
        let mut folder = Folder::new(RefusedLines::All);
        for i in 0..1_000 {
            assert!(folder.take(refused(i, 5_000.0, "deadline")).is_some());
        }
        assert!(folder.due(None).is_empty());
    }

    #[test]
    fn the_allowance_parses_from_the_command_line() {
        assert_eq!("all".parse(), Ok(RefusedLines::All));
        assert_eq!("0".parse(), Ok(RefusedLines::PerSecond(0)));
        assert_eq!("250".parse(), Ok(RefusedLines::PerSecond(250)));
        let error = "-1".parse::<RefusedLines>().unwrap_err();
        assert_eq!(
            error,
            "expected a number of lines a second or `all`, not \"-1\""
        );
    }

    /// Through the writer thread: a flood of refusals reaches the file as the allowance's lines
    /// and one folded line, every request counted, and the flush at exit writes the fold.
    #[test]
    fn a_flood_of_refusals_is_written_as_the_allowance_and_a_count() {
        let dir = std::env::temp_dir().join(format!("deadline-holds-fold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fold.jsonl");
        let log = HoldLog::create(&path, RefusedLines::PerSecond(10)).unwrap();
        let now = epoch_ms_now();
        for i in 0..1_000 {
            log.write(refused(i, now, "deadline"));
        }
        log.write(hold(Some(now), Some(now + 1.0)));
        let counts = log.flush(Duration::from_secs(5)).unwrap();
        assert_eq!(counts.written, 1_001, "every hold counted: {counts:?}");
        let lines = read_log(&path).unwrap();
        assert_eq!(lines.len(), 12, "10 in full, the served one, one fold");
        let folded: Vec<_> = lines.iter().filter(|h| h.count > 1).collect();
        assert_eq!(folded.len(), 1);
        assert_eq!(folded[0].count, 990);
        assert_eq!(lines.iter().map(|h| h.count).sum::<u64>(), 1_001);
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert!(bytes < 4_000, "{bytes} bytes for 1,001 holds");
        std::fs::remove_dir_all(&dir).unwrap();
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
        let log = HoldLog::create(&path, RefusedLines::All).unwrap();
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
        let log = HoldLog::create(Path::new("/dev/full"), RefusedLines::All).unwrap();
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
        let per_line = HoldLog::with_batching(
            &dir.join("per-line.jsonl"),
            Duration::ZERO,
            RefusedLines::All,
        )
        .unwrap();
        let per_line = pace(Some(&per_line));
        let batched = HoldLog::create(&dir.join("batched.jsonl"), RefusedLines::All).unwrap();
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
