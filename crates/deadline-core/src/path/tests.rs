use std::time::Duration;

use super::service::{PgSetting, ServiceLimits, postgres_hop};
use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn no_includes(pattern: &str, _from: &str) -> Result<nginx::Loaded, String> {
    Err(format!("no file {pattern}"))
}

fn nginx(text: &str) -> Result<Hop, ParseError> {
    nginx::parse("nginx.conf", text, &mut no_includes)
}

fn timer<'a>(hop: &'a Hop, name: &str) -> &'a Timer {
    hop.timers
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name} in {hop:#?}"))
}

fn line(file: &str, line: u32) -> Origin {
    Origin::Line {
        file: file.into(),
        line,
    }
}

#[test]
fn nginx_times() {
    for (text, want) in [
        ("1", Some(ms(1_000))),
        ("1000ms", Some(ms(1_000))),
        ("2s", Some(ms(2_000))),
        ("1m30s", Some(ms(90_000))),
        ("1h", Some(ms(3_600_000))),
        ("1d", Some(ms(86_400_000))),
        ("0", Some(ms(0))),
        ("", None),
        ("s", None),
        ("1x", None),
        ("-1", None),
        ("1.5s", None),
        ("99999999999999", None),
    ] {
        assert_eq!(nginx::parse_time(text), want, "{text:?}");
    }
}

#[test]
fn haproxy_times() {
    for (text, want) in [
        ("1000", Some(ms(1_000))),
        ("500us", Some(Duration::from_micros(500))),
        ("30s", Some(ms(30_000))),
        ("2m", Some(ms(120_000))),
        ("1h", Some(ms(3_600_000))),
        ("1d", Some(ms(86_400_000))),
        ("1m30s", None),
        ("5x", None),
        ("", None),
    ] {
        assert_eq!(haproxy::parse_time(text), want, "{text:?}");
    }
}

#[test]
fn pg_times() {
    for (text, want) in [
        ("5000", Some(ms(5_000))),
        ("5s", Some(ms(5_000))),
        ("'2min'", Some(ms(120_000))),
        ("100ms", Some(ms(100))),
        ("1h", Some(ms(3_600_000))),
        ("abc", None),
    ] {
        assert_eq!(service::parse_pg_time(text), want, "{text:?}");
    }
}

const DEMO_NGINX: &str = "\
server {
    listen 127.0.0.1:8080;
    location / {
        proxy_pass http://127.0.0.1:9000;
        proxy_read_timeout 1000ms;
        proxy_set_header X-Request-Start \"t=${msec}\";
    }
}
";

#[test]
fn nginx_reads_a_demo_server_block_with_defaults_where_unset() {
    let hop = nginx(DEMO_NGINX).unwrap();
    let read = timer(&hop, "proxy_read_timeout");
    assert_eq!(read.limit, Limit::After(ms(1_000)));
    assert_eq!(read.origin, line("nginx.conf", 5));
    assert_eq!(read.role, Role::Waits);
    assert_eq!(read.kind, Kind::Inactivity);
    assert_eq!(read.scope, "server 127.0.0.1:8080 location /");
    let connect = timer(&hop, "proxy_connect_timeout");
    assert_eq!(connect.limit, Limit::After(ms(60_000)));
    assert_eq!(
        connect.origin,
        Origin::Default {
            file: "nginx.conf".into(),
            line: 4
        }
    );
    assert_eq!(
        timer(&hop, "keepalive_timeout").limit,
        Limit::After(ms(75_000))
    );
    // One literal peer: nothing to retry on.
    assert!(hop.retries.is_empty());
}

