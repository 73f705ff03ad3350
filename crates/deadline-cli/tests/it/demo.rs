//! `deadline demo` end to end: three processes, both ways, with the reference run's figures
//! (exact on counts, slack on times). This is also the whole-chain test of the client side: the
//! demo's settings, without deadlines and with them.

use std::time::Duration;

use crate::util::bin;

#[test]
fn demo_reproduces_the_reference_run() {
    let out = bin().args(["demo", "--json"]).output().expect("demo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let runs = json["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    let (without, with) = (&runs[0], &runs[1]);
    assert_eq!(without["deadlines"], false);
    assert_eq!(with["deadlines"], true);

    // Without: the user gives up at 2 s; 3 gateway->orders attempts, each with 3 inventory calls.
    assert_eq!(without["user_status"], serde_json::Value::Null);
    assert_eq!(without["calls"], 12, "{without}");
    // The user leaves at 2 s. Orders' first call to inventory comes at about 0.02 s and its
    // second after a 1 s timeout; its third, after another, at about 2.02 s, a race with the
    // user's 2 s timer on a busy machine. Everything from the gateway's second attempt on comes
    // after orders' three timeouts (past 3 s). So 8 or 9 calls came after the user left.
    let after = without["calls_after_user_left"].as_u64().unwrap();
    assert!((8..=9).contains(&after), "{without}");
    let last = without["last_work_end_ms"].as_f64().unwrap();
    assert!(
        (9_000.0..11_500.0).contains(&last),
        "services busy until about 9.6 s: {last}"
    );
    assert!(without["worker_ms_after_user_left"].as_f64().unwrap() > 5_000.0);

    // With: a 504 before the user gives up, carrying inventory's own report; nothing after.
    assert_eq!(with["user_status"], 504, "{with}");
    let heard = with["user_heard_back_ms"].as_f64().unwrap();
    assert!(heard < 2_000.0, "heard back inside the 2 s wait: {heard}");
    assert!(heard > 1_500.0, "after using most of the budget: {heard}");
    assert_eq!(with["calls_after_user_left"], 0, "{with}");
    assert_eq!(
        with["worker_ms_after_user_left"].as_f64().unwrap(),
        0.0,
        "{with}"
    );
    assert!(with["last_work_end_ms"].as_f64().unwrap() < 2_000.0);
    // Inventory's own report reaches the user in the trace: its hop span, its work cut at the
    // deadline, nested under orders' attempts.
    let trace = with["user_trace"]
        .as_str()
        .expect("the 504 carries a trace");
    let out = bin().args(["trace", "--json", trace]).output().unwrap();
    let tree: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let inventory = find(&tree["spans"], "inventory").expect("inventory's span is in the trace");
    assert_eq!(inventory["outcome"], "504");
    let work = find(&inventory["children"], "work").expect("inventory's work span");
    assert_eq!(work["outcome"], "deadline", "{work}");
    let body = with["user_body"].as_str().unwrap();
    assert!(
        body.starts_with("gateway:"),
        "the body says which hops answered: {body}"
    );
}

/// The first span named `name` in a JSON span forest, depth first.
fn find<'a>(spans: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    spans.as_array()?.iter().find_map(|s| {
        if s["name"] == name {
            Some(s)
        } else {
            find(&s["children"], name)
        }
    })
}

