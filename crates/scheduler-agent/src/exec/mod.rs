//! Exec sessions (Nomad's `alloc exec`): a command started in a running task's context, its
//! standard streams carried as JSON frames over a call's tunnel, one frame per line.
//!
//! Frames in (from the server, which relays the user's WebSocket): `{"stdin":{"data":b64}}`,
//! `{"stdin":{"close":true}}`, `{"tty_size":{"height":h,"width":w}}`, `{}` (ignored). Frames
//! out: `{"stdout":{"data":b64}}`, `{"stderr":{"data":b64}}`, `{"stdout":{"close":true}}` and
//! `{"stderr":{"close":true}}` at end of stream, and last `{"exited":true,"result":
//! {"exit_code":n}}`. The server adds the WebSocket heartbeats itself.
//!
//! The command runs with the task's environment, in the task directory, as the agent's user
//! (`raw_exec`); for an `exec` task it runs inside the task's namespaces and root (entered with
//! `nsenter` through the task's pid). With `tty` it gets a real PTY (`pty-process`): its
//! output, stdout and stderr alike, comes as `stdout` frames, resize frames set the terminal's
//! size, and closing stdin sends the terminal's EOF character. Without, it gets pipes.
//!
//! Invariants: the exit frame is the last frame, sent after the output read to its end (or,
//! when something the command left behind holds the terminal open, after a short grace);
//! when the tunnel closes before the command ends (the user went away) the command's process
//! group is killed; a command that cannot start is a refusal head, never a dropped tunnel.

mod frames;

use std::os::unix::process::ExitStatusExt as _;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::Shared;
use crate::handles::{ControlError, ExecTarget};
use crate::tunnel::{ClientCall, Refusal, param_bool, param_str, refuse, write_head};

pub(crate) use frames::{Input, exit_frame, output_close, output_data};

/// How long output may still arrive after the command exited.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// How long an isolated task that only just started may take to enter its root.
const ISOLATED_START: Duration = Duration::from_secs(5);

/// The largest chunk of output in one frame (upstream reads 1 KiB at a time).
const CHUNK: usize = 1024;

/// The terminal size before the first resize frame.
const DEFAULT_ROWS: u16 = 24;
const DEFAULT_COLS: u16 = 80;

/// Serves one `exec` call over its tunnel.
pub(crate) async fn serve<IO>(shared: &Shared, call: &ClientCall, mut io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let task = param_str(call, "Task").to_owned();
    let tty = param_bool(call, "Tty");
    let command: Vec<String> = call
        .params
        .get("Command")
        .and_then(|value| serde_json::from_value(value.clone()).ok())
        .unwrap_or_default();
    if task.is_empty() {
        return refuse(&mut io, &Refusal::bad_request("must provide task name")).await;
    }
    if command.is_empty() {
        return refuse(&mut io, &Refusal::bad_request("command is not present")).await;
    }
    let target = match shared.controls.exec_target(&call.alloc_id, &task).await {
        Ok(target) => target,
        Err(ControlError::UnknownTask) => {
            let refusal = Refusal::bad_request(format!("unknown task name {task:?}"));
            return refuse(&mut io, &refusal).await;
        }
        Err(ControlError::NotRunning) => {
            let refusal = Refusal::new(404, format!("task {task:?} is not running."));
            return refuse(&mut io, &refusal).await;
        }
        Err(error) => return refuse(&mut io, &Refusal::from(error)).await,
    };
    let argv = argv(&target, command).await;
    let started = if tty {
        Started::pty(&target, &argv)
    } else {
        Started::pipes(&target, &argv)
    };
    let started = match started {
        Ok(started) => started,
        Err(error) => {
            // A program that does not exist or may not run is the caller's mistake.
            let status = match error.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => 400,
                _ => 500,
            };
            let refusal = Refusal::new(status, format!("failed to start command: {error}"));
            return refuse(&mut io, &refusal).await;
        }
    };
    if write_head(&mut io, 200, "", "application/x-ndjson")
        .await
        .is_err()
    {
        return;
    }
    tracing::info!(alloc_id = %call.alloc_id, %task, tty, "exec session started");
    let code = run_session(io, started).await;
    tracing::info!(alloc_id = %call.alloc_id, %task, ?code, "exec session ended");
}

