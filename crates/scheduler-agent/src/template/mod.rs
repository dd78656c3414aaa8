//! Task templates and the task's secrets-store token (Nomad's template and vault hooks):
//! `template` blocks rendered into the task's directories before it starts and re-rendered
//! while it runs, with functions reading the secrets store.
//!
//! Parts: `parse.rs` and `eval.rs` (the template language, a subset of Go's `text/template`
//! with consul-template's functions), `client.rs` (the secrets store over HTTP), `manager.rs`
//! (the per-task loop: token, first render, refreshes and renewals, change notices). This file
//! holds the decoded `template` and `vault` blocks, the agent-level settings and the
//! `KEY=VALUE` reader of `env = true` templates.
//!
//! Invariants: a destination or source never resolves outside the task's directory or the
//! allocation's shared `alloc/` (checked lexically and again after symlinks); bad blocks are
//! errors naming the template, never panics.

pub(crate) mod client;
pub(crate) mod eval;
pub(crate) mod manager;
pub(crate) mod parse;

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use scheduler_structs::Task;
use serde_json::Value;

use crate::state::TaskDirs;

/// The agent's template settings (Nomad client's `template` and `vault` blocks).
#[derive(Debug, Clone)]
pub struct TemplateSettings {
    /// The secrets store's base URL (e.g. `http://127.0.0.1:8200`); `None`: templates cannot
    /// call `secret` and tasks with a `vault` block fail.
    pub secrets_url: Option<String>,
    /// The token the agent derives task tokens from when the job carries none (the Nomad
    /// server's own Vault token in the legacy flow; `cairn dev`: its root token).
    pub secrets_token: Option<String>,
    /// How often a secret without a lease is read again (consul-template's default lease
    /// duration, 5 minutes).
    pub refresh_interval: Duration,
    /// Failed fetches before a template fails (Nomad's `vault_retry`: 12 attempts).
    pub retry_attempts: u32,
    /// The first retry's backoff, doubled each time (250 ms) up to `retry_max_backoff` (1 m).
    pub retry_backoff: Duration,
    pub retry_max_backoff: Duration,
}

impl Default for TemplateSettings {
    fn default() -> Self {
        TemplateSettings {
            secrets_url: None,
            secrets_token: None,
            refresh_interval: Duration::from_secs(300),
            retry_attempts: 12,
            retry_backoff: Duration::from_millis(250),
            retry_max_backoff: Duration::from_secs(60),
        }
    }
}

impl TemplateSettings {
    /// Sets `refresh_interval` from a Go duration (at least 100 ms).
    pub fn set_refresh_interval(&mut self, text: &str) -> Result<(), String> {
        let interval = stdx::duration::parse_go(text.trim()).map_err(|err| err.go_message())?;
        self.refresh_interval = interval.max(Duration::from_millis(100));
        Ok(())
    }
}

/// What a template does when its content changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChangeMode {
    Restart,
    Signal(String),
    Noop,
}

/// One decoded `template` block.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TemplateSpec {
    /// `EmbeddedTmpl` (`data`).
    pub(crate) data: String,
    /// `SourcePath` (`source`), relative to the task directory.
    pub(crate) source: String,
    /// `DestPath` (`destination`).
    pub(crate) dest: String,
    pub(crate) change_mode: ChangeMode,
    /// `Envvars` (`env`): the rendered file is read as `KEY=VALUE` lines into the task's env.
    pub(crate) env: bool,
    pub(crate) perms: u32,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) left_delim: String,
    pub(crate) right_delim: String,
    pub(crate) splay: Duration,
    pub(crate) error_on_missing_key: bool,
    /// `Once`: rendered once, never re-rendered.
    pub(crate) once: bool,
}