/// The summary and the timeline of a short demo (inventory works 600 ms, the user waits 400 ms)
/// carry that scenario's figures, and agree with each other. Without deadlines nothing stops
/// inventory: the user gives up at 0.40 s with no answer, while all three services work on past
/// it (inventory until at least 0.62 s, after orders' 20 ms). With them the user hears a 504
/// before 0.40 s and no service works after that. Times are bounded with slack; counts are exact.
#[test]
fn demo_draws_a_timeline() {
    let dir = std::env::temp_dir().join(format!("deadline-demo-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("t.svg");
    let out = bin()
        .args([
            "demo",
            "--inventory-work",
            "600",
            "--user-wait",
            "400",
            "--svg",
            svg.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().all(|l| l.chars().count() <= 80),
        "fits 80 columns:\n{text}"
    );
    let (without, with) = text
        .split_once("\nWith deadlines\n")
        .unwrap_or_else(|| panic!("two runs:\n{text}"));
    let without = without
        .split_once("\nWithout deadlines\n")
        .unwrap_or_else(|| panic!("the run without:\n{text}"))
        .1;

    // The summary's figures, as printed (seconds to two decimals).
    let gave_up = after(without, "user       gave up at ", " s with no answer");
    let without_end = after(without, "last work  ended at ", " s");
    assert!(
        (0.40..1.40).contains(&secs(gave_up)),
        "gave up at its 0.40 s wait: {text}"
    );
    assert!(
        (0.62..1.60).contains(&secs(without_end)),
        "inventory's 600 ms after orders' 20: {text}"
    );
    assert!(
        without.contains("  calls      2 between services, 0 after the user left\n"),
        "one call each to orders and inventory, both before 0.40 s:\n{text}"
    );
    let heard = after(with, "user       heard 504 at ", " s");
    let with_end = after(with, "last work  ended at ", " s");
    assert!(
        secs(heard) < secs(gave_up) && secs(heard) >= 0.20,
        "a 504 inside the wait, after most of the 350 ms budget: {text}"
    );
    assert!(secs(with_end) <= secs(heard), "{text}");
    assert!(
        with.contains("  calls      2 between services, 0 after the user left\n"),
        "{text}"
    );
    assert!(
        with.contains("  waste      0 ms of worker time after the user left"),
        "{text}"
    );

    // The timeline: each run's title carries the same figures, and its bars are split where
    // the user left: red (after) for all three services without deadlines, none with them.
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    let title_without = format!(
        "Without deadlines: user gave up at {gave_up} s; 2 calls, 0 after the user left; \
         work until {without_end} s"
    );
    let title_with = format!(
        "With deadlines: user heard 504 at {heard} s; 2 calls, 0 after the user left; \
         work until {with_end} s"
    );
    let (panel_without, rest) = picture
        .split_once(&title_with)
        .unwrap_or_else(|| panic!("{title_with} missing:\n{picture}"));
    let panel_without = panel_without
        .split_once(&title_without)
        .unwrap_or_else(|| panic!("{title_without} missing:\n{picture}"))
        .1;
    let (panel_without, _) = panel_without
        .split_once(&format!("user stops waiting ({gave_up} s)"))
        .expect("the give-up line, at the figure");
    let (panel_with, _) = rest
        .split_once(&format!("user heard back and stopped waiting ({heard} s)"))
        .expect("the heard-back line, at the figure");
    let bars = |panel: &str, service: &str, colour: &str| {
        panel
            .lines()
            .filter(|l| l.contains(&format!("fill=\"{colour}\"")))
            .filter(|l| l.contains(&format!("<title>{service} ")))
            .count()
    };
    const BEFORE: &str = "#4c78a8";
    const AFTER: &str = "#e45756";
    for service in ["gateway", "orders", "inventory"] {
        assert_eq!(bars(panel_without, service, AFTER), 1, "{service} without");
        assert_eq!(bars(panel_with, service, BEFORE), 1, "{service} with");
        assert_eq!(bars(panel_with, service, AFTER), 0, "{service} with");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The text between `before` and the next `until` in `text`.
fn after<'a>(text: &'a str, before: &str, until: &str) -> &'a str {
    let rest = text
        .split_once(before)
        .unwrap_or_else(|| panic!("{before:?} missing:\n{text}"))
        .1;
    rest.split_once(until)
        .unwrap_or_else(|| panic!("{until:?} missing after {before:?}:\n{text}"))
        .0
}

fn secs(figure: &str) -> f64 {
    figure
        .parse()
        .unwrap_or_else(|_| panic!("{figure:?} is not seconds"))
}

/// No orphans: killing the demo outright (no destructor runs) still ends its services, because
/// each one exits when the pipe on its stdin closes.
#[cfg(target_os = "linux")]
#[test]
fn killing_the_demo_leaves_no_services_behind() {
    let mut demo = bin()
        .arg("demo")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = demo.id();
    let children = wait_for(Duration::from_secs(20), || {
        let kids = children_of(pid);
        (kids.len() == 3).then_some(kids)
    })
    .expect("the demo starts three services");
    demo.kill().unwrap();
    demo.wait().unwrap();
    let gone = wait_for(Duration::from_secs(20), || {
        children.iter().all(|c| !alive(*c)).then_some(())
    });
    assert!(gone.is_some(), "services {children:?} outlived the demo");
    // The killed demo could not remove its log directory (no destructor ran): the test does.
    let marker = format!("-{pid}-");
    for entry in std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("deadline-demo-") && name.contains(&marker) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(target_os = "linux")]
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit_once(')')
                        .map(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_owned))
                })
                .flatten()
                .is_some_and(|ppid| ppid == pid.to_string())
        })
        .collect()
}

#[cfg(target_os = "linux")]
fn alive(pid: u32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let step = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while waited < limit {
        if let Some(value) = probe() {
            return Some(value);
        }
        #[allow(clippy::disallowed_methods)] // polling another process in real time
        std::thread::sleep(step);
        waited += step;
    }
    None
}
