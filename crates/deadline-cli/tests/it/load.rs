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

#[test]
fn bad_overload_arguments_are_clear_errors() {
    for (args, says) in [
        (&["--overload", "0"][..], "--overload"),
        (&["--overload", "1,1"], "--overload"),
        (&["--overload", "x"], "--overload"),
        (
            &["--overload", "2", "--search-seconds", "0"],
            "--search-seconds",
        ),
        (
            &["--overload", "2", "--search-steps", "11"],
            "--search-steps",
        ),
        (
            &["--overload", "2", "--slots-per-rate", "0"],
            "--slots-per-rate",
        ),
        (
            &["--overload", "2", "--hop-slots-per-rate", "0"],
            "--hop-slots-per-rate",
        ),
        (&["--hop-max-queue-wait", "50"], "--hop-max-queue-wait"),
        (&["--max-lag", "0"], "--max-lag"),
        (&["--search-seconds", "3"], "--overload"),
    ] {
        let out = bin().arg("load").args(args).output().unwrap();
        let code = out.status.code();
        assert!(
            code == Some(1) || code == Some(2),
            "{args:?}: a clear error, not a panic ({code:?})"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// The capacity search and one multiple, in short runs: the JSON's rows follow the capacity the
/// search found, and every figure the table prints is there.
#[test]
fn overload_offers_multiples_of_the_capacity_it_found() {
    let out = bin()
        .args([
            "load",
            "--overload",
            "2",
            "--rate",
            "100",
            "--search-seconds",
            "1",
            "--search-steps",
            "0",
            "--seconds",
            "1",
            "--only",
            "with",
            "--hop-slots-per-rate",
            "0.2",
            "--hop-max-queue-wait",
            "50",
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
    let capacity = &json["capacity"];
    let rate = capacity["rate"].as_f64().unwrap();
    let probes = capacity["probes"].as_array().unwrap();
    assert!(
        probes
            .iter()
            .any(|p| p["rate"].as_f64() == Some(rate) && p["passed"] == true),
        "{capacity}"
    );
    // Every rate that passed is at most the capacity; every rate that failed is above it.
    for probe in probes {
        let r = probe["rate"].as_f64().unwrap();
        if probe["passed"] == true {
            assert!(r <= rate, "{probe}");
        } else {
            assert!(r > rate, "{probe}");
            assert!(!probe["failures"].as_array().unwrap().is_empty(), "{probe}");
        }
    }
    assert_eq!(
        capacity["slots"].as_u64().unwrap(),
        (rate * 0.26).ceil() as u64
    );
    assert_eq!(
        capacity["hop_slots"].as_u64().unwrap(),
        (rate * 0.2).ceil() as u64
    );
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "one multiple, one way");
    let row = &rows[0];
    assert_eq!(row["multiple"].as_f64(), Some(2.0));
    assert_eq!(row["offered_per_s"].as_f64(), Some((rate * 2.0).round()));
    assert_eq!(row["deadlines"], true);
    let valid = row["send_lateness_p99_ms"].as_f64().unwrap() <= 50.0;
    assert_eq!(row["valid"], valid, "{row}");
    let services = row["services"].as_array().unwrap();
    let names: Vec<&str> = services
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gateway", "orders", "inventory"]);
    for service in services {
        assert!(service["cpu_s"].as_f64().is_some(), "{service}");
        assert!(service["peak_rss_mib"].as_f64().is_some(), "{service}");
        assert!(
            service["peak_fds"].as_u64().is_some_and(|n| n > 0),
            "{service}"
        );
        assert_eq!(service["out_of_fds_lines"], 0, "{service}");
    }
    // The run behind the row carries its own figures, and they agree.
    assert_eq!(row["run"]["goodput_per_s"], row["goodput_per_s"]);
    assert!(
        row["connections_per_user"]
            .as_f64()
            .is_some_and(|c| c > 0.0)
    );
}