#[test]
fn nginx_inherits_from_http_and_server_wherever_written() {
    let text = "\
http {
    upstream app { server 10.0.0.1:80; server 10.0.0.2:80; keepalive 8; keepalive_timeout 30s; }
    server {
        location /a { proxy_pass http://app; }
        proxy_read_timeout 5s;
        listen 80;
        location /b { proxy_pass http://app/; proxy_read_timeout 2s; proxy_next_upstream_timeout 3s; }
    }
    proxy_connect_timeout 2s;
    proxy_next_upstream error timeout http_502;
}
";
    let hop = nginx(text).unwrap();
    let reads: Vec<_> = hop
        .timers
        .iter()
        .filter(|t| t.name == "proxy_read_timeout")
        .map(|t| (t.scope.as_str(), t.limit, t.origin.clone()))
        .collect();
    assert_eq!(
        reads,
        [
            (
                "server 80 location /a",
                Limit::After(ms(5_000)),
                line("nginx.conf", 5)
            ),
            (
                "server 80 location /b",
                Limit::After(ms(2_000)),
                line("nginx.conf", 7)
            ),
        ]
    );
    assert!(
        hop.timers
            .iter()
            .filter(|t| t.name == "proxy_connect_timeout")
            .all(|t| t.limit == Limit::After(ms(2_000)) && t.origin == line("nginx.conf", 9))
    );
    let pooled = timer(&hop, "keepalive_timeout (upstream)");
    assert_eq!(
        (pooled.limit, pooled.role),
        (Limit::After(ms(30_000)), Role::Callee)
    );
    // Two peers: /a retries on timeout with no cap, /b has a cap.
    let caps: Vec<_> = hop
        .retries
        .iter()
        .map(|r| (r.scope.as_str(), r.cap))
        .collect();
    assert_eq!(
        caps,
        [
            ("server 80 location /a", Limit::Unlimited),
            ("server 80 location /b", Limit::After(ms(3_000))),
        ]
    );
    assert_eq!(hop.retries[0].origin, line("nginx.conf", 10));
}

#[test]
fn nginx_syntax_errors_name_the_line() {
    for (text, want) in [
        (
            "server {\n listen 80;\n",
            "nginx.conf:1: the `{` of \"server\" is never closed",
        ),
        (
            "server { listen 80; }\n}\n",
            "nginx.conf:2: a `}` closes no block",
        ),
        (
            "server {\n listen 80\n}\n",
            "nginx.conf:2: directive \"listen\" has no ending `;` before `}`",
        ),
        (
            "proxy_read_timeout 1s",
            "nginx.conf:1: directive \"proxy_read_timeout\" has no ending `;` (the file ends first)",
        ),
        ("x \"abc;\n\n", "nginx.conf:1: a \" quote is never closed"),
        (
            "server {\n proxy_read_timeout soon;\n}",
            "nginx.conf:2: invalid time \"soon\" in proxy_read_timeout",
        ),
        (
            "server {\n location / { proxy_pass; }\n}",
            "nginx.conf:2: proxy_pass takes one URL",
        ),
        (
            "include a.conf;",
            "nginx.conf:1: include a.conf: no file a.conf",
        ),
        (";", "nginx.conf:1: a `;` with no directive before it"),
    ] {
        assert_eq!(nginx(text).unwrap_err().to_string(), want, "{text:?}");
    }
}

#[test]
fn nginx_unknown_directives_are_skipped() {
    let hop = nginx("http { frobnicate on; server { listen 80; zork { a b; } location / { proxy_pass http://127.0.0.1:1; proxy_buffering off; } } }").unwrap();
    assert_eq!(
        timer(&hop, "proxy_read_timeout").limit,
        Limit::After(ms(60_000))
    );
}

#[test]
fn nginx_follows_includes_through_the_loader_and_names_their_files() {
    let mut load = |pattern: &str, from: &str| -> Result<nginx::Loaded, String> {
        assert_eq!(from, "main.conf");
        match pattern {
            "conf.d/*.conf" => Ok(vec![(
                "conf.d/app.conf".into(),
                "server {\n  listen 81;\n  location / {\n    proxy_pass http://127.0.0.1:2;\n    proxy_read_timeout 3s;\n  }\n}\n".into(),
            )]),
            other => Err(format!("cannot read {other}")),
        }
    };
    let hop = nginx::parse(
        "main.conf",
        "http {\n  include conf.d/*.conf;\n}\n",
        &mut load,
    )
    .unwrap();
    assert_eq!(
        timer(&hop, "proxy_read_timeout").origin,
        line("conf.d/app.conf", 5)
    );
    // A file that includes itself stops at the depth limit with an error, not a stack overflow.
    let mut itself = |_: &str, _: &str| {
        Ok(vec![(
            "loop.conf".to_owned(),
            "include loop.conf;".to_owned(),
        )])
    };
    let err = nginx::parse("loop.conf", "include loop.conf;", &mut itself).unwrap_err();
    assert!(err.message.contains("nest more than 16 deep"), "{err}");
}

#[test]
fn nginx_dump_output_is_split_into_its_files_and_keeps_its_own_lines() {
    let dump = "\
nginx: the configuration file /etc/nginx/nginx.conf syntax is ok
# configuration file /etc/nginx/nginx.conf:
http {
    include /etc/nginx/conf.d/*.conf;
}

# configuration file /etc/nginx/conf.d/app.conf:
server {
    listen 80;
    location / { proxy_pass http://127.0.0.1:9; proxy_read_timeout 7s; }
}
";
    let hop = nginx::parse("dump.txt", dump, &mut no_includes).unwrap();
    let read = timer(&hop, "proxy_read_timeout");
    assert_eq!(read.limit, Limit::After(ms(7_000)));
    assert_eq!(read.origin, line("dump.txt", 10));
    let missing = dump.replace("conf.d/*.conf", "missing.conf");
    let err = nginx::parse("dump.txt", &missing, &mut no_includes).unwrap_err();
    assert_eq!(err.line, 4);
    assert!(err.message.contains("not among the files"), "{err}");
}

const DEMO_HAPROXY: &str = "\
global
    maxconn 100

defaults
    mode http
    timeout connect 500ms
    timeout client 30s

frontend front
    bind 127.0.0.1:8081
    default_backend app

backend app
    retry-on conn-failure response-timeout
    server s1 127.0.0.1:9000
";

#[test]
fn haproxy_reads_sections_with_their_defaults() {
    let hop = haproxy::parse("haproxy.cfg", DEMO_HAPROXY).unwrap();
    let server = timer(&hop, "timeout server");
    assert_eq!(server.limit, Limit::Unlimited);
    assert_eq!(
        server.origin,
        Origin::Default {
            file: "haproxy.cfg".into(),
            line: 13
        }
    );
    assert_eq!(server.scope, "backend app");
    let connect = timer(&hop, "timeout connect");
    assert_eq!(
        (connect.limit, connect.origin.clone()),
        (Limit::After(ms(500)), line("haproxy.cfg", 6))
    );
    // The queue timeout defaults to the connect timeout, keep-alive to the client timeout.
    assert_eq!(timer(&hop, "timeout queue").limit, Limit::After(ms(500)));
    assert_eq!(
        timer(&hop, "timeout http-keep-alive").limit,
        Limit::After(ms(30_000))
    );
    assert_eq!(hop.retries.len(), 1);
    assert_eq!(hop.retries[0].origin, line("haproxy.cfg", 14));
}

#[test]
fn haproxy_named_defaults_and_errors() {
    let text = "defaults base\n  timeout server 5s\ndefaults other\n  timeout server 9s\nbackend b from base\n  server x 1.2.3.4:5\n";
    let hop = haproxy::parse("h.cfg", text).unwrap();
    assert_eq!(timer(&hop, "timeout server").limit, Limit::After(ms(5_000)));
    for (text, want) in [
        (
            "backend b\n  timeout server soon\n",
            "h.cfg:2: invalid time \"soon\" in timeout server",
        ),
        (
            "backend b\n  server x \"1.2.3.4\n",
            "h.cfg:2: a \" quote is never closed",
        ),
        (
            "  timeout server 1s\n",
            "h.cfg:1: \"timeout\" is outside any section (global, defaults, frontend, backend, listen)",
        ),
        (
            "backend b from nowhere\n",
            "h.cfg:1: no defaults section named \"nowhere\" before this",
        ),
        (
            "backend b\n  timeout server\n",
            "h.cfg:2: timeout needs a name and a time",
        ),
    ] {
        assert_eq!(
            haproxy::parse("h.cfg", text).unwrap_err().to_string(),
            want,
            "{text:?}"
        );
    }
    // Unknown keywords are skipped; comments are dropped.
    let hop = haproxy::parse(
        "h.cfg",
        "backend b # c\n  frob x y\n  timeout server 2s # two\n",
    )
    .unwrap();
    assert_eq!(timer(&hop, "timeout server").limit, Limit::After(ms(2_000)));
}

fn service(front: Option<u64>, propagate: bool) -> ServiceLimits {
    ServiceLimits {
        name: "a".into(),
        default_budget_ms: None,
        max_budget_ms: 60_000,
        reply_reserve_ms: 10,
        slots: None,
        max_queue: None,
        max_queue_wait_ms: None,
        front_timeout_ms: front,
        front_margin_ms: front.map(|_| 50),
        idle_timeout_ms: 60_000,
        keep_alive_interval_ms: 20_000,
        keep_alive_timeout_ms: 20_000,
        header_timeout_ms: 30_000,
        send_timeout_ms: 30_000,
        max_body_bytes: 1 << 20,
        max_connections: 1024,
        downstream: Some(service::DownstreamLimits {
            url: "http://127.0.0.1:2/".into(),
            attempt_timeout_ms: 1_000,
            attempts: 1,
            margin_ms: 50,
            connect_timeout_ms: 1_000,
            propagate,
            pool_idle_timeout_ms: 2_000,
            retry_budget: None,
        }),
        database: None,
    }
}

fn rules(hops: &[Hop]) -> Vec<(Rule, String)> {
    check(hops, ms(50))
        .violations
        .into_iter()
        .map(|v| (v.rule, v.inner.name))
        .collect()
}

#[test]
fn the_rules_on_small_paths() {
    let nginx_1s = nginx(DEMO_NGINX).unwrap();
    let unset = service(None, true).hop("http://a");
    let aligned = service(Some(1_000), true).hop("http://a");
    let long = service(Some(5_000), true).hop("http://a");
    let inner = service(None, false).hop("http://b");
    type Case = (&'static str, Vec<Hop>, Vec<(Rule, &'static str)>);
    let cases: Vec<Case> = vec![
        (
            "nginx 1 s in front of a service without a front timeout",
            vec![nginx_1s.clone(), unset.clone()],
            vec![(
                Rule::InnerOutlastsOuter,
                "front_timeout_ms less front_margin_ms",
            )],
        ),
        (
            "the same with a longer front timeout",
            vec![nginx_1s.clone(), long.clone()],
            vec![(
                Rule::InnerOutlastsOuter,
                "front_timeout_ms less front_margin_ms",
            )],
        ),
        (
            "aligned: the front timeout is nginx's",
            vec![nginx_1s.clone(), aligned.clone()],
            vec![],
        ),
        (
            "a service behind one that propagates is bounded by its budget",
            vec![nginx_1s.clone(), aligned.clone(), inner.clone()],
            vec![],
        ),
        (
            "a budget shorter than nginx's read timeout",
            vec![Hop::budget(ms(500)), nginx_1s.clone()],
            vec![(Rule::InnerOutlastsOuter, "proxy_read_timeout")],
        ),
        (
            "a balancer keeping idle connections longer than nginx",
            vec![Hop::balancer(ms(80_000)), nginx_1s.clone()],
            vec![(Rule::KeepAliveReversed, "keepalive_timeout")],
        ),
        (
            "a balancer idle shorter than nginx's keep-alive",
            vec![Hop::balancer(ms(60_000)), nginx_1s.clone()],
            vec![],
        ),
    ];
    for (what, hops, want) in cases {
        let got = rules(&hops);
        let want: Vec<(Rule, String)> = want.into_iter().map(|(r, n)| (r, n.to_owned())).collect();
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn the_single_hop_rules() {
    let haproxy = haproxy::parse("haproxy.cfg", DEMO_HAPROXY).unwrap();
    assert_eq!(
        rules(&[haproxy]),
        [
            (
                Rule::RetryWithoutCap,
                "retry-on conn-failure response-timeout".to_owned()
            ),
            (Rule::ServerTimeoutUnset, "timeout server".to_owned()),
            (Rule::AttemptBelowRto, "timeout connect".to_owned()),
        ]
    );
    let mut fast = service(Some(1_000), true);
    fast.downstream.as_mut().unwrap().attempt_timeout_ms = 300;
    fast.database = Some(service::DatabaseLimits {
        pool_size: 4,
        pool_wait_ms: 0,
        statement_limit_ms: 0,
    });
    assert_eq!(
        rules(&[fast.hop("http://a")]),
        [
            (
                Rule::AttemptBelowRto,
                "downstream.attempt_timeout_ms".to_owned()
            ),
            (Rule::PoolWaitUnset, "database.pool_wait_ms".to_owned()),
        ]
    );
}

#[test]
fn the_database_rule() {
    let setting = |name: &str, millis, scope: &str| PgSetting {
        name: name.into(),
        millis,
        source: "default".into(),
        scope: scope.into(),
    };
    let pg = postgres_hop(
        "postgres://u@h/db",
        &[
            setting("statement_timeout", 0, ""),
            setting("statement_timeout", 800, "role app"),
            setting("statement_timeout", 5_000, "database db"),
            setting("lock_timeout", 0, ""),
        ],
    );
    let front = service(Some(1_000), true).hop("http://a");
    let got: Vec<_> = check(&[front, pg.clone()], ms(50))
        .violations
        .into_iter()
        .map(|v| (v.rule, v.inner.scope, v.outer.map(|o| o.hop)))
        .collect();
    let outer = Some("service a".to_owned());
    assert_eq!(
        got,
        [
            (Rule::StatementLimit, String::new(), outer.clone()),
            (Rule::StatementLimit, "database db".into(), outer),
        ]
    );
    // Alone, only the unset limit is a fault.
    assert_eq!(check(&[pg], ms(50)).violations.len(), 1);
}

#[test]
fn the_effective_limit_is_the_shortest_and_names_its_owner() {
    let report = check(
        &[
            Hop::budget(ms(2_000)),
            nginx(DEMO_NGINX).unwrap(),
            service(Some(900), true).hop("u"),
        ],
        ms(50),
    );
    let effective = report.effective.unwrap();
    assert_eq!(
        (effective.hop.as_str(), effective.limit),
        ("service a", Limit::After(ms(850)))
    );
}

#[test]
fn includes_that_multiply_stop_at_the_file_cap() {
    // Each level includes the next twice: 2^13 files, no cycle, never 16 deep.
    let mut dump = String::new();
    for level in 0..13 {
        dump.push_str(&format!(
            "# configuration file /etc/nginx/l{level}.conf:\ninclude /etc/nginx/l{next}.conf;\ninclude /etc/nginx/l{next}.conf;\n",
            next = level + 1
        ));
    }
    dump.push_str("# configuration file /etc/nginx/l13.conf:\n\n");
    let err = nginx::parse("dump.txt", &dump, &mut no_includes).unwrap_err();
    assert!(err.message.contains("more than 4096 files"), "{err}");
}

/// Found by the `nginx_config` fuzz target: a word ending in an escaped newline at the end of
/// `nginx -T` output was named by a line past the output's last (the reader added a newline to
/// the last line, and a word took the line it ended on).
#[test]
fn a_word_is_named_by_the_line_it_starts_on_within_the_input() {
    let dump = "# configuration file /etc/nginx/nginx.conf:\nhttp {}\n\\\\";
    let err = nginx::parse("dump.txt", dump, &mut no_includes).unwrap_err();
    assert_eq!(err.line, 3, "{err}");
    let err = nginx("server {}\nlisten \\\n80").unwrap_err();
    assert_eq!(err.line, 2, "{err}");
}
