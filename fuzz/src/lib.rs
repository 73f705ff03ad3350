//! Shared pieces of the fuzz targets: an allocation meter, so a target can assert that a parser's
//! memory stays within a bound that does not grow with its input, and checks that every budget
//! error must pass.
//!
//! libFuzzer's own `-malloc_limit_mb` only works with a sanitizer's allocator hooks, and these
//! targets run without one (`-s none`, on stable Rust). Counting in the global allocator works in
//! every build and measures exactly the parser's own allocations, not the fuzzer's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use deadline::header::MalformedBudget;
use http::HeaderName;

/// The system allocator, counting live bytes and their high-water mark.
#[derive(Debug)]
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // Old and new block may both be live while the bytes are copied: count both at once.
            grew(new_size);
            shrank(layout.size());
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the most bytes it had allocated at any one moment
/// (including what the result still holds). The targets are single-threaded, so nothing else
/// allocates through Rust's allocator meanwhile.
pub fn peak_bytes<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let result = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (result, peak)
}

/// How many bytes of an offending value a budget error quotes.
pub const QUOTED_BYTES: usize = 64;

/// Checks what a rejected budget value reports: the header it came from, and the value quoted as
/// printable ASCII that reads back (by undoing `\"`, `\\` and `\xNN`) as the first
/// [`QUOTED_BYTES`] bytes of `raw`, followed by `...` exactly when `raw` was longer.
pub fn check_error(err: &MalformedBudget, header: &HeaderName, raw: &[u8]) {
    assert_eq!(err.header(), header);
    let quoted = err.value().as_bytes();
    assert!(
        quoted.iter().all(|b| (0x20..=0x7e).contains(b)),
        "quoted value is not printable ASCII: {quoted:?}"
    );
    let (body, truncated) = match quoted.strip_suffix(b"...") {
        Some(body) if raw.len() > QUOTED_BYTES => (body, true),
        _ => (quoted, false),
    };
    assert_eq!(truncated, raw.len() > QUOTED_BYTES, "{quoted:?}");
    let shown = &raw[..raw.len().min(QUOTED_BYTES)];
    assert_eq!(unescape(body).as_deref(), Some(shown), "{quoted:?}");
    let message = err.to_string();
    assert!(message.contains(header.as_str()), "{message}");
    assert!(message.contains(&err.reason().to_string()), "{message}");
}

/// Undoes the quoting: `\"`, `\\` and `\xNN` (lower-case hex); `None` for anything else after a
/// backslash.
fn unescape(quoted: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(quoted.len());
    let mut rest = quoted;
    while let Some((&b, tail)) = rest.split_first() {
        if b != b'\\' {
            out.push(b);
            rest = tail;
            continue;
        }
        match tail {
            [c @ (b'"' | b'\\'), tail @ ..] => {
                out.push(*c);
                rest = tail;
            }
            [b'x', hi, lo, tail @ ..] => {
                let hex = |c: u8| match c {
                    b'0'..=b'9' => Some(c - b'0'),
                    b'a'..=b'f' => Some(c - b'a' + 10),
                    _ => None,
                };
                out.push(hex(*hi)? << 4 | hex(*lo)?);
                rest = tail;
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `raw` without leading and trailing spaces and tabs, written here independently of the crate.
pub fn trim_ows(raw: &[u8]) -> &[u8] {
    let mut s = raw;
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