impl TemplateSpec {
    /// Decodes a task's `Templates` entry (upstream's JSON names).
    pub(crate) fn decode(index: usize, value: &Value) -> Result<TemplateSpec, String> {
        let text = |key: &str| value[key].as_str().unwrap_or_default().to_owned();
        let flag = |key: &str| value[key].as_bool().unwrap_or(false);
        let id = |key: &str| {
            value[key]
                .as_i64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n != u32::MAX)
        };
        let name = format!("template {}", index + 1);
        let change_mode = match text("ChangeMode").as_str() {
            "" | "restart" => ChangeMode::Restart,
            "noop" => ChangeMode::Noop,
            "signal" => {
                let signal = text("ChangeSignal");
                if crate::driver::parse_signal(&signal).is_none() {
                    return Err(format!("{name}: invalid change_signal {signal:?}"));
                }
                ChangeMode::Signal(signal)
            }
            "script" => {
                return Err(format!(
                    "{name}: change_mode \"script\" is not supported by this client"
                ));
            }
            other => return Err(format!("{name}: invalid change_mode {other:?}")),
        };
        let perms_text = text("Perms");
        let perms = if perms_text.is_empty() {
            0o644
        } else {
            u32::from_str_radix(perms_text.trim_start_matches("0o"), 8)
                .ok()
                .filter(|perms| *perms <= 0o7777)
                .ok_or_else(|| format!("{name}: invalid perms {perms_text:?}"))?
        };
        let spec = TemplateSpec {
            data: text("EmbeddedTmpl"),
            source: text("SourcePath"),
            dest: text("DestPath"),
            change_mode,
            env: flag("Envvars"),
            perms,
            uid: id("Uid"),
            gid: id("Gid"),
            left_delim: text("LeftDelim"),
            right_delim: text("RightDelim"),
            splay: Duration::from_nanos(value["Splay"].as_u64().unwrap_or(0)),
            error_on_missing_key: flag("ErrMissingKey"),
            once: flag("Once"),
        };
        if spec.dest.is_empty() {
            return Err(format!("{name}: must specify a destination"));
        }
        if spec.data.is_empty() && spec.source.is_empty() {
            return Err(format!(
                "{name}: must specify a source path or have embedded data"
            ));
        }
        Ok(spec)
    }
}

/// The task's `vault` block.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VaultSpec {
    pub(crate) policies: Vec<String>,
    /// Set `VAULT_TOKEN` in the task's environment (default true).
    pub(crate) env: bool,
    /// Do not write `secrets/vault_token`.
    pub(crate) disable_file: bool,
}

impl VaultSpec {
    pub(crate) fn decode(value: &Value) -> VaultSpec {
        VaultSpec {
            policies: value["Policies"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .filter_map(|p| p.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            env: value["Env"].as_bool().unwrap_or(true),
            disable_file: value["DisableFile"].as_bool().unwrap_or(false),
        }
    }
}

/// A task's decoded `template` blocks and `vault` block.
pub(crate) type TaskSpecs = (Vec<TemplateSpec>, Option<VaultSpec>);

/// The task's templates and vault block, or `None` when it has neither.
pub(crate) fn task_specs(task: &Task) -> Option<Result<TaskSpecs, String>> {
    let vault = task
        .vault
        .as_ref()
        .filter(|v| v.is_object())
        .map(VaultSpec::decode);
    if task.templates.is_empty() && vault.is_none() {
        return None;
    }
    let specs = task
        .templates
        .iter()
        .enumerate()
        .map(|(index, value)| TemplateSpec::decode(index, value))
        .collect::<Result<Vec<_>, _>>();
    Some(specs.map(|specs| (specs, vault)))
}

/// Resolves a template path (relative to the task directory; `alloc/...` is the allocation's
/// shared directory) without leaving the task directory or the shared one.
pub(crate) fn resolve(dirs: &TaskDirs, path: &str) -> Result<PathBuf, String> {
    let mut parts: Vec<String> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(format!("{path:?} escapes the task directory"));
                }
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let Some(first) = parts.first() else {
        return Err(format!("{path:?} names no file"));
    };
    let (base, rest) = if first == "alloc" {
        (dirs.shared.clone(), &parts[1..])
    } else {
        (dirs.task_dir.clone(), &parts[..])
    };
    if rest.is_empty() {
        return Err(format!("{path:?} names a directory"));
    }
    let mut resolved = base.clone();
    for part in rest {
        resolved.push(part);
    }
    // Symlinks: the deepest existing ancestor must stay under the base.
    let mut existing = resolved.parent().map(Path::to_path_buf);
    while let Some(dir) = existing.clone() {
        if dir.exists() {
            break;
        }
        existing = dir.parent().map(Path::to_path_buf);
    }
    if let (Some(dir), Ok(real_base)) = (existing, base.canonicalize())
        && let Ok(real) = dir.canonicalize()
        && !real.starts_with(&real_base)
    {
        return Err(format!("{path:?} escapes the task directory"));
    }
    Ok(resolved)
}

/// The uid and gid of `user` (a name or a numeric uid) from `/etc/passwd`.
pub(crate) fn lookup_user(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let (name, uid, gid) = (fields.first()?, fields.get(2)?, fields.get(3)?);
        (*name == user || *uid == user).then(|| Some((uid.parse().ok()?, gid.parse().ok()?)))?
    })
}

