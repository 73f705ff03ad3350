use std::time::Duration;

use proptest::prelude::*;

use super::{MAX_LEN, value};

/// One metric of a parsed `Server-Timing` value: its name and its parameters.
#[derive(Debug, PartialEq)]
struct Metric {
    name: String,
    params: Vec<(String, String)>,
}

impl Metric {
    fn dur(&self) -> Option<f64> {
        self.params
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("dur"))
            .map(|(_, v)| v.parse().expect("dur is a number"))
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A strict parser of the W3C grammar (section 3 of Server Timing, with RFC 9110's `token`,
/// `quoted-string`, `OWS` and list syntax): any byte it does not expect is an error, so a value
/// that parses is valid.
struct Parser<'a> {
    input: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    fn ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn token(&mut self) -> Result<String, String> {
        let start = self.at;
        while self.peek().is_some_and(is_tchar) {
            self.at += 1;
        }
        if self.at == start {
            return Err(format!("a token expected at byte {start}"));
        }
        Ok(String::from_utf8_lossy(&self.input[start..self.at]).into_owned())
    }

    fn quoted(&mut self) -> Result<String, String> {
        self.at += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated quoted-string".into()),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let escaped = self.peek().ok_or("dangling escape")?;
                    out.push(char::from(escaped));
                    self.at += 1;
                }
                Some(b) => {
                    out.push(char::from(b));
                    self.at += 1;
                }
            }
        }
    }

    fn metric(&mut self) -> Result<Metric, String> {
        let name = self.token()?;
        let mut params = Vec::new();
        loop {
            let before = self.at;
            self.ows();
            if self.peek() != Some(b';') {
                self.at = before;
                return Ok(Metric { name, params });
            }
            self.at += 1;
            self.ows();
            let param = self.token()?;
            self.ows();
            if self.peek() != Some(b'=') {
                return Err(format!("`=` expected at byte {}", self.at));
            }
            self.at += 1;
            self.ows();
            let value = if self.peek() == Some(b'"') {
                self.quoted()?
            } else {
                self.token()?
            };
            params.push((param, value));
        }
    }

    fn list(mut self) -> Result<Vec<Metric>, String> {
        let mut metrics = vec![self.metric()?];
        loop {
            self.ows();
            match self.peek() {
                None => return Ok(metrics),
                Some(b',') => {
                    self.at += 1;
                    self.ows();
                    metrics.push(self.metric()?);
                }
                Some(b) => {
                    return Err(format!(
                        "unexpected {:?} at byte {}",
                        char::from(b),
                        self.at
                    ));
                }
            }
        }
    }
}

fn parse(value: &[u8]) -> Result<Vec<Metric>, String> {
    Parser {
        input: value,
        at: 0,
    }
    .list()
}

fn names(metrics: &[Metric]) -> Vec<&str> {
    metrics.iter().map(|m| m.name.as_str()).collect()
}

#[test]
fn the_parser_rejects_what_the_grammar_does_not_allow() {
    for bad in [
        &b""[..],
        b"queue;dur",
        b"queue;=1",
        b"queue dur=1",
        b"queue;dur=1,",
        b"queue;dur=1;",
        b"(queue);dur=1",
        b"queue;dur=\"1",
    ] {
        assert!(
            parse(bad).is_err(),
            "{:?} parsed",
            String::from_utf8_lossy(bad)
        );
    }
    let ok = parse(b"db ; dur = 5 ;desc=\"a \\\"b\\\"\", cache").unwrap();
    assert_eq!(names(&ok), ["db", "cache"]);
    assert_eq!(ok[0].params[1], ("desc".into(), "a \"b\"".into()));
}

#[test]
fn a_request_with_a_budget_gets_three_metrics() {
    let v = value(
        Duration::from_micros(4),
        Duration::from_micros(41_250),
        Some(200),
    );
    assert_eq!(v, "queue;dur=0.004, work;dur=41.250, budget;dur=200");
    let metrics = parse(v.as_bytes()).unwrap();
    assert_eq!(names(&metrics), ["queue", "work", "budget"]);
    assert_eq!(metrics[1].dur(), Some(41.25));
    assert_eq!(metrics[2].dur(), Some(200.0));
}

#[test]
fn no_budget_means_no_budget_metric() {
    let v = value(Duration::ZERO, Duration::from_millis(3), None);
    assert_eq!(v, "queue;dur=0.000, work;dur=3.000");
    assert_eq!(names(&parse(v.as_bytes()).unwrap()), ["queue", "work"]);
}

#[test]
fn a_spent_budget_is_zero_not_absent() {
    let v = value(Duration::ZERO, Duration::ZERO, Some(0));
    assert_eq!(v, "queue;dur=0.000, work;dur=0.000, budget;dur=0");
}

#[test]
fn the_largest_values_fit() {
    let v = value(Duration::MAX, Duration::MAX, Some(u64::MAX));
    assert!(v.len() <= MAX_LEN);
    let metrics = parse(v.as_bytes()).unwrap();
    assert_eq!(names(&metrics), ["queue", "work", "budget"]);
    assert_eq!(
        v,
        "queue;dur=18446744073709551.615, work;dur=18446744073709551.615, \
         budget;dur=18446744073709551615"
    );
}

proptest! {
    #[test]
    fn every_value_parses_back_to_what_was_written(
        queue_us in any::<u64>(),
        work_us in 0u64..10_000_000_000,
        budget in proptest::option::of(any::<u64>()),
    ) {
        let v = value(Duration::from_micros(queue_us), Duration::from_micros(work_us), budget);
        let metrics = parse(v.as_bytes()).map_err(TestCaseError::fail)?;
        let expected = if budget.is_some() { 3 } else { 2 };
        prop_assert_eq!(metrics.len(), expected);
        // The text is exact: whole ms, a dot, three digits of microseconds.
        let text = |m: &Metric| m.params[0].1.clone();
        prop_assert_eq!(text(&metrics[0]), format!("{}.{:03}", queue_us / 1000, queue_us % 1000));
        prop_assert_eq!(text(&metrics[1]), format!("{}.{:03}", work_us / 1000, work_us % 1000));
        let work_ms = metrics[1].dur().unwrap();
        prop_assert!((work_ms - work_us as f64 / 1000.0).abs() < 1e-3);
        if let Some(budget) = budget {
            prop_assert_eq!(text(&metrics[2]), budget.to_string());
        }
    }
}
