//! `deadline service` raises its soft limit on open files to the hard limit (at most 2^20) at
//! start.
//!
//! Every connection is a file descriptor. Many systems start processes with a soft limit of
//! 1,024 and a hard limit far above it, which a busy hop reaches long before its CPU is used
//! up; past it, `accept` fails with "too many open files" and new callers wait in the
//! kernel's queue, where no budget is counted, until a connection closes. A process may raise
//! its own soft limit up to the hard limit without privileges, as servers commonly do, so the
//! service does that once at start and says so. When even the hard limit runs out, the serve
//! loop's accept back-off and its one warning a second say it.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The most the soft limit is raised to: a hard limit of "unlimited" (or a billion, as some
/// container runtimes set) would otherwise pass a limit that large to every child process, and
/// some systems refuse an unlimited soft limit.
const CAP: u64 = 1 << 20;

/// What happened to the limit: `Some((before, after))` when it was raised, `None` when the soft
/// limit already was the hard limit (or at least [`CAP`]).
pub(crate) fn raise_open_files() -> std::io::Result<Option<(u64, u64)>> {
    let limit = getrlimit(Resource::Nofile);
    let Some(soft) = limit.current else {
        return Ok(None);
    };
    let target = limit.maximum.map_or(CAP, |hard| hard.min(CAP));
    if target <= soft {
        return Ok(None);
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        },
    )?;
    Ok(Some((soft, target)))
}

/// The soft limit on open files now, if there is one.
pub(crate) fn soft_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}
