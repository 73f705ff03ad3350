//! A private RabbitMQ node for a test that stops and restarts its broker: its own node name,
//! ports, data directory and cookie, so the shared broker the other tests use is never touched.
//!
//! The node is `rabbitmq-server` (the script, run as this user, not the packaged wrapper that
//! switches to the `rabbitmq` user) as a child in a process group of its own; stopping sends
//! that group SIGTERM (a clean broker shutdown, as `systemctl stop` does), and dropping the
//! node kills the group and removes its directory. The shared `epmd` is used, not stopped.
//! `DEADLINE_TEST_RABBITMQ_SERVER` names another script. A missing script fails the test.
//!
//! The `deadline` command's tests include this file too (`deadline jobs` across a restart).

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;

const SCRIPT: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A RabbitMQ node of the test's own, running or stopped.
pub(crate) struct Node {
    dir: PathBuf,
    name: String,
    port: u16,
    dist_port: u16,
    child: Option<Child>,
}

/// A port below the kernel's ephemeral range that no one listens on now.
///
/// Not a port from binding port 0: those come from the ephemeral range, where every outgoing
/// connection of the tests running beside this one takes its local port too, so a probed port
/// can be taken again before the broker binds it (seen: the broker's distribution port held by
/// another test's client socket, and the node refusing to boot). Below the range only a
/// listener can take it, and the node retries with new ports if one does.
fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FLOOR: u32 = 10_000;
    let ceiling = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| *low > FLOOR + 1_000)
        .unwrap_or(32_768);
    let span = ceiling - FLOOR;
    // Spread the processes and the nodes of one process apart, so two probing at once rarely
    // pick the same port.
    let seed = std::process::id()
        .wrapping_mul(7_919)
        .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(104_729));
    (0..span)
        .map(|step| FLOOR + seed.wrapping_add(step) % span)
        .find(|port| TcpListener::bind(("127.0.0.1", *port as u16)).is_ok())
        .expect("a free port below the ephemeral range") as u16
}

/// How many times a node that could not bind its ports is booted again on new ones.
const BOOT_ATTEMPTS: u32 = 3;

impl Node {
    /// Starts a fresh node and waits until it accepts AMQP connections.
    pub(crate) async fn start() -> Node {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(format!("deadline-lapin-node-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(dir.join(sub)).expect("the node's directory");
        }
        let cookie = dir.join("home/.erlang.cookie");
        std::fs::write(&cookie, format!("deadlinetest{id}")).expect("a cookie");
        std::fs::set_permissions(&cookie, std::os::unix::fs::PermissionsExt::from_mode(0o400))
            .expect("the cookie private");
        std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("no plugins");
        let mut node = Node {
            dir,
            name: format!("deadline-test-{id}@localhost"),
            port: free_port(),
            dist_port: free_port(),
            child: None,
        };
        node.boot(true).await;
        node
    }

    /// The broker's URL (guest may log in from loopback).
    pub(crate) fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Starts the stopped node on the same ports and data (durable queues and persistent
    /// messages come back), and waits until it accepts AMQP connections.
    pub(crate) async fn start_again(&mut self) {
        self.boot(false).await;
    }

    /// Boots the node; a boot that fails because a port was taken is tried again on a new
    /// distribution port, and on a new AMQP port too where `may_move` (the first start: no
    /// client knows the URL yet).
    async fn boot(&mut self, may_move: bool) {
        for attempt in 1..=BOOT_ATTEMPTS {
            match self.boot_once().await {
                Ok(()) => return,
                Err(output) if attempt < BOOT_ATTEMPTS && port_taken(&output) => {
                    self.dist_port = free_port();
                    if may_move {
                        self.port = free_port();
                    }
                }
                Err(output) => panic!(
                    "the private RabbitMQ node exited before it listened; its output:\n{output}"
                ),
            }
        }
    }

    /// Boots the node once and waits until it accepts AMQP connections; `Err` carries the
    /// output of a node that exited first.
    async fn boot_once(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the node is running");
        let script = std::env::var("DEADLINE_TEST_RABBITMQ_SERVER").unwrap_or(SCRIPT.to_owned());
        assert!(
            std::path::Path::new(&script).exists(),
            "{script} is missing: the restart test runs a private RabbitMQ node and needs the \
             rabbitmq-server package (or DEADLINE_TEST_RABBITMQ_SERVER naming its script)"
        );
        let earlier = self.output().len();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("out.log"))
            .expect("the node's output file");
        let dir = &self.dir;
        let child = Command::new(&script)
            .current_dir(dir)
            .env("HOME", dir.join("home"))
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_PID_FILE", dir.join("pid"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("the output file"))
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run {script}: {err}"));
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                let output = self.output();
                return Err(format!(
                    "({status})\n{}",
                    output.get(earlier..).unwrap_or(&output)
                ));
            }
            assert!(
                Instant::now().saturating_duration_since(started) < Duration::from_secs(90),
                "the private RabbitMQ node did not listen within 90 s; its output:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the node cleanly (SIGTERM to its process group) and waits until it has exited.
    pub(crate) async fn stop(&mut self) {
        let mut child = self.child.take().expect("the node is running");
        signal(child.id(), "TERM");
        let started = Instant::now();
        while child.try_wait().expect("the node's status").is_none() {
            if Instant::now().saturating_duration_since(started) > Duration::from_secs(60) {
                signal(child.id(), "KILL");
                let _ = child.wait();
                panic!("the private RabbitMQ node did not stop within 60 s after SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The script has exited once the VM has; nothing of the group may linger.
        signal(child.id(), "KILL");
    }

    /// Kills the node (SIGKILL to its process group: a crash, nothing flushed) and waits
    /// until it has exited.
    pub(crate) async fn kill(&mut self) {
        let mut child = self.child.take().expect("the node is running");
        signal(child.id(), "KILL");
        while child.try_wait().expect("the node's status").is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Raises (`true`) or clears (`false`) the node's memory alarm: a memory high watermark
    /// of 0 sets the alarm at once, and the broker blocks every publishing connection until it
    /// clears; 0.4 is RabbitMQ's default.
    pub(crate) fn memory_alarm(&self, on: bool) {
        let ctl = std::path::Path::new(SCRIPT).with_file_name("rabbitmqctl");
        let watermark = if on { "0" } else { "0.4" };
        let out = Command::new(&ctl)
            .env("HOME", self.dir.join("home"))
            .args(["-n", &self.name, "set_vm_memory_high_watermark", watermark])
            .output()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", ctl.display()));
        assert!(
            out.status.success(),
            "{} set_vm_memory_high_watermark {watermark} failed: {}{}",
            ctl.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("out.log")).unwrap_or_default()
    }
}

/// Whether a node's boot output says one of its ports was taken.
fn port_taken(output: &str) -> bool {
    ["could not bind", "dist_port_already_used", "eaddrinuse"]
        .iter()
        .any(|sign| output.contains(sign))
}

/// Sends `sig` to the process group `group` (the node's, led by its script).
fn signal(group: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), "--".to_owned(), format!("-{group}")])
        .stderr(Stdio::null())
        .status();
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "KILL");
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
