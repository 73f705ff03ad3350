//! Real proxies in front of `deadline service`: nginx and HAProxy from Debian's packages
//! (`scripts/install-proxies.sh` installs them; a missing one fails these tests). The budget
//! header passes both unchanged, and their `X-Request-Start` stamp is read by a trusting
//! service. `deadline demo --proxy nginx|haproxy --check` runs in CI on its own, not here: its
//! check allows 50 ms of work after the proxy's hang-up, a bound for a machine not also running
//! the rest of this suite.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::{Service, get};

/// A proxy the test started, killed when dropped.
struct Proxy {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn program(name: &str) -> PathBuf {
    let path = ["/usr/sbin", "/usr/local/sbin", "/usr/bin"]
        .iter()
        .map(|dir| PathBuf::from(dir).join(name))
        .find(|path| path.is_file());
    path.unwrap_or_else(|| {
        panic!("{name} is not installed: scripts/install-proxies.sh installs it (apt-get)")
    })
}

/// `name` (`nginx` or `haproxy`) on a free loopback port in front of `upstream`, stamping
/// `X-Request-Start` as its users configure it.
fn proxy(name: &str, upstream: &str) -> Proxy {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = std::env::temp_dir().join(format!("deadline-proxy-test-{name}-{port}"));
    std::fs::create_dir_all(&dir).expect("the proxy's directory");
    let config = dir.join(format!("{name}.conf"));
    let d = dir.display();
    let text = match name {
        "nginx" => format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{}}\n\
             http {{ access_log off; client_body_temp_path {d}/b; proxy_temp_path {d}/p;\n\
             fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;\n\
             server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://{upstream};\n\
             proxy_set_header X-Request-Start \"t=${{msec}}\"; }} }} }}\n"
        ),
        _ => format!(
            "defaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n\
             frontend f\n  bind 127.0.0.1:{port}\n  http-request set-header X-Request-Start t=%Ts.%ms\n  default_backend b\n\
             backend b\n  server s {upstream}\n"
        ),
    };
    std::fs::write(&config, text).expect("the proxy's configuration");
    let mut command = Command::new(program(name));
    if name == "nginx" {
        command
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-p")
            .arg(&dir)
            .arg("-c");
    } else {
        command.arg("-db").arg("-f");
    }
    let child = command
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
    let addr = format!("127.0.0.1:{port}");
    let mut proxy = Proxy { child, addr, dir };
    for _ in 0..200 {
        if TcpStream::connect(&proxy.addr).is_ok() {
            return proxy;
        }
        if let Ok(Some(status)) = proxy.child.try_wait() {
            panic!("{name} exited ({status}) before it listened");
        }
        #[allow(clippy::disallowed_methods)] // polls a real process, no runtime here
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{name} did not listen within 10 s");
}

/// The budget the service's hold log recorded for the request with `id`, waiting (up to 5 s)
/// for its line.
fn logged_budget(log: &std::path::Path, id: &str) -> Option<u64> {
    for _ in 0..100 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // A line still being written is read again on the next round.
        for hold in text
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        {
            if hold["request_id"] == id {
                return hold["budget_ms"].as_u64();
            }
        }
        #[allow(clippy::disallowed_methods)] // polls a real file, no runtime here
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no hold for {id} in {}", log.display());
}

#[test]
fn the_budget_header_passes_nginx_and_haproxy_unchanged_and_their_stamp_is_read() {
    for name in ["nginx", "haproxy"] {
        let dir =
            std::env::temp_dir().join(format!("deadline-proxy-log-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain_log = dir.join("plain.jsonl");
        let trusting_log = dir.join("trusting.jsonl");
        let plain = Service::start(&[
            "--name",
            "gateway",
            "--work",
            "5",
            "--log",
            plain_log.to_str().unwrap(),
        ]);
        let trusting = Service::start(&[
            "--name",
            "gateway",
            "--work",
            "5",
            "--trust-request-start",
            "--log",
            trusting_log.to_str().unwrap(),
        ]);
        let front = proxy(name, &plain.addr);
        let reply = get(
            &front.addr,
            b"Deadline-Budget-Ms: 1500\r\nX-Request-Id: through-1\r\n",
        );
        assert_eq!(reply.status, 200, "{name}: {reply:?}");
        assert_eq!(logged_budget(&plain_log, "through-1"), Some(1500), "{name}");
        drop(front);
        let front = proxy(name, &trusting.addr);
        let reply = get(
            &front.addr,
            b"Deadline-Budget-Ms: 1500\r\nX-Request-Id: through-2\r\n",
        );
        assert_eq!(reply.status, 200, "{name}: {reply:?}");
        // The proxy's stamp was read and accepted: the budget is what was sent less the time
        // the request spent in the proxy (milliseconds on loopback, bounded by the call's own).
        let budget = logged_budget(&trusting_log, "through-2").expect("a budget");
        let spent = reply.elapsed.as_millis() as u64 + 1;
        assert!(
            (1500 - spent..1500).contains(&budget) || budget == 1500,
            "{name}: budget {budget} after {spent} ms"
        );
        let runtime = runtime(&trusting.addr);
        assert_eq!(runtime["ignored_request_starts"], 0, "{name}: {runtime}");
        drop(front);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn runtime(addr: &str) -> serde_json::Value {
    use std::io::Read as _;
    let mut stream = TcpStream::connect(addr).expect("connects");
    write!(
        stream,
        "GET /debug/runtime HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("reads");
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"))
}
