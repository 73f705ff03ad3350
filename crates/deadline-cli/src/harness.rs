//! Starts `deadline service` processes for the demo and the load command, and always ends them.
//!
//! Each service is this same binary, started with `service --exit-on-stdin-close`: its standard
//! input is a pipe held by this process, so when this process ends for any reason (an error,
//! Ctrl-C, even SIGKILL) the pipe closes and the service drains and exits. No orphans are left
//! even when nobody runs a destructor. `kill_on_drop` is the second line of defence.
//!
//! Stopping is ordered from the edge inwards: the gateway first, then orders, then inventory,
//! each drained before the next is told. Work a baseline service keeps doing after its caller
//! left (retries included) therefore still reaches the services behind it and is counted.
//!
//! By default every service listens on `127.0.0.1:0`. A [`Placement`] moves a hop elsewhere: a
//! listen address of its own and a command prefix it is started under (`ip netns exec NS` puts it
//! in a network namespace). The prefix must hand the service this process's pipes and wait for
//! it, as `ip netns exec`, `env` and `taskset` do by exec'ing it: the stdin-pipe shutdown above
//! then works unchanged, and the process this harness waits for and kills is the service itself.
//! Each hop dials the next at the URL from that one's ready line, so a listen address must be one
//! the hop before can reach (never `0.0.0.0`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::holds::{HoldLine, read_log};
use crate::placement::Placement;

/// How long a service may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long each service is given to drain once told to stop (its `--drain-timeout`, longer
/// than the service's default): a baseline keeps working for callers that left, and every hold
/// of that work must reach the log to be counted.
const DRAIN_TIMEOUT_S: u64 = 600;
/// How long a service may take to drain and exit once told to stop: a little more than
/// [`DRAIN_TIMEOUT_S`], after which it exits anyway and says so.
const STOP_TIMEOUT: Duration = Duration::from_secs(DRAIN_TIMEOUT_S + 30);

/// One hop of the chain: its name and its `deadline service` flags (beyond name, log, downstream).
#[derive(Debug, Clone)]
pub(crate) struct Hop {
    pub name: &'static str,
    pub args: Vec<String>,
}

/// The reference scenario's timeouts: gateway -> orders 3.5 s x 3 attempts,
/// orders works 20 ms, then orders -> inventory 1 s x 3 attempts.
pub(crate) mod reference {
    /// Gateway -> orders timeout per attempt, ms.
    pub(crate) const GATEWAY_TIMEOUT: u64 = 3_500;
    /// Gateway -> orders attempts.
    pub(crate) const GATEWAY_ATTEMPTS: u32 = 3;
    /// Orders' own work, ms.
    pub(crate) const ORDERS_WORK: u64 = 20;
    /// Orders -> inventory timeout per attempt, ms.
    pub(crate) const ORDERS_TIMEOUT: u64 = 1_000;
    /// Orders -> inventory attempts.
    pub(crate) const ORDERS_ATTEMPTS: u32 = 3;
}

/// The three-hop chain the demo and the load command run: built in one place so the two cannot
/// drift apart. Only `deadlines` differs between a run without and a run with.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub gateway_timeout: u64,
    pub gateway_attempts: u32,
    pub orders_work: u64,
    pub orders_timeout: u64,
    pub orders_attempts: u32,
    /// Inventory's flags beyond its name: work, slots, slowness.
    pub inventory: Vec<String>,
}

impl Scenario {
    /// The reference timeouts with these inventory flags.
    pub(crate) fn reference(inventory: Vec<String>) -> Scenario {
        Scenario {
            gateway_timeout: reference::GATEWAY_TIMEOUT,
            gateway_attempts: reference::GATEWAY_ATTEMPTS,
            orders_work: reference::ORDERS_WORK,
            orders_timeout: reference::ORDERS_TIMEOUT,
            orders_attempts: reference::ORDERS_ATTEMPTS,
            inventory,
        }
    }

