//! The allocation filesystem and logs as the client serves them to the server's `/v1/client/fs/*`
//! endpoints: `ls`, `stat`, `cat` and `readat` of a path inside an allocation directory, and a
//! task's `stdout`/`stderr` log (`logs`), from an offset at either end, plain or in upstream's
//! frames (`{"Offset", "Data" (base64), "File"}`), optionally followed as it grows; and any
//! file of the allocation streamed the same way (`stream`, Nomad's `FileSystem.Stream`: framed
//! only, with `FileEvent` "file truncated" when the file shrinks, after which it is read again
//! from 0, and "file deleted" as the last frame when it disappears).
//!
//! Invariants: every path is resolved inside the allocation directory: `..` components are
//! refused (400) before anything is touched, and a path whose real location (symlinks
//! followed) lies outside the directory is refused the same way; a followed log ends when the
//! allocation's runner is gone and the file has been read to its end, or when the server
//! closes the tunnel (the HTTP client went away).

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt};

use crate::Shared;
use crate::state::is_safe_component;
use crate::tunnel::{ClientCall, Refusal, answer_json, param_bool, param_str, refuse, write_head};

/// Upstream's refusal of a path outside the allocation directory.
const ESCAPES: &str = "Path escapes the alloc directory";

/// How often a followed log is checked for new data.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// A followed log with nothing new sends an empty frame this often (framed mode).
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The largest chunk read (and framed) at once.
const CHUNK: usize = 64 * 1024;

/// One entry of `ls` / the answer of `stat` (Nomad's `AllocFileInfo`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct FileInfo {
    name: String,
    is_dir: bool,
    size: u64,
    file_mode: String,
    mod_time: String,
    content_type: String,
}

/// Serves one `fs/*` call over its tunnel.
pub(crate) async fn serve<IO>(shared: &Shared, call: &ClientCall, mut io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let root = match alloc_root(shared, &call.alloc_id) {
        Ok(root) => root,
        Err(refusal) => return refuse(&mut io, &refusal).await,
    };
    let result = match call.op.as_str() {
        "fs/ls" => match list(&root, param_str(call, "Path")) {
            Ok(entries) => {
                answer_json(&mut io, &to_value(&entries)).await;
                Ok(())
            }
            Err(refusal) => Err(refusal),
        },
        "fs/stat" => match resolve(&root, param_str(call, "Path")).and_then(|path| info(&path)) {
            Ok(info) => {
                answer_json(&mut io, &to_value(&info)).await;
                Ok(())
            }
            Err(refusal) => Err(refusal),
        },
        "fs/cat" | "fs/readat" => read(&root, call, &mut io).await,
        "fs/logs" => logs(shared, &root, call, &mut io).await,
        "fs/stream" => stream(&root, call, &mut io).await,
        other => Err(Refusal::bad_request(format!(
            "unknown client call {other:?}"
        ))),
    };
    if let Err(refusal) = result {
        refuse(&mut io, &refusal).await;
    }
}

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The allocation's directory, if this client has (or had) the allocation.
fn alloc_root(shared: &Shared, alloc_id: &str) -> Result<PathBuf, Refusal> {
    if !is_safe_component(alloc_id) {
        return Err(Refusal::unknown_allocation(alloc_id));
    }
    let root = shared.state.alloc_dir(alloc_id);
    if shared.state.load_alloc(alloc_id).is_none() || !root.is_dir() {
        return Err(Refusal::unknown_allocation(alloc_id));
    }
    Ok(root)
}

/// `path` (relative to the allocation directory; a leading `/` is the directory itself)
/// resolved inside `root`.
pub(crate) fn resolve(root: &Path, path: &str) -> Result<PathBuf, Refusal> {
    let mut resolved = root.to_path_buf();
    for component in Path::new(path).components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => resolved.push(name),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(Refusal::bad_request(ESCAPES));
            }
        }
    }
    if let (Ok(real), Ok(real_root)) = (resolved.canonicalize(), root.canonicalize())
        && !real.starts_with(&real_root)
    {
        return Err(Refusal::bad_request(ESCAPES));
    }
    Ok(resolved)
}

fn not_found(path: &Path, root: &Path, error: &std::io::Error) -> Refusal {
    let shown = path.strip_prefix(root).unwrap_or(path);
    let status = if error.kind() == std::io::ErrorKind::NotFound {
        404
    } else {
        500
    };
    Refusal::new(status, format!("stat /{}: {error}", shown.display()))
}

fn info(path: &Path) -> Result<FileInfo, Refusal> {
    let metadata = std::fs::symlink_metadata(path).map_err(|error| {
        let root = path.parent().unwrap_or(path);
        not_found(path, root, &error)
    })?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".to_owned());
    Ok(file_info(name, path, &metadata))
}

