//! Placing the chain's services: `--hop-prefix`, `--netns`, `--hop-listen` and `--margin` on
//! `deadline load` and `deadline demo`, on loopback (the network namespaces themselves are
//! exercised by `scripts/netem-chain.sh`, which needs root).

use crate::util::bin;

fn short_load(extra: &[&str]) -> std::process::Output {
    bin()
        .args([
            "load",
            "--only",
            "with",
            "--rate",
            "10",
            "--seconds",
            "1",
            "--json",
        ])
        .args(extra)
        .output()
        .expect("load runs")
}

#[test]
fn services_start_under_a_prefix_and_stop_through_it() {
    // `env` execs the service, as `ip netns exec` does: the stdin pipe still reaches it, so
    // the chain stops cleanly (a non-zero exit of any service would fail the run).
    let out = short_load(&[
        "--hop-prefix",
        "gateway=env DEADLINE_PLACED=1",
        "--hop-prefix",
        "orders=env",
        "--hop-prefix",
        "inventory=env",
        "--hop-listen",
        "gateway=127.0.0.1:0,inventory=127.0.0.1:0",
        "--margin",
        "80",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let run = &json["runs"][0];
    assert_eq!(run["requests"], 10, "{run}");
    assert_eq!(
        run["worker_ms_after_users_left"].as_f64(),
        Some(0.0),
        "{run}"
    );
    assert!(run["calls"].as_u64().unwrap() >= 10, "{run}");
}

#[test]
fn the_prefix_is_what_starts_the_service() {
    let out = short_load(&["--hop-prefix", "orders=/nonexistent/prefix --flag"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("starting orders under \"/nonexistent/prefix\""),
        "{stderr}"
    );
}

#[test]
fn bad_placements_are_refused_before_anything_starts() {
    for (args, expected) in [
        (&["--netns", "cache=ns1"][..], "no hop \"cache\""),
        (&["--netns", "gateway"][..], "expected HOP=VALUE"),
        (&["--netns", "orders=a,orders=b"][..], "two prefixes"),
        (&["--hop-prefix", "orders="][..], "nothing after '='"),
        (
            &["--hop-listen", "inventory=localhost:0"][..],
            "expected IP:PORT",
        ),
        (
            &["--hop-listen", "gateway=0.0.0.0:0"][..],
            "cannot be dialled",
        ),
        (
            &["--margin", "2000"][..],
            "--margin must be below --user-wait",
        ),
    ] {
        for command in ["load", "demo"] {
            let out = bin().arg(command).args(args).output().expect("runs");
            assert_eq!(out.status.code(), Some(1), "{command} {args:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(expected), "{command} {args:?}: {stderr}");
            assert!(out.stdout.is_empty(), "{command} {args:?}");
        }
    }
}
