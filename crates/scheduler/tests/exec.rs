//! `alloc exec` end to end: a WebSocket client (tokio-tungstenite) against a real scheduler on
//! loopback whose real client agent runs the command beside a raw_exec task. A shell with a
//! PTY echoes its input and sees the size of a resize frame; without a PTY stdout and stderr
//! are separate streams and closing stdin ends `cat`; the exit frame comes last with the exit
//! code; refusals are close frames (1008) with upstream's reasons, before the upgrade only
//! for a malformed query; the `ws_handshake` auth frame and the ACL capabilities
//! (`alloc-exec`, plus `alloc-node-exec` for raw_exec); an idle session gets heartbeats.
//!
//! Invariant: every read is bounded by a timeout; each test's cluster kills its processes on
//! drop.

mod alloc_ops_support;

use std::time::Duration;

use alloc_ops_support::{Cluster, ROOT, shell_job};
use base64::Engine as _;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What a session sent until it closed.
#[derive(Debug, Default)]
struct Outcome {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    frames: Vec<Value>,
    exit_code: Option<i64>,
    close: Option<(u16, String)>,
}

fn exec_path(alloc_id: &str, task: &str, command: &[&str], extra: &str) -> String {
    let command = serde_json::to_string(command).unwrap();
    let command: String = url_encode(&command);
    format!("/v1/client/allocation/{alloc_id}/exec?task={task}&command={command}{extra}")
}

/// Percent-encodes everything but unreserved characters.
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                (byte as char).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

async fn connect(cluster: &Cluster, path: &str, token: Option<&str>) -> Socket {
    let mut request = cluster.ws_url(path).into_client_request().unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("X-Nomad-Token", token.parse().unwrap());
    }
    let (socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the upgrade");
    assert_eq!(response.status(), 101);
    socket
}

async fn send(socket: &mut Socket, frame: Value) {
    socket
        .send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
}

fn stdin(bytes: &[u8]) -> Value {
    json!({ "stdin": { "data": base64::engine::general_purpose::STANDARD.encode(bytes) } })
}