fn file_info(name: String, path: &Path, metadata: &std::fs::Metadata) -> FileInfo {
    use std::os::unix::fs::PermissionsExt as _;
    let mod_nanos = metadata
        .modified()
        .ok()
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| {
            i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
        });
    let is_dir = metadata.is_dir();
    FileInfo {
        name,
        is_dir,
        size: metadata.len(),
        file_mode: go_file_mode(metadata.file_type(), metadata.permissions().mode()),
        mod_time: stdx::time::format_rfc3339_nanos(mod_nanos),
        content_type: if is_dir {
            String::new()
        } else {
            content_type(path)
        },
    }
}

/// Go's `os.FileMode.String()` for the common types.
fn go_file_mode(file_type: std::fs::FileType, mode: u32) -> String {
    use std::os::unix::fs::FileTypeExt as _;
    let kind = if file_type.is_dir() {
        'd'
    } else if file_type.is_symlink() {
        'L'
    } else if file_type.is_fifo() {
        'p'
    } else if file_type.is_socket() {
        'S'
    } else if file_type.is_char_device() {
        'c'
    } else if file_type.is_block_device() {
        'D'
    } else {
        '-'
    };
    let mut out = String::with_capacity(10);
    out.push(kind);
    for (bit, letter) in [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o040, 'r'),
        (0o020, 'w'),
        (0o010, 'x'),
        (0o004, 'r'),
        (0o002, 'w'),
        (0o001, 'x'),
    ] {
        out.push(if mode & bit != 0 { letter } else { '-' });
    }
    out
}

/// A file's content type from its first bytes: text or not.
fn content_type(path: &Path) -> String {
    use std::io::Read as _;
    let mut head = [0_u8; 512];
    let read = std::fs::File::open(path)
        .and_then(|mut file| file.read(&mut head))
        .unwrap_or(0);
    let head = &head[..read];
    let text = match std::str::from_utf8(head) {
        Ok(_) => true,
        // A multi-byte character cut at the end of the sample is still text.
        Err(error) => error.error_len().is_none(),
    };
    if text && !head.contains(&0) {
        "text/plain; charset=utf-8".to_owned()
    } else {
        "application/octet-stream".to_owned()
    }
}

fn list(root: &Path, path: &str) -> Result<Vec<FileInfo>, Refusal> {
    let dir = resolve(root, path)?;
    let entries = std::fs::read_dir(&dir).map_err(|error| not_found(&dir, root, &error))?;
    let mut list: Vec<FileInfo> = entries
        .flatten()
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            Some(file_info(name, &entry.path(), &metadata))
        })
        .collect();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(list)
}

/// An integer parameter (absent or null: `default`).
fn param_i64(call: &ClientCall, name: &str, default: i64) -> Result<i64, Refusal> {
    match call.params.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_i64()
            .ok_or_else(|| Refusal::bad_request(format!("{name} must be an integer"))),
    }
}

/// `cat` (the whole file) and `readat` (`Offset`, `Limit`).
async fn read<IO: AsyncWrite + Unpin>(
    root: &Path,
    call: &ClientCall,
    io: &mut IO,
) -> Result<(), Refusal> {
    let path = resolve(root, param_str(call, "Path"))?;
    let metadata = std::fs::metadata(&path).map_err(|error| not_found(&path, root, &error))?;
    if metadata.is_dir() {
        return Err(Refusal::bad_request(format!(
            "file {:?} is a directory",
            param_str(call, "Path")
        )));
    }
    let offset = param_i64(call, "Offset", 0)?;
    let limit = param_i64(call, "Limit", -1)?;
    if offset < 0 {
        return Err(Refusal::bad_request("offset must be non-negative"));
    }
    let mut file = tokio::fs::File::open(&path)
        .await
        .map_err(|error| not_found(&path, root, &error))?;
    file.seek(std::io::SeekFrom::Start(u64::try_from(offset).unwrap_or(0)))
        .await
        .map_err(|error| Refusal::new(500, error.to_string()))?;
    if write_head(io, 200, "", "text/plain; charset=utf-8")
        .await
        .is_err()
    {
        return Ok(());
    }
    let mut remaining = u64::try_from(limit).unwrap_or(u64::MAX);
    let mut buffer = vec![0_u8; CHUNK];
    while remaining > 0 {
        let want = usize::try_from(remaining.min(CHUNK as u64)).unwrap_or(CHUNK);
        let n = match file.read(&mut buffer[..want]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if io.write_all(&buffer[..n]).await.is_err() {
            return Ok(());
        }
        remaining -= n as u64;
    }
    let _ = io.shutdown().await;
    Ok(())
}

/// A log frame (Nomad's `StreamFrame`).
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Frame<'a> {
    offset: u64,
    data: String,
    file: &'a str,
}