    /// The hops, edge first. Without deadlines every service gets `--no-enforce --no-propagate`.
    pub(crate) fn hops(&self, deadlines: bool) -> Vec<Hop> {
        let baseline: &[&str] = if deadlines {
            &[]
        } else {
            &["--no-enforce", "--no-propagate"]
        };
        let hop = |name: &'static str, args: Vec<String>| Hop {
            name,
            args: args
                .into_iter()
                .chain(baseline.iter().map(|s| (*s).to_owned()))
                .collect(),
        };
        let flag = |name: &str, value: &dyn ToString| [name.to_owned(), value.to_string()];
        vec![
            hop(
                "gateway",
                [
                    flag("--timeout", &self.gateway_timeout),
                    flag("--attempts", &self.gateway_attempts),
                ]
                .concat(),
            ),
            hop(
                "orders",
                [
                    flag("--work", &self.orders_work),
                    flag("--timeout", &self.orders_timeout),
                    flag("--attempts", &self.orders_attempts),
                ]
                .concat(),
            ),
            hop("inventory", self.inventory.clone()),
        ]
    }
}

/// A running service.
#[derive(Debug)]
struct Running {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
    log: PathBuf,
    /// Lines of its standard error that reported running out of file descriptors.
    out_of_fds: Arc<AtomicUsize>,
}

/// A temporary directory removed when dropped.
#[derive(Debug)]
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(label: &str) -> anyhow::Result<TempDir> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("deadline-{label}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The budget a user who waits `user_wait` ms sends: what is left once `margin` is kept back
/// for the way to the first hop (at least 1 ms).
pub(crate) fn user_budget(user_wait: u64, margin: u64) -> u64 {
    user_wait.saturating_sub(margin).max(1)
}

/// `hops` with `--margin MS` added to every service: the transit margin each caller keeps back
/// from the budget it forwards (the services' default is 50 ms).
pub(crate) fn with_margin(mut hops: Vec<Hop>, margin: u64) -> Vec<Hop> {
    for hop in &mut hops {
        hop.args.extend(["--margin".to_owned(), margin.to_string()]);
    }
    hops
}

/// A chain of services, edge first, each a separate OS process (on loopback unless placed elsewhere).
#[derive(Debug)]
pub(crate) struct Chain {
    running: Vec<Running>,
    _dir: TempDir,
}

impl Chain {
    /// Starts `hops` (edge first) from the innermost outwards, each where `placement` puts it,
    /// wiring each to the next one's URL as read from its ready line.
    pub(crate) async fn start(
        label: &str,
        hops: &[Hop],
        placement: &Placement,
    ) -> anyhow::Result<Chain> {
        let exe = std::env::current_exe().context("finding the deadline binary")?;
        Chain::start_program(label, hops, placement, &[exe.into(), "service".into()]).await
    }

    /// As [`start`](Chain::start), each hop run by `program` (a command and its first
    /// arguments) instead of `deadline service`: a service written with another library that
    /// takes the same flags, prints the same ready line and writes the same log.
    pub(crate) async fn start_program(
        label: &str,
        hops: &[Hop],
        placement: &Placement,
        program: &[std::ffi::OsString],
    ) -> anyhow::Result<Chain> {
        let (exe, first_args) = program
            .split_first()
            .ok_or_else(|| anyhow!("no program to run the services with"))?;
        let dir = TempDir::new(label)?;
        let mut running: Vec<Running> = Vec::with_capacity(hops.len());
        for hop in hops.iter().rev() {
            let log = dir.path().join(format!("{}.jsonl", hop.name));
            let place = placement.hop(hop.name);
            let mut cmd = match place.prefix.split_first() {
                Some((program, rest)) => {
                    let mut cmd = Command::new(program);
                    cmd.args(rest).arg(exe);
                    cmd
                }
                None => Command::new(exe),
            };
            cmd.args(first_args)
                .arg("--name")
                .arg(hop.name)
                .arg("--log")
                .arg(&log)
                // The demo and the load join every hold to its user by request id.
                .args(["--log-refused", "all"])
                .arg("--exit-on-stdin-close")
                .arg("--drain-timeout")
                .arg(DRAIN_TIMEOUT_S.to_string())
                .args(&hop.args);
            if let Some(listen) = place.listen {
                cmd.arg("--listen").arg(listen.to_string());
            }
            if let Some(next) = running.last() {
                cmd.arg("--downstream")
                    .arg(&next.url)
                    .arg("--downstream-name")
                    .arg(next.name);
            }
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let mut child = cmd.spawn().with_context(|| match place.prefix.first() {
                Some(program) => format!("starting {} under {program:?}", hop.name),
                None => format!("starting {}", hop.name),
            })?;
            let stdin = child.stdin.take();
            let out_of_fds = Arc::new(AtomicUsize::new(0));
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(pass_on_stderr(stderr, out_of_fds.clone()));
            }
            let stdout = child
                .stdout
                .take()
                .ok_or_else(|| anyhow!("{}: no stdout", hop.name))?;
            let url = tokio::time::timeout(READY_TIMEOUT, ready_line(stdout))
                .await
                .map_err(|_| {
                    anyhow!(
                        "{} did not say it was listening within {READY_TIMEOUT:?}",
                        hop.name
                    )
                })?
                .with_context(|| format!("{} did not start", hop.name))?;
            running.push(Running {
                name: hop.name,
                child,
                stdin,
                url,
                log,
                out_of_fds,
            });
        }
        running.reverse();
        Ok(Chain { running, _dir: dir })
    }

    /// Every service's name and base URL, edge first.
    pub(crate) fn services(&self) -> Vec<(&'static str, String)> {
        self.running
            .iter()
            .map(|r| (r.name, r.url.clone()))
            .collect()
    }

    /// Every service's name and process id (`None` once it has exited), edge first.
    pub(crate) fn pids(&self) -> Vec<(&'static str, Option<u32>)> {
        self.running
            .iter()
            .map(|r| (r.name, r.child.id()))
            .collect()
    }

    /// Each service's count of the lines of its standard error that said it ran out of file
    /// descriptors (`EMFILE` or `ENFILE`, as the serve loop logs a failed accept), edge first.
    /// The counts go on after the chain is stopped, until each service's last line is read.
    pub(crate) fn out_of_fds_lines(&self) -> Vec<(&'static str, Arc<AtomicUsize>)> {
        self.running
            .iter()
            .map(|r| (r.name, r.out_of_fds.clone()))
            .collect()
    }

    /// The edge's base URL (`http://127.0.0.1:PORT` on loopback).
    pub(crate) fn edge_url(&self) -> &str {
        self.running.first().map_or("", |r| r.url.as_str())
    }

    /// Stops every service, edge first, each drained before the next, and returns every hold
    /// they logged.
    pub(crate) async fn stop(self) -> anyhow::Result<Vec<HoldLine>> {
        Ok(self.stop_with_usage().await?.0)
    }

    /// As [`stop`](Chain::stop), and also what each service used (CPU time and peak memory),
    /// read just before it is told to stop, edge first.
    pub(crate) async fn stop_with_usage(
        mut self,
    ) -> anyhow::Result<(Vec<HoldLine>, Vec<ProcessUsage>)> {
        let mut holds = Vec::new();
        let mut usage = Vec::new();
        for service in &mut self.running {
            usage.push(ProcessUsage::of(service.name, service.child.id()));
            drop(service.stdin.take()); // the signal to drain and exit
            let status = tokio::time::timeout(STOP_TIMEOUT, service.child.wait())
                .await
                .map_err(|_| anyhow!("{} did not exit within {STOP_TIMEOUT:?}", service.name))?
                .with_context(|| format!("waiting for {}", service.name))?;
            if !status.success() {
                bail!("{} exited with {status}", service.name);
            }
            holds.extend(read_log(&service.log)?);
        }
        Ok((holds, usage))
    }
}

