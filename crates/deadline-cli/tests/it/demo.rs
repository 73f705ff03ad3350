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
    assert_eq!(without["calls_after_user_left"], 9, "{without}");
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

#[test]
fn demo_draws_a_timeline() {
    let dir = std::env::temp_dir().join(format!("deadline-demo-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("t.svg");
    // A quicker inventory keeps this test short: without deadlines the user (400 ms) gives up
    // before inventory (600 ms) answers; with them they hear a 504. Both labels appear.
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
        text.contains("Without deadlines") && text.contains("With deadlines"),
        "{text}"
    );
    assert!(
        text.lines().all(|l| l.chars().count() <= 80),
        "fits 80 columns:\n{text}"
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    for part in [
        "gateway",
        "orders",
        "inventory",
        "user stops waiting",
        "user heard back",
        "after the user stopped waiting",
    ] {
        assert!(picture.contains(part), "{part} missing");
    }
    std::fs::remove_dir_all(&dir).unwrap();
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