/// A frame of `stream` (Nomad's `StreamFrame`, empty fields left out as upstream).
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct StreamFrame<'a> {
    #[serde(skip_serializing_if = "is_zero")]
    offset: u64,
    #[serde(skip_serializing_if = "str::is_empty")]
    data: String,
    file: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    file_event: &'a str,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Upstream's file events.
const FILE_TRUNCATED: &str = "file truncated";
const FILE_DELETED: &str = "file deleted";

/// `stream`: `Path` (a file), `Offset`, `Origin` (start|end), `Follow`; framed. A followed
/// stream ends when the file is deleted or the server closes the tunnel.
async fn stream<IO: AsyncRead + AsyncWrite + Unpin>(
    root: &Path,
    call: &ClientCall,
    io: &mut IO,
) -> Result<(), Refusal> {
    let shown = param_str(call, "Path");
    if shown.is_empty() {
        return Err(Refusal::bad_request("must provide a file path"));
    }
    let path = resolve(root, shown)?;
    let metadata = std::fs::metadata(&path).map_err(|error| {
        let mut refusal = not_found(&path, root, &error);
        refusal.status = 400;
        refusal
    })?;
    if metadata.is_dir() {
        return Err(Refusal::bad_request(format!(
            "file {shown:?} is a directory"
        )));
    }
    let origin_end = match param_str(call, "Origin") {
        "" | "start" => false,
        "end" => true,
        _ => return Err(Refusal::bad_request("origin must be start or end")),
    };
    let offset = u64::try_from(param_i64(call, "Offset", 0)?.max(0)).unwrap_or(0);
    let follow = param_bool(call, "Follow");
    let mut at = if origin_end {
        metadata.len().saturating_sub(offset)
    } else {
        offset
    };
    if write_head(io, 200, "", "application/json").await.is_err() {
        return Ok(());
    }
    let (mut reader, mut writer) = tokio::io::split(io);
    let send = |frame: StreamFrame<'_>| serde_json::to_vec(&frame).unwrap_or_default();
    let mut buffer = vec![0_u8; CHUNK];
    let mut idle = Duration::ZERO;
    let mut probe = [0_u8; 1];
    let mut event = "";
    loop {
        let len = match tokio::fs::metadata(&path).await {
            Ok(metadata) => metadata.len(),
            Err(_) => {
                let frame = send(StreamFrame {
                    offset: at,
                    data: String::new(),
                    file: shown,
                    file_event: FILE_DELETED,
                });
                let _ = writer.write_all(&frame).await;
                break;
            }
        };
        if len < at {
            at = 0;
            event = FILE_TRUNCATED;
        }
        let mut read_any = false;
        if let Ok(mut file) = tokio::fs::File::open(&path).await
            && file.seek(std::io::SeekFrom::Start(at)).await.is_ok()
        {
            loop {
                let n = match file.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                read_any = true;
                at += n as u64;
                let frame = send(StreamFrame {
                    offset: at,
                    data: base64::engine::general_purpose::STANDARD.encode(&buffer[..n]),
                    file: shown,
                    file_event: std::mem::take(&mut event),
                });
                if writer.write_all(&frame).await.is_err() {
                    return Ok(());
                }
            }
        }
        if !event.is_empty() {
            // Truncated to nothing: the event goes alone.
            let frame = send(StreamFrame {
                offset: at,
                data: String::new(),
                file: shown,
                file_event: std::mem::take(&mut event),
            });
            if writer.write_all(&frame).await.is_err() {
                return Ok(());
            }
            read_any = true;
        }
        if !follow {
            break;
        }
        if read_any {
            idle = Duration::ZERO;
            let _ = writer.flush().await;
        } else {
            idle += FOLLOW_POLL;
            if idle >= HEARTBEAT {
                idle = Duration::ZERO;
                if writer.write_all(b"{}").await.is_err() {
                    return Ok(());
                }
                let _ = writer.flush().await;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = reader.read(&mut probe) => return Ok(()),
        }
    }
    let _ = writer.shutdown().await;
    Ok(())
}

/// `logs`: `Task`, `Type` (stdout|stderr), `Follow`, `Offset`, `Origin` (start|end), `Plain`.
async fn logs<IO: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    root: &Path,
    call: &ClientCall,
    io: &mut IO,
) -> Result<(), Refusal> {
    let task = param_str(call, "Task");
    if task.is_empty() {
        return Err(Refusal::bad_request("must provide task name"));
    }
    let known = shared
        .state
        .load_alloc(&call.alloc_id)
        .is_some_and(|record| {
            record
                .alloc
                .job
                .as_ref()
                .and_then(|job| job.task_group(&record.alloc.task_group))
                .is_some_and(|group| group.tasks.iter().any(|t| t.name == task))
        });
    if !known || !is_safe_component(task) {
        return Err(Refusal::bad_request(format!("unknown task name {task:?}")));
    }
    let kind = param_str(call, "Type");
    if kind != "stdout" && kind != "stderr" {
        return Err(Refusal::bad_request(format!(
            "must provide log type (stdout/stderr), got {kind:?}"
        )));
    }
    let origin = match param_str(call, "Origin") {
        "" | "start" => false,
        "end" => true,
        other => return Err(Refusal::bad_request(format!("Unknown origin {other:?}"))),
    };
    let offset = param_i64(call, "Offset", 0)?;
    if offset < 0 {
        return Err(Refusal::bad_request("offset must be non-negative"));
    }
    let follow = param_bool(call, "Follow");
    let plain = param_bool(call, "Plain");
    let relative = format!("alloc/logs/{task}.{kind}.0");
    let path = root.join(&relative);

    let content_type = if plain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    if write_head(io, 200, "", content_type).await.is_err() {
        return Ok(());
    }
    let (mut reader, mut writer) = tokio::io::split(io);
    let offset = u64::try_from(offset).unwrap_or(0);
    let mut position = None;
    let mut buffer = vec![0_u8; CHUNK];
    let mut idle = Duration::ZERO;
    let mut probe = [0_u8; 1];
    loop {
        // The file may not exist yet (a task that has not started).
        if position.is_none()
            && let Ok(metadata) = tokio::fs::metadata(&path).await
        {
            let len = metadata.len();
            position = Some(if origin {
                len.saturating_sub(offset)
            } else {
                offset.min(len)
            });
        }
        let mut read_any = false;
        if let Some(at) = position.as_mut()
            && let Ok(mut file) = tokio::fs::File::open(&path).await
            && file.seek(std::io::SeekFrom::Start(*at)).await.is_ok()
        {
            loop {
                let n = match file.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                read_any = true;
                *at += n as u64;
                let sent = if plain {
                    writer.write_all(&buffer[..n]).await
                } else {
                    let frame = Frame {
                        offset: *at,
                        data: base64::engine::general_purpose::STANDARD.encode(&buffer[..n]),
                        file: &relative,
                    };
                    let bytes = serde_json::to_vec(&frame).unwrap_or_default();
                    writer.write_all(&bytes).await
                };
                if sent.is_err() {
                    return Ok(());
                }
            }
        }
        if !follow || (!read_any && !shared.controls.is_live(&call.alloc_id)) {
            break;
        }
        if read_any {
            idle = Duration::ZERO;
            let _ = writer.flush().await;
        } else {
            idle += FOLLOW_POLL;
            if !plain && idle >= HEARTBEAT {
                idle = Duration::ZERO;
                if writer.write_all(b"{}").await.is_err() {
                    return Ok(());
                }
                let _ = writer.flush().await;
            }
        }
        // The server closes the tunnel when the HTTP client goes away.
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = reader.read(&mut probe) => return Ok(()),
        }
    }
    let _ = writer.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_allocation_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("alloc-1");
        std::fs::create_dir_all(root.join("alloc/logs")).unwrap();
        assert_eq!(resolve(&root, "/").unwrap(), root);
        assert_eq!(
            resolve(&root, "/alloc/logs").unwrap(),
            root.join("alloc/logs")
        );
        assert_eq!(
            resolve(&root, "alloc/./logs").unwrap(),
            root.join("alloc/logs")
        );
        for escape in ["..", "/../x", "alloc/../../etc", "alloc/.."] {
            assert_eq!(resolve(&root, escape).unwrap_err().status, 400, "{escape}");
        }
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        assert_eq!(resolve(&root, "/out/passwd").unwrap_err().status, 400);
    }

    #[test]
    fn file_modes_read_as_go_prints_them() {
        let dir = tempfile::tempdir().unwrap();
        let metadata = std::fs::metadata(dir.path()).unwrap();
        assert_eq!(go_file_mode(metadata.file_type(), 0o755), "drwxr-xr-x");
        let file = dir.path().join("f");
        std::fs::write(&file, "hi").unwrap();
        let metadata = std::fs::metadata(&file).unwrap();
        assert_eq!(go_file_mode(metadata.file_type(), 0o640), "-rw-r-----");
        assert_eq!(content_type(&file), "text/plain; charset=utf-8");
        std::fs::write(&file, [0_u8, 159, 146, 150]).unwrap();
        assert_eq!(content_type(&file), "application/octet-stream");
    }
}
