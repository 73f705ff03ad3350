//! The most file descriptors each service held at once during a run, sampled from `/proc`.
//!
//! The hygiene figures read each service before the run and after it drained; past capacity
//! what matters is the peak in between (connections piling up until `accept` fails), so a task
//! counts the entries of `/proc/PID/fd` of every service every [`EVERY`] while the users run
//! (reading 10,000 entries costs the generator about a millisecond; at 200 ms intervals that was
//! 6 % of its time in one profile, hence half a second).
//! A sample, not a count of every open and close: a peak shorter than the interval can be
//! missed. Linux only: elsewhere, or for a process already gone, the peak is `None`.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How often the descriptors are counted.
const EVERY: Duration = Duration::from_millis(500);

/// A running sampler.
#[derive(Debug)]
pub(super) struct FdPeaks {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Vec<Option<usize>>>,
}

impl FdPeaks {
    /// Starts counting the descriptors of `pids` (edge first; `None` for a process not known).
    pub(super) fn start(pids: Vec<Option<u32>>) -> FdPeaks {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut peaks: Vec<Option<usize>> = vec![None; pids.len()];
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {}
                }
                let pids = pids.clone();
                let Ok(counts) = tokio::task::spawn_blocking(move || {
                    pids.iter()
                        .map(|p| p.and_then(open_fds))
                        .collect::<Vec<_>>()
                })
                .await
                else {
                    break;
                };
                for (peak, count) in peaks.iter_mut().zip(counts) {
                    *peak = match (*peak, count) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
            peaks
        });
        FdPeaks { stop, task }
    }

    /// Stops the sampler and returns each process's peak, in the order given.
    pub(super) async fn stop(self) -> Vec<Option<usize>> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// How many descriptors process `pid` has open now.
fn open_fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(Iterator::count)
}

#[cfg(test)]
mod tests {
    use super::FdPeaks;

    #[tokio::test]
    async fn the_peak_of_this_process_is_seen_and_an_unknown_one_is_none() {
        let me = std::process::id();
        let sampler = FdPeaks::start(vec![Some(me), None]);
        // Hold many more descriptors than the process has otherwise, for a few samples.
        let held: Vec<std::fs::File> = (0..200)
            .map(|_| std::fs::File::open("/proc/self/status").unwrap())
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        drop(held);
        let peaks = sampler.stop().await;
        if cfg!(target_os = "linux") {
            assert!(peaks[0].is_some_and(|n| n >= 200), "{peaks:?}");
        }
        assert_eq!(peaks[1], None);
    }
}