/// Reads frames until the socket closes (at most 15 s).
async fn collect(socket: &mut Socket) -> Outcome {
    let mut outcome = Outcome::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("the session ends within 15 s");
        match message {
            Some(Ok(Message::Text(text))) => {
                let frame: Value = serde_json::from_str(text.as_str()).expect("JSON frames");
                assert!(
                    outcome.exit_code.is_none(),
                    "a frame after the exit: {frame}"
                );
                for (stream, out) in [
                    ("stdout", &mut outcome.stdout),
                    ("stderr", &mut outcome.stderr),
                ] {
                    if let Some(data) = frame[stream]["data"].as_str() {
                        out.extend(
                            base64::engine::general_purpose::STANDARD
                                .decode(data)
                                .unwrap(),
                        );
                    }
                }
                if frame["exited"] == true {
                    outcome.exit_code = Some(frame["result"]["exit_code"].as_i64().unwrap_or(0));
                }
                outcome.frames.push(frame);
            }
            Some(Ok(Message::Close(frame))) => {
                outcome.close =
                    frame.map(|frame| (u16::from(frame.code), frame.reason.to_string()));
                return outcome;
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return outcome,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_with_a_tty_echoes_its_input_sees_the_resized_terminal_and_exits_last() {
    let cluster = Cluster::start(false).await;
    let alloc_id = cluster
        .run_job(shell_job("tty", "while :; do sleep 0.1; done"))
        .await;
    let path = exec_path(&alloc_id, "t", &["/bin/sh"], "&tty=true");
    let mut socket = connect(&cluster, &path, None).await;
    send(
        &mut socket,
        json!({ "tty_size": { "height": 40, "width": 120 } }),
    )
    .await;
    send(&mut socket, json!({})).await;
    send(
        &mut socket,
        stdin(b"stty size; echo $((6*7)); echo $NOMAD_ALLOC_ID; tty; exit 3\n"),
    )
    .await;
    let outcome = collect(&mut socket).await;
    let output = String::from_utf8_lossy(&outcome.stdout);
    // The terminal echoes the typed line, then the commands answer.
    assert!(output.contains("stty size; echo"), "{output:?}");
    assert!(output.contains("40 120\r\n"), "{output:?}");
    assert!(output.contains("42\r\n"), "{output:?}");
    assert!(
        output.contains(&alloc_id),
        "the task's environment: {output:?}"
    );
    assert!(output.contains("/dev/pts/"), "{output:?}");
    assert!(outcome.stderr.is_empty(), "a PTY has one output stream");
    assert_eq!(outcome.exit_code, Some(3));
    assert_eq!(
        outcome.frames.last().unwrap(),
        &json!({ "exited": true, "result": { "exit_code": 3 } })
    );
    assert_eq!(outcome.close.map(|close| close.0), Some(1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tty_stdout_and_stderr_are_separate_and_closing_stdin_ends_input() {
    let cluster = Cluster::start(false).await;
    let alloc_id = cluster
        .run_job(shell_job("pipes", "while :; do sleep 0.1; done"))
        .await;
    let command = ["/bin/sh", "-c", "cat; echo oops >&2; pwd; exit 7"];
    let mut socket = connect(&cluster, &exec_path(&alloc_id, "t", &command, ""), None).await;
    send(&mut socket, stdin(b"hello ")).await;
    send(&mut socket, stdin(b"exec\n")).await;
    send(&mut socket, json!({ "stdin": { "close": true } })).await;
    let outcome = collect(&mut socket).await;
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    assert!(stdout.starts_with("hello exec\n"), "{stdout:?}");
    assert!(
        stdout.trim_end().ends_with("/t"),
        "runs in the task dir: {stdout:?}"
    );
    assert_eq!(outcome.stderr, b"oops\n");
    for stream in ["stdout", "stderr"] {
        assert!(
            outcome
                .frames
                .contains(&json!({ stream: { "close": true } })),
            "{stream} close marker in {:?}",
            outcome.frames
        );
    }
    assert_eq!(outcome.exit_code, Some(7));
    assert_eq!(outcome.close.map(|close| close.0), Some(1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_close_frames_with_upstream_reasons() {
    let cluster = Cluster::start(false).await;
    let alloc_id = cluster
        .run_job(shell_job("refusals", "while :; do sleep 0.1; done"))
        .await;
    let unknown = "00000000-0000-0000-0000-000000000000";
    for (path, reason) in [
        (
            exec_path(&alloc_id, "", &["/bin/true"], ""),
            "must provide task name",
        ),
        (exec_path(&alloc_id, "t", &[], ""), "command is not present"),
        (
            format!("/v1/client/allocation/{alloc_id}/exec?task=t"),
            "command is not present",
        ),
        (
            exec_path(&alloc_id, "web", &["/bin/true"], ""),
            "unknown task name \"web\"",
        ),
        (
            exec_path(unknown, "t", &["/bin/true"], ""),
            "Unknown allocation \"00000000-0000-0000-0000-000000000000\"",
        ),
        (
            exec_path(&alloc_id, "t", &["/no/such/program"], ""),
            "failed to start command",
        ),
    ] {
        let mut socket = connect(&cluster, &path, None).await;
        let outcome = collect(&mut socket).await;
        let (code, got) = outcome.close.expect("a close frame");
        assert!(got.contains(reason), "{path}: {got:?} lacks {reason:?}");
        assert_eq!(code, 1008, "{path}: {got}");
        assert!(outcome.frames.is_empty(), "{path}: {:?}", outcome.frames);
    }

    // A malformed query is refused before the upgrade, as a plain 400.
    for (query, text) in [
        (
            "task=t&command=%5B1%5D",
            "failed to marshal command into json",
        ),
        (
            "task=t&command=%5B%22ls%22%5D&tty=perhaps",
            "tty value is not a boolean",
        ),
    ] {
        let (status, body) = cluster
            .send(
                "GET",
                &format!("/v1/client/allocation/{alloc_id}/exec?{query}"),
                None,
            )
            .await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(text), "{query}: {body:?} lacks {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_capabilities_and_the_handshake_frame_decide_who_may_exec() {
    let cluster = Cluster::start(true).await;
    let alloc_id = cluster
        .run_job(shell_job("guarded-exec", "while :; do sleep 0.1; done"))
        .await;
    let exec_only = cluster
        .token_with(
            "exec-only",
            r#"namespace "default" { capabilities = ["alloc-exec"] }"#,
        )
        .await;
    let node_exec = cluster
        .token_with(
            "node-exec",
            r#"namespace "default" { capabilities = ["alloc-exec", "alloc-node-exec"] }"#,
        )
        .await;
    let path = exec_path(&alloc_id, "t", &["/bin/sh", "-c", "exit 5"], "");
    let handshake = format!("{path}&ws_handshake=true");

    let refused = |outcome: Outcome| outcome.close.expect("a close frame");
    // No token, or alloc-exec alone on a raw_exec task (no filesystem isolation).
    let mut socket = connect(&cluster, &path, None).await;
    assert_eq!(
        refused(collect(&mut socket).await),
        (1008, "Permission denied".to_owned())
    );
    let mut socket = connect(&cluster, &path, Some(&exec_only)).await;
    assert_eq!(
        refused(collect(&mut socket).await),
        (1008, "Permission denied".to_owned())
    );
    let mut socket = connect(&cluster, &path, Some("not-a-token")).await;
    assert_eq!(
        refused(collect(&mut socket).await),
        (1008, "ACL token not found".to_owned())
    );
    let mut socket = connect(&cluster, &path, Some(&node_exec)).await;
    assert_eq!(collect(&mut socket).await.exit_code, Some(5));

    // The token in the first frame, for clients that cannot set headers.
    let mut socket = connect(&cluster, &handshake, None).await;
    send(&mut socket, json!({ "version": 1, "auth_token": ROOT })).await;
    assert_eq!(collect(&mut socket).await.exit_code, Some(5));
    let mut socket = connect(&cluster, &handshake, None).await;
    send(&mut socket, json!({ "version": 2, "auth_token": ROOT })).await;
    assert_eq!(
        refused(collect(&mut socket).await),
        (1008, "unexpected handshake value: 2".to_owned())
    );
    let mut socket = connect(&cluster, &handshake, Some(&node_exec)).await;
    send(&mut socket, json!({ "version": 1, "auth_token": ROOT })).await;
    assert_eq!(
        refused(collect(&mut socket).await),
        (
            1008,
            "handshake auth token mismatched auth header token".to_owned()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_gets_heartbeats_and_its_command_dies_with_the_socket() {
    let cluster = Cluster::start(false).await;
    let alloc_id = cluster
        .run_job(shell_job("idle", "while :; do sleep 0.1; done"))
        .await;
    let command = [
        "/bin/sh",
        "-c",
        "echo $$ > ../alloc/data/exec.pid; exec sleep 300",
    ];
    let mut socket = connect(&cluster, &exec_path(&alloc_id, "t", &command, ""), None).await;
    // Nothing to say for a while: the server keeps the socket busy with empty frames.
    let heartbeat = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) if text.as_str() == "{}" => return,
                Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => {}
                other => panic!("the session ended: {other:?}"),
            }
        }
    })
    .await;
    assert!(heartbeat.is_ok(), "a heartbeat within 15 s");

    // Closing the socket ends the command.
    let (_, pid_file) = cluster
        .send(
            "GET",
            &format!("/v1/client/fs/cat/{alloc_id}?path=/alloc/data/exec.pid"),
            None,
        )
        .await;
    let pid: i32 = pid_file.trim().parse().expect("the command's pid");
    socket.close(None).await.unwrap();
    drop(socket);
    cluster
        .poll("the exec'd command gone", || async {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| !stat.contains(") Z "))
                .unwrap_or(false);
            (!alive).then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_into_an_isolated_task_runs_inside_its_namespaces_and_root() {
    let cluster = Cluster::start(false).await;
    let mut job = shell_job("isolated", "while :; do sleep 0.1; done");
    job["TaskGroups"][0]["Tasks"][0]["Driver"] = json!("exec");
    let alloc_id = cluster.run_job(job).await;
    let command = [
        "/bin/sh",
        "-c",
        "echo pid=$$; ls /; cat /proc/1/cmdline | tr '\\0' ' '",
    ];
    let mut socket = connect(&cluster, &exec_path(&alloc_id, "t", &command, ""), None).await;
    let outcome = collect(&mut socket).await;
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "{stdout} {:?}",
        String::from_utf8_lossy(&outcome.stderr)
    );
    // A small PID in the task's own PID namespace, whose PID 1 is the task's init, and the
    // task directory as the root.
    let pid: i64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("pid="))
        .and_then(|pid| pid.parse().ok())
        .expect("the shell's pid");
    assert!(pid < 100, "{stdout}");
    assert!(stdout.lines().any(|line| line == "local"), "{stdout}");
    assert!(stdout.contains("cairn-init"), "{stdout}");
}
