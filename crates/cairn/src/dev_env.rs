//! The environment lines `cairn dev` prints after `ready`, so upstream tools and clients find
//! it with no flags: `VAULT_ADDR`/`VAULT_TOKEN`, `CONSUL_HTTP_ADDR` (and `CONSUL_HTTP_TOKEN`
//! with ACLs on), `NOMAD_ADDR` (and `NOMAD_TOKEN` with ACLs on), `TFE_ADDRESS`/`TFE_TOKEN`.
//!
//! The same lines go to a state file (mode 0600: it holds the root token), which
//! `cairn dev --env` prints, so `eval "$(cairn dev --env)"` works from another shell: the data
//! dir's `dev.env`, and a per-user file ([`user_file`]) for a dev server on a temporary data dir.
//!
//! Invariants: every value is single-quoted for the shell (a token cannot break out of its
//! line); a state file is written whole (write to a temporary file, then rename) and removed at
//! exit only if it still holds this server's lines (another dev server may have replaced it).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The state file's name inside a data dir.
pub(crate) const FILE_NAME: &str = "dev.env";

/// What the lines are made of.
#[derive(Debug)]
pub(crate) struct DevEnv<'a> {
    /// Each service's name (`secrets`, `registry`, `scheduler`, `platform`) and base URL
    /// (`http://127.0.0.1:8200`).
    pub(crate) urls: &'a [(&'static str, String)],
    /// The root token, every service's bootstrap token.
    pub(crate) token: &'a str,
    /// Whether the registry and the scheduler enforce ACLs (their token lines only then).
    pub(crate) acl: bool,
}

/// The `export NAME='value'` lines, one per variable, each ending in a newline.
pub(crate) fn render(env: &DevEnv<'_>) -> String {
    let mut out = String::new();
    let mut line = |name: &str, value: &str| {
        let _ = writeln!(out, "export {name}={}", shell_quote(value));
    };
    for (service, url) in env.urls {
        match *service {
            "secrets" => {
                line("VAULT_ADDR", url);
                line("VAULT_TOKEN", env.token);
            }
            "registry" => {
                // Consul's tools and py-consul take `host:port` here.
                line("CONSUL_HTTP_ADDR", host_port(url));
                if env.acl {
                    line("CONSUL_HTTP_TOKEN", env.token);
                }
            }
            "scheduler" => {
                line("NOMAD_ADDR", url);
                if env.acl {
                    line("NOMAD_TOKEN", env.token);
                }
            }
            "platform" => {
                line("TFE_ADDRESS", url);
                line("TFE_TOKEN", env.token);
            }
            _ => {}
        }
    }
    out
}

/// `http://127.0.0.1:8500` → `127.0.0.1:8500`.
fn host_port(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// `'value'`, with every `'` written as `'\''`.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// The per-user state file: `$CAIRN_DEV_ENV_FILE` if set, else `cairn-dev.env` in
/// `$XDG_RUNTIME_DIR`, else `.cairn-dev.env` in `$HOME`; `None` if none of them is set.
pub(crate) fn user_file() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(path) = var("CAIRN_DEV_ENV_FILE") {
        return Some(PathBuf::from(path));
    }
    if let Some(dir) = var("XDG_RUNTIME_DIR") {
        return Some(Path::new(&dir).join("cairn-dev.env"));
    }
    var("HOME").map(|home| Path::new(&home).join(".cairn-dev.env"))
}

/// Writes `lines` to every file (mode 0600), logging rather than failing: the server runs
/// without them.
pub(crate) fn write(files: &[PathBuf], lines: &str) {
    for file in files {
        if let Err(err) = write_private(file, lines) {
            tracing::warn!(file = %file.display(), error = %err, "cannot write the dev environment file");
        }
    }
}

fn write_private(file: &Path, lines: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temporary = file.with_extension(format!("tmp.{}", std::process::id()));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    out.write_all(lines.as_bytes())?;
    out.sync_all()?;
    std::fs::rename(&temporary, file)
}

/// Removes each file that still holds `lines`.
pub(crate) fn remove(files: &[PathBuf], lines: &str) {
    for file in files {
        if std::fs::read_to_string(file).is_ok_and(|held| held == lines) {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// What `cairn dev --env` prints: the state file of `data_dir` if given, else the per-user one.
pub(crate) fn read(data_dir: Option<&Path>) -> Result<String, String> {
    let file = match data_dir {
        Some(dir) => dir.join(FILE_NAME),
        None => user_file().ok_or_else(|| {
            "no place for the dev environment file: set CAIRN_DEV_ENV_FILE, XDG_RUNTIME_DIR or HOME"
                .to_owned()
        })?,
    };
    std::fs::read_to_string(&file).map_err(|err| {
        format!(
            "no running `cairn dev` found ({}: {err}); start one, or pass its --data-dir",
            file.display()
        )
    })
}

/// The addresses of a running dev server's services, for tests: parsed back from the lines.
#[cfg(test)]
fn parse(lines: &str) -> Vec<(String, String)> {
    lines
        .lines()
        .filter_map(|line| line.strip_prefix("export "))
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.trim_matches('\'').to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls() -> Vec<(&'static str, String)> {
        vec![
            ("secrets", "http://127.0.0.1:8200".to_owned()),
            ("registry", "http://127.0.0.1:8500".to_owned()),
            ("scheduler", "http://127.0.0.1:4646".to_owned()),
            ("platform", "http://127.0.0.1:8080".to_owned()),
        ]
    }

    #[test]
    fn without_acl_only_vault_and_tfe_get_a_token() {
        let urls = urls();
        let lines = render(&DevEnv {
            urls: &urls,
            token: "s.root",
            acl: false,
        });
        assert_eq!(
            parse(&lines),
            [
                ("VAULT_ADDR", "http://127.0.0.1:8200"),
                ("VAULT_TOKEN", "s.root"),
                ("CONSUL_HTTP_ADDR", "127.0.0.1:8500"),
                ("NOMAD_ADDR", "http://127.0.0.1:4646"),
                ("TFE_ADDRESS", "http://127.0.0.1:8080"),
                ("TFE_TOKEN", "s.root"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn with_acl_consul_and_nomad_get_the_root_token() {
        let urls = urls();
        let lines = render(&DevEnv {
            urls: &urls,
            token: "s.root",
            acl: true,
        });
        assert!(
            lines.contains("export CONSUL_HTTP_TOKEN='s.root'\n"),
            "{lines}"
        );
        assert!(lines.contains("export NOMAD_TOKEN='s.root'\n"), "{lines}");
    }

    #[test]
    fn values_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("a'b $x"), r"'a'\''b $x'");
    }

    #[test]
    fn the_state_file_is_private_and_removed_only_while_it_is_ours() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub").join(FILE_NAME);
        write(std::slice::from_ref(&file), "export A='1'\n");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            read(Some(&dir.path().join("sub"))).unwrap(),
            "export A='1'\n"
        );
        remove(std::slice::from_ref(&file), "export B='2'\n");
        assert!(file.exists(), "another server's lines stay");
        remove(std::slice::from_ref(&file), "export A='1'\n");
        assert!(!file.exists());
        assert!(
            read(Some(dir.path()))
                .unwrap_err()
                .contains("no running `cairn dev`")
        );
    }
}