/// Reads `KEY=VALUE` lines as go-envparse does: blank lines and `#` comments skipped, an
/// optional `export ` prefix, values bare (trailing ` #` comments dropped), `'single'`
/// (literal) or `"double"` quoted (with `\n`, `\t`, `\"`, `\\` escapes).
pub(crate) fn parse_env(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut vars = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: missing =", index + 1));
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(format!("line {}: invalid key {key:?}", index + 1));
        }
        let value = value.trim();
        let value = if let Some(rest) = value.strip_prefix('\'') {
            rest.strip_suffix('\'')
                .ok_or_else(|| format!("line {}: unterminated quote", index + 1))?
                .to_owned()
        } else if let Some(rest) = value.strip_prefix('"') {
            let inner = rest
                .strip_suffix('"')
                .ok_or_else(|| format!("line {}: unterminated quote", index + 1))?;
            let mut out = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    match chars.next() {
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some('r') => out.push('\r'),
                        Some(other) => out.push(other),
                        None => out.push('\\'),
                    }
                } else {
                    out.push(c);
                }
            }
            out
        } else {
            match value.find(" #") {
                Some(at) => value[..at].trim_end().to_owned(),
                None => value.to_owned(),
            }
        };
        vars.insert(key.to_owned(), value);
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::state::StateDir;

    #[test]
    fn template_blocks_decode_with_upstream_defaults_and_checks() {
        let spec = TemplateSpec::decode(
            0,
            &json!({"EmbeddedTmpl": "x", "DestPath": "local/a", "ChangeMode": "signal",
                    "ChangeSignal": "SIGUSR1", "Perms": "0600", "Envvars": true, "Splay": 0}),
        )
        .unwrap();
        assert_eq!(spec.change_mode, ChangeMode::Signal("SIGUSR1".to_owned()));
        assert_eq!(spec.perms, 0o600);
        assert!(spec.env);
        let error = TemplateSpec::decode(
            1,
            &json!({"EmbeddedTmpl": "x", "DestPath": "a", "ChangeMode": "script"}),
        )
        .unwrap_err();
        assert_eq!(
            error,
            "template 2: change_mode \"script\" is not supported by this client"
        );
        assert!(TemplateSpec::decode(0, &json!({"EmbeddedTmpl": "x"})).is_err());
        assert!(TemplateSpec::decode(0, &json!({"DestPath": "a"})).is_err());
        assert!(
            TemplateSpec::decode(
                0,
                &json!({"EmbeddedTmpl": "x", "DestPath": "a", "Perms": "999"})
            )
            .is_err()
        );
    }

    #[test]
    fn destinations_stay_inside_the_task_and_shared_directories() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = StateDir::new(dir.path().to_path_buf()).task_dirs("a1", "web");
        dirs.build().unwrap();
        assert_eq!(
            resolve(&dirs, "local/app.conf").unwrap(),
            dirs.local.join("app.conf")
        );
        assert_eq!(
            resolve(&dirs, "/secrets/x").unwrap(),
            dirs.secrets.join("x")
        );
        assert_eq!(
            resolve(&dirs, "alloc/data/x").unwrap(),
            dirs.shared.join("data/x")
        );
        assert!(resolve(&dirs, "../other/secrets/x").is_err());
        assert!(resolve(&dirs, "local/../../x").is_err());
        assert!(resolve(&dirs, "local/..").is_err());
        std::os::unix::fs::symlink("/etc", dirs.local.join("out")).unwrap();
        assert!(resolve(&dirs, "local/out/passwd").is_err());
    }

    #[test]
    fn users_resolve_by_name_or_uid() {
        assert_eq!(lookup_user("root"), Some((0, 0)));
        assert_eq!(lookup_user("0"), Some((0, 0)));
        assert_eq!(lookup_user("no-such-user-here"), None);
    }

    #[test]
    fn env_files_parse_as_go_envparse_does() {
        let vars = parse_env(
            "# comment\nA=1\nexport B = two \nC='lit $x'\nD=\"q\\\"\\n\"\nE=bare # note\n\n",
        )
        .unwrap();
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "two");
        assert_eq!(vars["C"], "lit $x");
        assert_eq!(vars["D"], "q\"\n");
        assert_eq!(vars["E"], "bare");
        assert!(parse_env("NOEQUALS").is_err());
        assert!(parse_env("BAD KEY=1").is_err());
        assert!(parse_env("A=\"open").is_err());
    }
}
