//! Running a command on a remote host as its admin user, for dynamic keys: the system OpenSSH
//! client (`ssh`) as a subprocess, authenticated by a private `ssh-agent` holding the
//! registered key, with the host key checked against the engine's pin.
//!
//! Why OpenSSH: it is the client the hosts are tested against, it needs no second crypto stack
//! in the binary (the Rust SSH clients bring ring or a second RustCrypto generation), and its
//! host-key checking is the real thing. The key never touches disk in clear: it goes from the
//! engine to `ssh-add -` over a pipe, into an agent that listens on a socket in a fresh
//! directory only this process can enter (mode 0700), and the agent dies with the connection.
//!
//! Host keys (trust on first use, per IP and port): without a pin, `ssh` runs with
//! `StrictHostKeyChecking=accept-new` against an empty known_hosts file and the key it learns
//! is handed back to be pinned; with a pin, the file holds exactly that key and
//! `StrictHostKeyChecking=yes`, so a host presenting another key is refused before any
//! command runs ([`RemoteError::HostKeyChanged`]). `HostKeyAlias` makes the known_hosts entry
//! independent of how the host was addressed; the system and user ssh configuration, other
//! known_hosts files and default identity files are ignored (`-F /dev/null`).
//!
//! Invariants: every subprocess is spawned with `kill_on_drop` and awaited (or killed) before
//! the connection's directory is removed; a command runs at most [`COMMAND_TIMEOUT`].

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// How long one remote command (connect, authenticate, run) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the agent may take to listen and to take the key.
const AGENT_TIMEOUT: Duration = Duration::from_secs(10);
/// The name the host's key is filed under in the connection's known_hosts file.
const HOST_ALIAS: &str = "cairn-dynamic-key-host";

/// Why a remote command did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RemoteError {
    /// The host presented a key other than the pinned one.
    HostKeyChanged,
    /// Anything else: the client, the connection, authentication, or the command failed.
    Failed(String),
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteError::HostKeyChanged => {
                f.write_str("the host key does not match the pinned key")
            }
            RemoteError::Failed(why) => f.write_str(why),
        }
    }
}

fn failed(why: impl Into<String>) -> RemoteError {
    RemoteError::Failed(why.into())
}