/// What one process had used when it was read: CPU time (user and system, every thread, the
/// exited ones included) and peak resident memory. Linux only (`/proc`); elsewhere, or once the
/// process is gone, the figures are `None`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProcessUsage {
    /// The service's name (or `generator` for this process).
    pub name: String,
    /// CPU time in user mode, in ms.
    pub cpu_user_ms: Option<f64>,
    /// CPU time in the kernel on its behalf, in ms.
    pub cpu_sys_ms: Option<f64>,
    /// `cpu_user_ms + cpu_sys_ms`.
    pub cpu_ms: Option<f64>,
    /// Peak resident set size (`VmHWM`), in KiB.
    pub peak_rss_kib: Option<u64>,
}

impl ProcessUsage {
    /// Reads process `pid` (`None`: this process).
    pub(crate) fn of(name: &str, pid: Option<u32>) -> ProcessUsage {
        let dir = pid.map_or_else(|| "/proc/self".to_owned(), |pid| format!("/proc/{pid}"));
        let cpu = std::fs::read_to_string(format!("{dir}/stat"))
            .ok()
            .and_then(|stat| cpu_times(&stat));
        let peak = std::fs::read_to_string(format!("{dir}/status"))
            .ok()
            .and_then(|status| peak_rss_kib(&status));
        ProcessUsage {
            name: name.to_owned(),
            cpu_user_ms: cpu.map(|(user, _)| user),
            cpu_sys_ms: cpu.map(|(_, sys)| sys),
            cpu_ms: cpu.map(|(user, sys)| user + sys),
            peak_rss_kib: peak,
        }
    }
}

