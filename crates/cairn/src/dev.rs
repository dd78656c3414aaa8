//! `cairn dev`: all four services on 127.0.0.1, an embedded store in a temporary (or given)
//! directory, and one bootstrap token; the registry and the scheduler open unless `--acl`, as
//! upstream's dev agents. `cairn dev --env` prints a running dev server's environment lines.
//!
//! Invariant: a temporary data dir lives exactly as long as the process's run and is removed
//! after the store has closed; a `--data-dir` is never removed.

use rand::Rng;
use rand::distr::Alphanumeric;

use crate::cli::DevArgs;
use crate::wiring::{self, DataDir, Error, Listen, Plan, PlatformEncryption, ServiceKind};

pub(crate) async fn run(args: DevArgs) -> Result<(), Error> {
    if args.env {
        let lines = crate::dev_env::read(args.data_dir.as_deref()).map_err(Error::DevEnv)?;
        crate::println_stdout(lines.trim_end());
        return Ok(());
    }
    http_kit::init_tracing(args.log.log_format, &args.log.log_level);
    let platform_encryption = match (args.platform_encryption_password, &args.data_dir) {
        (Some(password), _) if password.is_empty() => {
            return Err(Error::Config(
                "--platform-encryption-password must not be empty".to_owned(),
            ));
        }
        (Some(password), _) => PlatformEncryption::Password(password),
        (None, Some(_)) => PlatformEncryption::DevFile,
        (None, None) => PlatformEncryption::RandomPerRun,
    };
    let platform_public_registry =
        crate::config::check_registry_url(&args.platform_public_registry)?;
    let data_dir = match args.data_dir {
        Some(path) => DataDir::Kept(path),
        None => DataDir::Temporary(
            tempfile::Builder::new()
                .prefix("cairn-dev-")
                .tempdir()
                .map_err(Error::DataDir)?,
        ),
    };
    let root_token = args.root_token.unwrap_or_else(random_token);
    if root_token.trim().is_empty() {
        return Err(Error::InvalidRootToken);
    }
    let listen = |kind, addr| Listen {
        kind,
        addr,
        tls: None,
        registry_acl: None,
        scheduler_acl: None,
        advertise: None,
    };
    let dev_env_files = std::iter::once(data_dir.path().join(crate::dev_env::FILE_NAME))
        .chain(crate::dev_env::user_file())
        .collect();
    let plan = Plan {
        mode: "dev",
        data_dir,
        services: vec![
            listen(ServiceKind::Secrets, args.secrets_addr),
            listen(ServiceKind::Registry, args.registry_addr),
            listen(ServiceKind::Scheduler, args.scheduler_addr),
            listen(ServiceKind::Platform, args.platform_addr),
        ],
        dev_root_token: Some(root_token),
        dev_acl: args.acl,
        dev_env_files,
        platform_rate_limiting: args.platform_rate_limiting,
        platform_public_registry,
        platform_encryption,
        scheduler_client: true,
        storage: wiring::StorageChoice::Embedded,
        blobs: wiring::BlobPlace::DataDir,
    };
    wiring::run(plan).await
}

/// A Vault-style service token: `s.` and 24 random alphanumerics.
fn random_token() -> String {
    let suffix: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(24)
        .map(char::from)
        .collect();
    format!("s.{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tokens_are_distinct_and_shaped() {
        let (a, b) = (random_token(), random_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 26);
        assert!(a.starts_with("s."));
    }
}
