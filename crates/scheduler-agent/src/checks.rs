//! The client's checks of Nomad-native services (upstream's `client/serviceregistration/checks`):
//! HTTP, TCP and script checks, each run at its interval with its timeout, the result recorded
//! in the node's runtime (`runtime.rs`) as `GET /v1/allocation/:id/checks` shows it.
//!
//! Results follow upstream's checker: TCP `nomad: tcp ok` or the connect error; HTTP 200
//! `nomad: http ok`, another status below 400 a success and 400 or above a failure, both with
//! the body (at most [`MAX_OUTPUT`] bytes) and `StatusCode`; a script check (which upstream
//! leaves to Consul) succeeds on exit code 0, its output being what it wrote. Script checks
//! run in their task's context, as upstream's do: with the task's environment, in its task
//! directory; for `raw_exec` simply a process, for `exec` inside the task's namespaces and
//! root, entered as an exec session enters them (`exec::argv`), so the script sees what the
//! task sees (`/local`, its PID 1) and nothing of the host the task cannot see.
//!
//! Invariants: a check never outlives its loop (a script past its timeout is killed); a check
//! that cannot even be attempted (an unknown type, a port without a value) is a `failure` with
//! the reason as output, never a panic.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use scheduler_structs::{Allocation, CheckResult, Job};
use tokio::io::AsyncReadExt;

use crate::Shared;
use crate::env::{EnvInputs, TaskEnv};

/// One check to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckSpec {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) service: String,
    /// The allocation's name (`job.group[index]`).
    pub(crate) group: String,
    /// `healthiness`, or `readiness` for a check whose `on_update` is `ignore`.
    pub(crate) mode: String,
    pub(crate) kind: CheckKind,
    pub(crate) address: String,
    pub(crate) port: i64,
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
    /// The task a script check runs in (the check's `task`, or the service's task).
    pub(crate) task: Option<String>,
}

/// The most output kept from a check.
pub(crate) const MAX_OUTPUT: usize = 4096;

/// What a check does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckKind {
    Http {
        protocol: String,
        method: String,
        path: String,
        headers: BTreeMap<String, Vec<String>>,
    },
    Tcp,
    Script {
        command: String,
        args: Vec<String>,
    },
    Unsupported(String),
}

/// Where a script check runs: its task's environment and directory, and for an isolated
/// task the task to enter.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScriptContext {
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) dir: PathBuf,
    pub(crate) enter: Option<EnterTask>,
}

/// An `exec` task whose namespaces and root a script check enters.
#[derive(Debug, Clone)]
pub(crate) struct EnterTask {
    pub(crate) controls: crate::handles::AllocControls,
    pub(crate) alloc_id: String,
    pub(crate) task: String,
}

impl ScriptContext {
    /// The context of `task` in `alloc` (the environment its process gets).
    pub(crate) fn of_task(
        shared: &Shared,
        alloc: &Allocation,
        job: &Job,
        task: &str,
    ) -> ScriptContext {
        let dirs = shared.state.task_dirs(&alloc.id, task);
        let group = job.task_group(&alloc.task_group);
        let isolated = group.is_some_and(|group| {
            group
                .tasks
                .iter()
                .any(|candidate| candidate.name == task && candidate.driver == "exec")
        });
        let env = group
            .and_then(|group| {
                let task = group
                    .tasks
                    .iter()
                    .find(|candidate| candidate.name == task)?;
                let (alloc_dir, local_dir, secrets_dir) =
                    crate::driver::task_paths(&task.driver, &dirs);
                Some(
                    TaskEnv::build(&EnvInputs {
                        alloc,
                        job,
                        group,
                        task,
                        node: &shared.node,
                        alloc_dir: &alloc_dir,
                        local_dir: &local_dir,
                        secrets_dir: &secrets_dir,
                        host_env: &shared.host_env,
                    })
                    .vars()
                    .clone(),
                )
            })
            .unwrap_or_default();
        ScriptContext {
            env,
            dir: dirs.task_dir,
            enter: isolated.then(|| EnterTask {
                controls: shared.controls.clone(),
                alloc_id: alloc.id.clone(),
                task: task.to_owned(),
            }),
        }
    }
}

