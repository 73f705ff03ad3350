//! What Linux's `/proc` says about this process and the machine: thread ids, each thread's CPU
//! time, the load average. Elsewhere every reading is empty and the CPU columns stay blank.

use std::time::Duration;

/// `/proc/loadavg`'s three load averages (empty where there is no such file).
pub(crate) fn load_average() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| {
            s.split_whitespace()
                .take(3)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The calling thread's kernel thread id (Linux), from `/proc/thread-self/stat`.
pub(crate) fn current_tid() -> Option<u32> {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time thread `tid` of this process has used (Linux): the first field of its
/// `schedstat`, in ns.
pub(crate) fn thread_cpu(tid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The total CPU time of `tids`, or `None` if any cannot be read (or there are none).
pub(crate) fn threads_cpu(tids: &[u32]) -> Option<Duration> {
    if tids.is_empty() {
        return None;
    }
    tids.iter()
        .map(|tid| thread_cpu(*tid))
        .sum::<Option<Duration>>()
}
