//! `deadline trace`: the readable tree and the JSON shape of a decoded `Deadline-Trace`.

use crate::util::bin;

const HEADER: &str = "gateway@0-1873=504,.call:orders@0-1872=504,..attempt@0-1823=504,...orders@1-1822=504,....work@1-21=ok,+2";

#[test]
fn decodes_to_a_tree() {
    let out = bin().args(["trace", HEADER]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [
        "gateway",
        "call:orders",
        "attempt",
        "orders",
        "work",
        "2 more",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    assert!(text.lines().count() >= 6, "{text}");
}

#[test]
fn decodes_to_json_with_the_contract_fields() {
    let out = bin()
        .args(["trace", "--json", &format!("Deadline-Trace: {HEADER}")])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["dropped"], 2);
    let root = &json["spans"][0];
    assert_eq!(root["name"], "gateway");
    assert_eq!(root["start_ms"], 0);
    assert_eq!(root["end_ms"], 1873);
    let work = &root["children"][0]["children"][0]["children"][0]["children"][0];
    assert_eq!(work["name"], "work");
    assert_eq!(work["start_ms"], 1);
    assert!(work["children"].as_array().unwrap().is_empty());
}

#[test]
fn hostile_input_decodes_to_the_valid_prefix_without_failing() {
    for input in [
        "",
        "@@@",
        ",,,",
        "a@0-1,\u{0663}@0-1",
        "a@5-1",
        &".".repeat(100_000),
    ] {
        let out = bin().args(["trace", "--json", input]).output().unwrap();
        assert!(out.status.success(), "{input:?}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(json["spans"].is_array());
    }
    let out = bin()
        .args(["trace", "--json", "a@0-1,\u{0663}@0-1"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["spans"].as_array().unwrap().len(),
        1,
        "the valid prefix is kept"
    );
}

#[cfg(unix)]
#[test]
fn non_utf8_input_is_decoded_not_refused() {
    use std::io::Write as _;
    use std::os::unix::ffi::OsStrExt as _;
    let arg = std::ffi::OsStr::from_bytes(b"a@0-1,\xff@0-1");
    let out = bin().args(["trace", "--json"]).arg(arg).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["spans"].as_array().unwrap().len(),
        1,
        "the valid prefix"
    );

    let mut child = bin()
        .args(["trace", "--json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Deadline-Trace: b@0-2,\xfe\xff\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["spans"][0]["name"], "b");
}

/// Each hop's budget at arrival, after the spans: drawn on the hop's line and given as
/// `budget_ms` in the JSON; spans without one have no such key.
#[test]
fn budgets_at_arrival_are_drawn_and_in_the_json() {
    let header = "gateway@0-40=200,.call:orders@1-39=200,..attempt@1-39=200,\
                  ...orders@1-38=200,^0=1000,^3=949,+1";
    let out = bin().args(["trace", header]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("gateway  0–40 ms (40 ms)  200  budget 1000 ms\n"),
        "{text}"
    );
    assert!(
        text.contains("└─ orders  1–38 ms (37 ms)  200  budget 949 ms\n"),
        "{text}"
    );

    let out = bin().args(["trace", "--json", header]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = &json["spans"][0];
    assert_eq!(root["budget_ms"], 1000);
    let call = &root["children"][0];
    assert!(call.get("budget_ms").is_none(), "{call}");
    assert_eq!(call["children"][0]["children"][0]["budget_ms"], 949);
    assert_eq!(json["dropped"], 1);
}