/// Linux reports CPU times in `/proc` in clock ticks of `USER_HZ`, which is 100 on every
/// mainstream architecture (it is part of the kernel's ABI; `sysconf` would need `unsafe`).
const MS_PER_TICK: f64 = 10.0;

/// `(user, system)` CPU time in ms from a `/proc/PID/stat` line: fields 14 and 15, counted
/// after the command name, which is in parentheses and may itself hold spaces.
fn cpu_times(stat: &str) -> Option<(f64, f64)> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let sys: u64 = fields.next()?.parse().ok()?;
    Some((user as f64 * MS_PER_TICK, sys as f64 * MS_PER_TICK))
}

/// `VmHWM` (peak resident set size) in KiB from a `/proc/PID/status` text.
fn peak_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Passes a service's standard error on to this process's, line by line, counting the lines
/// that say it ran out of file descriptors (the operating system's words for `EMFILE` and
/// `ENFILE`, or their numbers as Rust prints them).
async fn pass_on_stderr(stderr: tokio::process::ChildStderr, out_of_fds: Arc<AtomicUsize>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if says_out_of_fds(&line) {
            out_of_fds.fetch_add(1, Ordering::Relaxed);
        }
        eprintln!("{line}");
    }
}

/// Whether a log line reports running out of file descriptors.
fn says_out_of_fds(line: &str) -> bool {
    ["Too many open files", "os error 24", "os error 23"]
        .iter()
        .any(|needle| line.contains(needle))
}

async fn ready_line(stdout: tokio::process::ChildStdout) -> anyhow::Result<String> {
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .next_line()
        .await?
        .ok_or_else(|| anyhow!("it exited before listening"))?;
    let url = line
        .strip_prefix("listening on ")
        .ok_or_else(|| anyhow!("unexpected first line {line:?}"))?
        .trim()
        .to_owned();
    // Keep reading (and discarding) so the service never blocks on a full stdout pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_parse() {
        let stat = "4242 (deadline (x) y) S 1 4242 4242 0 -1 4194560 1043 0 0 0 157 23 0 0 20 0 \
                    9 0 12345 123456789 2345 18446744073709551615";
        assert_eq!(cpu_times(stat), Some((1570.0, 230.0)));
        assert_eq!(cpu_times("garbage"), None);
        let status = "Name:\tdeadline\nVmPeak:\t  999 kB\nVmHWM:\t   24680 kB\nVmRSS:\t 2000 kB\n";
        assert_eq!(peak_rss_kib(status), Some(24_680));
        assert_eq!(peak_rss_kib("Name: x\n"), None);
    }

    #[test]
    fn a_service_out_of_descriptors_is_recognised_in_its_log() {
        let line = "WARN deadline_http::serve: accept failed; backing off (errors: how many since \
                    the last such line) local=127.0.0.1:4000 error=Too many open files (os error \
                    24) errors=3";
        assert!(says_out_of_fds(line));
        assert!(says_out_of_fds("error=File table overflow (os error 23)"));
        assert!(!says_out_of_fds(
            "accept: connection failed error=Connection reset"
        ));
    }

    #[tokio::test]
    async fn a_service_stderr_is_passed_on_and_its_fd_errors_counted() {
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg("echo 'accept failed error=Too many open files (os error 24)' >&2; echo fine >&2; echo 'again: os error 24' >&2")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let counter = Arc::new(AtomicUsize::new(0));
        let stderr = child.stderr.take().unwrap();
        pass_on_stderr(stderr, counter.clone()).await;
        child.wait().await.unwrap();
        assert_eq!(counter.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn this_process_can_be_read_on_linux() {
        let usage = ProcessUsage::of("generator", None);
        if cfg!(target_os = "linux") {
            assert!(
                usage.cpu_ms.is_some() && usage.peak_rss_kib.is_some(),
                "{usage:?}"
            );
        }
    }
}
