//! Test support: start the `cairn` binary, read its banner, stop it with a signal.
//!
//! Invariant: a started process is always killed when its handle drops, so a failing test
//! never leaks a server.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a start may take before the test fails (the goal, measured by scripts/bench, is
/// well under 1 s; this bound only catches a hang on a loaded CI machine).
const START_BOUND: Duration = Duration::from_secs(20);

pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A port nothing listens on now, for a server configured with fixed addresses. Never one
/// this process was handed before: the kernel may give a just-released port to the next
/// `bind(0)`, and a configuration whose services share a port does not start.
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub(crate) fn kill(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

pub(crate) async fn run_to_end(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(START_BOUND, child.wait_with_output())
        .await
        .expect("cairn did not exit")
        .unwrap()
}

#[derive(Debug)]
pub(crate) struct Cairn {
    child: Child,
    pub(crate) urls: HashMap<String, String>,
    pub(crate) token: Option<String>,
    pub(crate) data_dir: PathBuf,
    /// The `export NAME='value'` lines `cairn dev` prints right after `ready`.
    pub(crate) env_lines: Vec<String>,
    /// Every line printed up to `ready`.
    #[allow(dead_code, reason = "read by the cluster tests only")]
    pub(crate) banner: Vec<String>,
    stderr: Option<tokio::task::JoinHandle<String>>,
}

impl Cairn {
    /// `cairn dev` with every service on port 0, plus `extra` flags.
    pub(crate) async fn dev(extra: &[&str]) -> Cairn {
        let mut args = vec![
            "dev",
            "--secrets-addr",
            "127.0.0.1:0",
            "--registry-addr",
            "127.0.0.1:0",
            "--scheduler-addr",
            "127.0.0.1:0",
            "--platform-addr",
            "127.0.0.1:0",
        ];
        args.extend_from_slice(extra);
        Cairn::start(&args).await
    }

    pub(crate) async fn start(args: &[&str]) -> Cairn {
        Cairn::start_with_env(args, &[]).await
    }

    pub(crate) async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Cairn {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Ports not given on the command line default to port 0 through the environment, so
        // parallel tests never collide on the upstream ports.
        for var in [
            "CAIRN_SECRETS_ADDR",
            "CAIRN_REGISTRY_ADDR",
            "CAIRN_SCHEDULER_ADDR",
            "CAIRN_PLATFORM_ADDR",
        ] {
            command.env(var, "127.0.0.1:0");
        }
        command
            .env_remove("CAIRN_DATA_DIR")
            .env_remove("CAIRN_ROOT_TOKEN")
            .env_remove("CAIRN_ACL")
            // Dev servers under test keep their per-user environment file out of $HOME.
            .env(
                "CAIRN_DEV_ENV_FILE",
                std::env::temp_dir().join(format!("cairn-tests-{}.env", std::process::id())),
            );
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let stderr_task = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut banner = Vec::new();
        let read = tokio::time::timeout(START_BOUND, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let done = line == "ready";
                banner.push(line);
                if done {
                    return true;
                }
            }
            false
        })
        .await;
        if read != Ok(true) {
            let _ = child.start_kill();
            let stderr = stderr_task.await.unwrap_or_default();
            panic!(
                "cairn did not get ready.\nstdout:\n{}\nstderr:\n{stderr}",
                banner.join("\n")
            );
        }
        // `cairn dev` prints its environment lines with the banner, in the same write.
        let mut env_lines = Vec::new();
        while let Ok(Ok(Some(line))) =
            tokio::time::timeout(Duration::from_millis(200), lines.next_line()).await
        {
            if !line.starts_with("export ") {
                break;
            }
            env_lines.push(line);
        }
        // Keep draining stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let mut urls = HashMap::new();
        let mut token = None;
        let mut data_dir = PathBuf::new();
        for line in &banner {
            let trimmed = line.trim_start();
            if let Some(rest) = trimmed.strip_prefix("root token") {
                token = Some(rest.trim().to_owned());
            } else if let Some(rest) = trimmed.strip_prefix("data dir") {
                data_dir = PathBuf::from(rest.trim().trim_end_matches(" (removed on exit)"));
            } else if let Some((name, url)) = trimmed.split_once(' ') {
                let url = url.trim();
                if url.starts_with("http") {
                    urls.insert(name.to_owned(), url.to_owned());
                }
            }
        }
        Cairn {
            child,
            urls,
            token,
            data_dir,
            env_lines,
            banner,
            stderr: Some(stderr_task),
        }
    }

    /// The rest of the banner line that starts (after indentation) with `name`.
    #[allow(dead_code, reason = "used by the cluster tests only")]
    pub(crate) fn banner_value(&self, name: &str) -> Option<String> {
        self.banner
            .iter()
            .find_map(|line| line.trim_start().strip_prefix(name))
            .map(|rest| rest.trim().to_owned())
    }

    pub(crate) fn url(&self, service: &str, path: &str) -> String {
        format!("{}{path}", self.urls[service])
    }

    /// `host:port` of a service.
    pub(crate) fn addr(&self, service: &str) -> String {
        self.urls[service].split("://").nth(1).unwrap().to_owned()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    pub(crate) async fn signal_and_wait(self, signal: &str) -> ExitStatus {
        kill(self.pid(), signal);
        self.wait().await
    }

    pub(crate) async fn wait(mut self) -> ExitStatus {
        let status = tokio::time::timeout(START_BOUND, self.child.wait())
            .await
            .expect("cairn did not exit")
            .unwrap();
        if !status.success()
            && let Some(stderr) = self.stderr.take()
        {
            eprintln!("cairn stderr:\n{}", stderr.await.unwrap_or_default());
        }
        status
    }

    /// SIGTERM, assert a clean exit, and return everything the process wrote to stderr.
    #[allow(dead_code, reason = "used by the cli tests only")]
    pub(crate) async fn stop_with_stderr(mut self) -> String {
        let stderr = self.stderr.take();
        let status = self.signal_and_wait("TERM").await;
        assert!(status.success(), "cairn exited with {status:?}");
        match stderr {
            Some(task) => task.await.unwrap_or_default(),
            None => String::new(),
        }
    }

    /// SIGTERM, then assert a clean exit.
    pub(crate) async fn stop(self) {
        let status = self.signal_and_wait("TERM").await;
        assert!(status.success(), "cairn exited with {status:?}");
    }
}