/// Runs `check` every interval until aborted, recording each result.
pub(crate) async fn run(
    shared: Arc<Shared>,
    alloc_id: String,
    check: CheckSpec,
    script: Option<ScriptContext>,
) {
    loop {
        let result = execute(&check, script.as_ref()).await;
        shared.runtime.set_check(&alloc_id, result);
        tokio::time::sleep(check.interval).await;
    }
}

/// Runs a check once.
pub(crate) async fn execute(check: &CheckSpec, script: Option<&ScriptContext>) -> CheckResult {
    let (success, output, status_code) = match &check.kind {
        CheckKind::Tcp => tcp(check).await,
        CheckKind::Http {
            protocol,
            method,
            path,
            headers,
        } => http(check, protocol, method, path, headers).await,
        CheckKind::Script { command, args } => match script {
            Some(context) => run_script(command, args, context, check.timeout).await,
            None => (false, "script check has no task to run in".to_owned(), 0),
        },
        CheckKind::Unsupported(kind) => (false, format!("check type {kind:?} is not supported"), 0),
    };
    CheckResult {
        id: check.id.clone(),
        check: check.name.clone(),
        group: check.group.clone(),
        mode: check.mode.clone(),
        output,
        service: check.service.clone(),
        status: if success { "success" } else { "failure" }.to_owned(),
        status_code,
        timestamp: stdx::time::unix_now_nanos() / 1_000_000_000,
    }
}

fn host_port(check: &CheckSpec) -> Result<String, String> {
    if check.port <= 0 {
        return Err(format!("check {:?} has no port to reach", check.name));
    }
    if check.address.contains(':') {
        Ok(format!("[{}]:{}", check.address, check.port))
    } else {
        Ok(format!("{}:{}", check.address, check.port))
    }
}

async fn tcp(check: &CheckSpec) -> (bool, String, i64) {
    let addr = match host_port(check) {
        Ok(addr) => addr,
        Err(error) => return (false, error, 0),
    };
    match tokio::time::timeout(check.timeout, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(_)) => (true, "nomad: tcp ok".to_owned(), 0),
        Ok(Err(error)) => (false, format!("dial tcp {addr}: {error}"), 0),
        Err(_) => (false, format!("dial tcp {addr}: i/o timeout"), 0),
    }
}

async fn http(
    check: &CheckSpec,
    protocol: &str,
    method: &str,
    path: &str,
    headers: &BTreeMap<String, Vec<String>>,
) -> (bool, String, i64) {
    let addr = match host_port(check) {
        Ok(addr) => addr,
        Err(error) => return (false, error, 0),
    };
    let path = if path.starts_with('/') || path.is_empty() {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    let url = format!("{protocol}://{addr}{path}");
    let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return (false, format!("nomad: invalid method {method:?}"), 0);
    };
    let client = match reqwest::Client::builder().timeout(check.timeout).build() {
        Ok(client) => client,
        Err(error) => return (false, format!("nomad: {error}"), 0),
    };
    let mut request = client.request(method, &url);
    for (name, values) in headers {
        for value in values {
            request = request.header(name, value);
        }
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => return (false, format!("nomad: {error}"), 0),
    };
    let status = response.status().as_u16();
    if status == 200 {
        return (true, "nomad: http ok".to_owned(), 200);
    }
    let body = response.bytes().await.unwrap_or_default();
    let body = String::from_utf8_lossy(&body[..body.len().min(MAX_OUTPUT)]).into_owned();
    (status < 400, body, i64::from(status))
}