/// A directory only this process can enter, removed when dropped.
#[derive(Debug)]
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create() -> Result<PrivateDir, RemoteError> {
        use std::os::unix::fs::DirBuilderExt;
        let path =
            std::env::temp_dir().join(format!("cairn-ssh-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|err| failed(format!("cannot create {}: {err}", path.display())))?;
        Ok(PrivateDir(path))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where to run: the host's address and port and the user to log in as.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) ip: &'a str,
    pub(crate) port: u16,
    pub(crate) user: &'a str,
}

/// What a command that ran left behind.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The host key learned on this first contact (`<algorithm> <base64>`), when there was no
    /// pin.
    pub(crate) learned_host_key: Option<String>,
}

/// An agent holding one key, ready to run commands through `ssh`.
#[derive(Debug)]
pub(crate) struct Connection {
    agent: Child,
    socket: PathBuf,
    dir: PrivateDir,
}

impl Connection {
    /// Starts a private agent and gives it `private_key` (any format `ssh-add` reads).
    pub(crate) async fn with_key(private_key: &str) -> Result<Connection, RemoteError> {
        let dir = PrivateDir::create()?;
        let socket = dir.0.join("agent.sock");
        let mut agent = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| failed(format!("cannot start ssh-agent: {err}")))?;
        // In the foreground the agent prints its environment once it listens.
        let stdout = agent
            .stdout
            .take()
            .ok_or_else(|| failed("ssh-agent has no stdout"))?;
        let mut first = String::new();
        let ready =
            tokio::time::timeout(AGENT_TIMEOUT, BufReader::new(stdout).read_line(&mut first)).await;
        if !matches!(ready, Ok(Ok(n)) if n > 0) || !socket.exists() {
            let _ = agent.kill().await;
            return Err(failed("ssh-agent did not start listening"));
        }
        let connection = Connection { agent, socket, dir };
        connection.add_key(private_key).await?;
        Ok(connection)
    }

    async fn add_key(&self, private_key: &str) -> Result<(), RemoteError> {
        let mut key = private_key.trim().to_owned();
        key.push('\n');
        let mut child = Command::new("ssh-add")
            .arg("-q")
            .arg("-")
            .env("SSH_AUTH_SOCK", &self.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| failed(format!("cannot start ssh-add: {err}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(key.as_bytes())
                .await
                .map_err(|err| failed(format!("cannot hand the key to ssh-add: {err}")))?;
        }
        let output = tokio::time::timeout(AGENT_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| failed("ssh-add did not finish"))?
            .map_err(|err| failed(format!("ssh-add: {err}")))?;
        if !output.status.success() {
            return Err(failed(format!(
                "ssh-add refused the key: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Runs `command` (a POSIX shell command line) on `target` with `stdin`, checking the host
    /// key against `pin` (`<algorithm> <base64>`) or learning it when there is none.
    pub(crate) async fn run(
        &self,
        target: Target<'_>,
        pin: Option<&str>,
        command: &str,
        stdin: &[u8],
    ) -> Result<Outcome, RemoteError> {
        let known_hosts = self.dir.0.join("known_hosts");
        let pinned_line = pin.map(|key| format!("{HOST_ALIAS} {}\n", key.trim()));
        std::fs::write(&known_hosts, pinned_line.as_deref().unwrap_or(""))
            .map_err(|err| failed(format!("cannot write known_hosts: {err}")))?;
        let strict = if pin.is_some() { "yes" } else { "accept-new" };
        let mut child = Command::new("ssh")
            .args(["-F", "/dev/null", "-T", "-x", "-a"])
            .args(option("BatchMode", "yes"))
            .args(option("IdentityAgent", &self.socket.to_string_lossy()))
            .args(option("IdentityFile", "/dev/null"))
            .args(option("PasswordAuthentication", "no"))
            .args(option("KbdInteractiveAuthentication", "no"))
            .args(option("HostKeyAlias", HOST_ALIAS))
            .args(option("UserKnownHostsFile", &known_hosts.to_string_lossy()))
            .args(option("GlobalKnownHostsFile", "/dev/null"))
            .args(option("StrictHostKeyChecking", strict))
            .args(option("UpdateHostKeys", "no"))
            .args(option("ConnectTimeout", "10"))
            .args(option("ServerAliveInterval", "10"))
            .args(option("LogLevel", "ERROR"))
            .arg("-p")
            .arg(target.port.to_string())
            .arg("-l")
            .arg(target.user)
            .arg("--")
            .arg(target.ip)
            .arg(command)
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| failed(format!("cannot start ssh: {err}")))?;
        let mut input = child.stdin.take();
        let input_bytes = stdin.to_vec();
        let feed = async move {
            if let Some(stdin) = input.as_mut() {
                // A command that does not read its input closes the pipe early; not an error.
                let _ = stdin.write_all(&input_bytes).await;
                let _ = stdin.shutdown().await;
            }
            drop(input);
        };
        let (_, output) = tokio::time::timeout(COMMAND_TIMEOUT, async {
            tokio::join!(feed, child.wait_with_output())
        })
        .await
        .map_err(|_| {
            failed(format!(
                "the command on {}:{} did not finish in time",
                target.ip, target.port
            ))
        })?;
        let output = output.map_err(|err| failed(format!("ssh: {err}")))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            if stderr.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
                || stderr.contains("Host key verification failed")
            {
                return Err(RemoteError::HostKeyChanged);
            }
            return Err(failed(format!(
                "the command on {}@{}:{} failed ({}): {}",
                target.user,
                target.ip,
                target.port,
                output.status,
                stderr.trim()
            )));
        }
        let learned_host_key = match pin {
            Some(_) => None,
            None => learned_key(&known_hosts)?,
        };
        Ok(Outcome { learned_host_key })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // `kill_on_drop` would do it too; this makes the order explicit: agent, then directory.
        let _ = self.agent.start_kill();
    }
}

fn option(name: &str, value: &str) -> [String; 2] {
    ["-o".to_owned(), format!("{name}={value}")]
}

/// The key `accept-new` filed under [`HOST_ALIAS`].
fn learned_key(known_hosts: &Path) -> Result<Option<String>, RemoteError> {
    let text = std::fs::read_to_string(known_hosts)
        .map_err(|err| failed(format!("cannot read known_hosts: {err}")))?;
    Ok(text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next() == Some(HOST_ALIAS)).then(|| parts.collect::<Vec<_>>().join(" "))
    }))
}

/// `text` as one single-quoted POSIX shell word.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_survives_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[tokio::test]
    async fn an_agent_takes_a_key_from_a_pipe_and_its_directory_goes_with_it() {
        let key = crate::crypto::generate_ca_key("ed25519", 0).unwrap();
        let pem = crate::crypto::private_key_pem(&key).unwrap();
        let connection = Connection::with_key(&pem)
            .await
            .expect("ssh-agent and ssh-add must be installed (scripts/services installs them)");
        let dir = connection.dir.0.clone();
        assert!(dir.exists());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&dir).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o700);
        assert!(
            std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .all(|entry| entry.file_name() == "agent.sock")
        );
        drop(connection);
        assert!(!dir.exists());
    }
}
