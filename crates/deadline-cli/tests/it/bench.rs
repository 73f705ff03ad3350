//! A very short `deadline bench`: every variant answers, and the report has its shape.

use crate::util::bin;

#[test]
fn short_bench_serves_every_variant_and_reports_ratios() {
    let out = bin()
        .args([
            "bench",
            "--connections",
            "2",
            "--seconds",
            "0.3",
            "--rounds",
            "2",
            "--warmup-ms",
            "50",
            "--json",
        ])
        .output()
        .expect("bench runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let variants = json["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bare", "enforce", "chain-bare", "chain-deadline"]);
    for v in variants {
        assert!(v["requests"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(v["errors"], 0, "{v}");
        assert_eq!(v["rounds_requests_per_second"].as_array().unwrap().len(), 2);
        let (p50, p99, p999) = (
            v["p50_us"].as_u64().unwrap(),
            v["p99_us"].as_u64().unwrap(),
            v["p999_us"].as_u64().unwrap(),
        );
        assert!(p50 <= p99 && p99 <= p999, "{v}");
    }
    let ratios = json["ratios"].as_array().unwrap();
    let pairs: Vec<(&str, &str)> = ratios
        .iter()
        .map(|r| {
            (
                r["variant"].as_str().unwrap(),
                r["baseline"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [("enforce", "bare"), ("chain-deadline", "chain-bare")]
    );
    for r in ratios {
        assert!(r["throughput_ratio"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn bench_rejects_bad_arguments() {
    let out = bin()
        .args(["bench", "--connections", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--connections"));
}