async fn run_script(
    command: &str,
    args: &[String],
    context: &ScriptContext,
    timeout: Duration,
) -> (bool, String, i64) {
    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(command.to_owned());
    argv.extend(args.iter().cloned());
    if let Some(enter) = &context.enter {
        match enter
            .controls
            .exec_target(&enter.alloc_id, &enter.task)
            .await
        {
            Ok(target) => argv = crate::exec::argv(&target, argv).await,
            Err(error) => return (false, format!("task {:?}: {error}", enter.task), 0),
        }
    }
    let mut child = match tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(&context.env)
        .current_dir(&context.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => return (false, format!("cannot run {command:?}: {error}"), 0),
    };
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let outcome = tokio::time::timeout(timeout, async {
        let read_out = async {
            let mut bytes = Vec::new();
            if let Some(stdout) = stdout.as_mut() {
                let _ = stdout.read_to_end(&mut bytes).await;
            }
            bytes
        };
        let read_err = async {
            let mut bytes = Vec::new();
            if let Some(stderr) = stderr.as_mut() {
                let _ = stderr.read_to_end(&mut bytes).await;
            }
            bytes
        };
        let (out, err) = tokio::join!(read_out, read_err);
        let status = child.wait().await;
        (status, out, err)
    })
    .await;
    match outcome {
        Ok((Ok(status), mut out, err)) => {
            out.extend(err);
            out.truncate(MAX_OUTPUT);
            (
                status.success(),
                String::from_utf8_lossy(&out).into_owned(),
                0,
            )
        }
        Ok((Err(error), _, _)) => (false, format!("cannot wait for {command:?}: {error}"), 0),
        Err(_) => (false, "check timed out".to_owned(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: CheckKind, port: i64) -> CheckSpec {
        CheckSpec {
            id: "c1".to_owned(),
            name: "alive".to_owned(),
            service: "web".to_owned(),
            group: "j.g[0]".to_owned(),
            mode: "healthiness".to_owned(),
            kind,
            address: "127.0.0.1".to_owned(),
            port,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            task: None,
        }
    }

    fn free_port() -> i64 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        i64::from(listener.local_addr().unwrap().port())
    }

    #[tokio::test]
    async fn a_tcp_check_passes_once_the_port_listens() {
        let port = free_port();
        let check = spec(CheckKind::Tcp, port);
        let result = execute(&check, None).await;
        assert_eq!(result.status, "failure");
        assert!(result.output.contains("refused"), "{}", result.output);
        let _listener = tokio::net::TcpListener::bind(("127.0.0.1", u16::try_from(port).unwrap()))
            .await
            .unwrap();
        let result = execute(&check, None).await;
        assert_eq!(
            (result.status.as_str(), result.output.as_str()),
            ("success", "nomad: tcp ok")
        );
        assert!(result.timestamp > 0);
    }

    #[tokio::test]
    async fn an_http_check_reads_the_status_and_keeps_the_body_of_failures() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = i64::from(listener.local_addr().unwrap().port());
        let server = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for answer in [
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\ndown",
            ] {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buffer = [0_u8; 1024];
                let _ = stream.read(&mut buffer).await;
                stream.write_all(answer.as_bytes()).await.unwrap();
                stream.shutdown().await.unwrap();
            }
        });
        let check = spec(
            CheckKind::Http {
                protocol: "http".to_owned(),
                method: "GET".to_owned(),
                path: "/health".to_owned(),
                headers: BTreeMap::new(),
            },
            port,
        );
        let result = execute(&check, None).await;
        assert_eq!(
            (
                result.status.as_str(),
                result.output.as_str(),
                result.status_code
            ),
            ("success", "nomad: http ok", 200)
        );
        let result = execute(&check, None).await;
        assert_eq!(
            (
                result.status.as_str(),
                result.output.as_str(),
                result.status_code
            ),
            ("failure", "down", 503)
        );
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_script_check_runs_with_the_task_env_and_dir_and_flips_when_a_file_appears() {
        let dir = tempfile::tempdir().unwrap();
        let context = ScriptContext {
            env: BTreeMap::from([
                ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
                ("READY_FILE".to_owned(), "ready".to_owned()),
            ]),
            dir: dir.path().to_path_buf(),
            enter: None,
        };
        let check = spec(
            CheckKind::Script {
                command: "/bin/sh".to_owned(),
                args: vec![
                    "-c".to_owned(),
                    "echo checking; test -e \"$READY_FILE\"".to_owned(),
                ],
            },
            0,
        );
        let result = execute(&check, Some(&context)).await;
        assert_eq!(
            (result.status.as_str(), result.output.as_str()),
            ("failure", "checking\n")
        );
        std::fs::write(dir.path().join("ready"), "").unwrap();
        let result = execute(&check, Some(&context)).await;
        assert_eq!(result.status, "success");

        let mut slow = check.clone();
        slow.kind = CheckKind::Script {
            command: "/bin/sh".to_owned(),
            args: vec!["-c".to_owned(), "sleep 5".to_owned()],
        };
        slow.timeout = Duration::from_millis(200);
        let result = execute(&slow, Some(&context)).await;
        assert_eq!(
            (result.status.as_str(), result.output.as_str()),
            ("failure", "check timed out")
        );
    }
}
