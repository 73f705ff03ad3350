//! A short `deadline load`, checking the JSON's invariants (the full `--check` runs in CI).

use crate::util::bin;

#[test]
fn short_load_reports_consistent_figures() {
    let out = bin()
        .args([
            "load",
            "--rate",
            "20",
            "--seconds",
            "2",
            "--slow-share",
            "0.1",
            "--json",
        ])
        .output()
        .expect("load runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert!(json["check"]["passed"].is_boolean());
    assert!(json["check"]["failures"].is_array());
    let slow: Vec<u64> = runs
        .iter()
        .map(|r| r["slow_requests"].as_u64().unwrap())
        .collect();
    assert_eq!(slow[0], slow[1], "the same requests are slow in both runs");
    for run in runs {
        let requests = run["requests"].as_u64().unwrap();
        assert_eq!(requests, 40, "{run}");
        let in_time = run["in_time"].as_u64().unwrap();
        assert!(in_time <= requests);
        let share = run["in_time_share"].as_f64().unwrap();
        assert!((share - in_time as f64 / requests as f64).abs() < 1e-9);
        let worker = run["worker_ms"].as_f64().unwrap();
        let after = run["worker_ms_after_users_left"].as_f64().unwrap();
        assert!(
            worker > 0.0 && after >= 0.0 && after <= worker + 1e-6,
            "{run}"
        );
        assert!((run["wasted_share"].as_f64().unwrap() - after / worker).abs() < 1e-9);
        // The split of that time by how users' waits ended, and by service, adds up to it.
        let split = &run["after_users_left"];
        let parts: f64 = ["answered_ms", "gave_up_ms", "failed_ms"]
            .iter()
            .map(|k| split[k].as_f64().unwrap())
            .sum();
        assert!((parts - after).abs() < 1e-6, "{run}");
        let by_service: f64 = split["by_service"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert!((by_service - after).abs() < 1e-6, "{run}");
        let by_deadline: f64 = [
            "before_hop_deadline_ms",
            "past_hop_deadline_ms",
            "without_budget_ms",
        ]
        .iter()
        .map(|k| split[k].as_f64().unwrap())
        .sum();
        assert!((by_deadline - after).abs() < 1e-6, "{run}");
        if run["deadlines"] == false {
            assert_eq!(split["without_budget_ms"].as_f64().unwrap(), after, "{run}");
        }
        // Nothing made a user's call fail in a run this small.
        assert_eq!(run["user_errors"], serde_json::json!({}), "{run}");
        assert!(run["drain_ms"].as_f64().unwrap() >= 0.0);
        let services: Vec<&str> = run["services"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(services, ["gateway", "orders", "inventory"], "{run}");
        if cfg!(target_os = "linux") {
            for service in run["services"].as_array().unwrap() {
                assert!(service["cpu_ms"].as_f64().unwrap() >= 0.0, "{service}");
                assert!(service["peak_rss_kib"].as_u64().unwrap() > 0, "{service}");
            }
            assert!(run["generator_cpu_ms"].as_f64().unwrap() >= 0.0, "{run}");
        }
        assert!(run["send_lateness_p99_ms"].as_f64().unwrap() >= 0.0);
    }
    let with = runs.iter().find(|r| r["deadlines"] == true).unwrap();
    // With deadlines, nothing but the slow requests can miss, and nothing runs for users who left.
    assert_eq!(
        with["in_time"].as_u64().unwrap() + with["slow_requests"].as_u64().unwrap(),
        40,
        "{with}"
    );
    assert!(with["wasted_share"].as_f64().unwrap() < 0.01, "{with}");
}

#[test]
fn bad_arguments_are_clear_errors() {
    for args in [
        &["--rate", "0"][..],
        &["--rate", "1e-20"],
        &["--rate", "NaN"],
        &["--rate", "100000", "--seconds", "3600"],
        &["--slow-share", "1.5"],
        &["--slots", "0"],
    ] {
        let out = bin().arg("load").args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: a clear error, not a panic"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error: --"), "{args:?}: {err}");
    }
}