/// The command line to run: as given for raw_exec; for an isolated task, inside the
/// namespaces and the root of its init (the first child of the process the agent tracks,
/// which is PID 1 of the task's PID namespace; see `driver/exec.rs`). The init switches to
/// the task's root before it starts the task, so a task only just started is waited for
/// (until the init's root is the task directory, at most [`ISOLATED_START`]).
pub(crate) async fn argv(target: &ExecTarget, command: Vec<String>) -> Vec<String> {
    if target.driver != "exec" {
        return command;
    }
    let deadline = tokio::time::Instant::now() + ISOLATED_START;
    let init = loop {
        let init = first_child(target.pid);
        let rooted = init.is_some_and(|init| in_root(init, &target.task_dir));
        if rooted || tokio::time::Instant::now() >= deadline {
            break init.unwrap_or(target.pid);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut argv = vec![
        "nsenter".to_owned(),
        format!("--target={init}"),
        "--mount".to_owned(),
        "--pid".to_owned(),
        "--ipc".to_owned(),
        "--root".to_owned(),
        "--wd".to_owned(),
        "--".to_owned(),
    ];
    argv.extend(command);
    argv
}

/// Whether the root of process `pid` is `dir` (the same directory, by device and inode).
fn in_root(pid: i32, dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (
        std::fs::metadata(format!("/proc/{pid}/root")),
        std::fs::metadata(dir),
    ) {
        (Ok(root), Ok(dir)) => root.dev() == dir.dev() && root.ino() == dir.ino(),
        _ => false,
    }
}

/// The first child of `pid`, from `/proc`.
fn first_child(pid: i32) -> Option<i32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// Where stdin goes and how the terminal is resized.
enum Stdin {
    Pipe(Option<tokio::process::ChildStdin>),
    Pty(pty_process::OwnedWritePty),
}

/// A started command.
struct Started {
    child: tokio::process::Child,
    stdin: Stdin,
    stdout: Box<dyn AsyncRead + Unpin + Send>,
    stderr: Option<Box<dyn AsyncRead + Unpin + Send>>,
}

impl Started {
    fn pty(target: &ExecTarget, argv: &[String]) -> std::io::Result<Started> {
        let (pty, pts) = pty_process::open().map_err(io_error)?;
        pty.resize(pty_process::Size::new(DEFAULT_ROWS, DEFAULT_COLS))
            .map_err(io_error)?;
        let child = pty_process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(target.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&target.task_dir)
            .kill_on_drop(true)
            .spawn(pts)
            .map_err(io_error)?;
        let (read, write) = pty.into_split();
        Ok(Started {
            child,
            stdin: Stdin::Pty(write),
            stdout: Box::new(read),
            stderr: None,
        })
    }

    fn pipes(target: &ExecTarget, argv: &[String]) -> std::io::Result<Started> {
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(target.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&target.task_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take();
        let missing = || std::io::Error::other("a pipe is missing");
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        Ok(Started {
            child,
            stdin: Stdin::Pipe(stdin),
            stdout: Box::new(stdout),
            stderr: Some(Box::new(stderr)),
        })
    }
}

/// pty-process's error as an I/O error (its I/O errors keep their kind).
fn io_error(error: pty_process::Error) -> std::io::Error {
    match error {
        pty_process::Error::Io(error) => error,
        other => std::io::Error::other(other.to_string()),
    }
}

/// Pumps frames until the command exits (returns its exit code) or the tunnel closes
/// (kills the command; returns `None`).
async fn run_session<IO>(io: IO, started: Started) -> Option<i64>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Started {
        mut child,
        stdin,
        stdout,
        stderr,
    } = started;
    let (reader, mut writer) = tokio::io::split(io);
    let (frames_tx, mut frames_rx) = mpsc::channel::<String>(64);
    let mut pumps = JoinSet::new();
    pumps.spawn(pump(stdout, "stdout", frames_tx.clone()));
    if let Some(stderr) = stderr {
        pumps.spawn(pump(stderr, "stderr", frames_tx.clone()));
    }
    let writer_task = tokio::spawn(async move {
        while let Some(mut line) = frames_rx.recv().await {
            line.push('\n');
            if writer.write_all(line.as_bytes()).await.is_err() {
                return;
            }
            if frames_rx.is_empty() && writer.flush().await.is_err() {
                return;
            }
        }
        let _ = writer.flush().await;
        let _ = writer.shutdown().await;
    });

    let status = tokio::select! {
        status = child.wait() => status,
        () = input(reader, stdin) => {
            // The user went away: end the command and everything it started.
            if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.kill().await;
            pumps.shutdown().await;
            drop(frames_tx);
            writer_task.abort();
            return None;
        }
    };
    let code = match status {
        Ok(status) => status
            .code()
            .map(i64::from)
            .or_else(|| status.signal().map(|signal| 128 + i64::from(signal)))
            .unwrap_or(-1),
        Err(_) => -1,
    };
    // The output read to its end, or as far as it comes within the grace.
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while pumps.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        pumps.shutdown().await;
    }
    let _ = frames_tx.send(exit_frame(code)).await;
    drop(frames_tx);
    let _ = writer_task.await;
    Some(code)
}

/// Reads one output stream into frames, ending with its close frame.
async fn pump(
    mut from: Box<dyn AsyncRead + Unpin + Send>,
    stream: &'static str,
    to: mpsc::Sender<String>,
) {
    let mut buffer = vec![0_u8; CHUNK];
    loop {
        // A PTY whose last writer is gone reads EIO rather than EOF: both end the stream.
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.send(output_data(stream, &buffer[..n])).await.is_err() {
            return;
        }
    }
    let _ = to.send(output_close(stream)).await;
}

/// Applies input frames until the tunnel closes.
async fn input<R: AsyncRead + Unpin>(reader: R, mut stdin: Stdin) {
    let mut lines = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        match Input::parse(&line) {
            Some(Input::Data(bytes)) => match &mut stdin {
                Stdin::Pipe(Some(pipe)) => {
                    if pipe.write_all(&bytes).await.is_err() || pipe.flush().await.is_err() {
                        stdin = Stdin::Pipe(None);
                    }
                }
                Stdin::Pipe(None) => {}
                Stdin::Pty(pty) => {
                    let _ = pty.write_all(&bytes).await;
                    let _ = pty.flush().await;
                }
            },
            Some(Input::Close) => match &mut stdin {
                Stdin::Pipe(pipe) => drop(pipe.take()),
                // The terminal's EOF character (VEOF, ^D) ends input for the reading program.
                Stdin::Pty(pty) => {
                    let _ = pty.write_all(&[4]).await;
                }
            },
            Some(Input::Resize { rows, cols }) => {
                if let Stdin::Pty(pty) = &stdin {
                    let _ = pty.resize(pty_process::Size::new(rows, cols));
                }
            }
            Some(Input::Heartbeat) | None => {}
        }
    }
}
