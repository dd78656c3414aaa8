//! `cairn server --config FILE`: the HCL configuration file and how it becomes a [`Plan`].
//!
//! ```hcl
//! data_dir = "/var/lib/cairn"
//!
//! secrets {
//!   address = "0.0.0.0:8200"
//!   tls {
//!     cert_file = "/etc/cairn/tls.crt"
//!     key_file  = "/etc/cairn/tls.key"
//!     ca_file   = "/etc/cairn/ca.crt"  # several servers: the CA the others' certificates
//!   }                                  # are verified against when forwarding to the leader
//! }
//! registry {}                       # upstream default address 127.0.0.1:8500
//! scheduler {
//!   acl { enabled = false }         # ACLs are on unless a block turns them off
//! }
//! ```
//!
//! Several servers over etcd (docs/running-several-servers.md) add a `storage "etcd" { ... }`
//! block and, when the platform runs, a shared place for its blobs (configuration archives,
//! module tarballs), which are never kept in the store:
//!
//! ```hcl
//! object_store "s3" {               # or: object_store "dir" { path = "/mnt/shared/blobs" }
//!   bucket            = "cairn-blobs"
//!   endpoint          = "https://minio.internal:9000"   # optional (default: AWS)
//!   region            = "us-east-1"                     # optional
//!   access_key_id     = "..."       # optional, with secret_access_key (else AWS_* variables)
//!   secret_access_key = "..."
//!   prefix            = "cairn/"    # optional
//! }
//! ```
//!
//! Without an `object_store` block blobs stay in `<data_dir>/blobs`; with `storage "etcd"` and
//! the platform enabled that is refused (another server could not read them).
//!
//! The platform block also takes `public_registry` (the upstream of its public registry proxy)
//! and `encryption_password` (required for the platform, or CAIRN_PLATFORM_ENCRYPTION_PASSWORD:
//! its stored credentials are encrypted under it).
//!
//! A service runs when its block is present and `enabled` is not false. The registry and the
//! scheduler enforce ACLs unless their `acl` block says `enabled = false` (the registry's block
//! also takes `initial_management_token` and `default_policy`); with no initial token, an
//! operator bootstraps one through the upstream bootstrap API. Invariants: unknown keys are
//! errors (a typo never silently disables TLS or ACLs); at least one service runs; no two
//! enabled services share an address.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cli::ServerArgs;
use crate::wiring::{
    self, DataDir, Error, Listen, Plan, PlatformEncryption, ServiceKind, TlsFiles,
};

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerConfig {
    pub(crate) data_dir: PathBuf,
    #[serde(default)]
    pub(crate) secrets: Option<ServiceBlock>,
    #[serde(default)]
    pub(crate) registry: Option<ServiceBlock>,
    #[serde(default)]
    pub(crate) scheduler: Option<ServiceBlock>,
    #[serde(default)]
    pub(crate) platform: Option<ServiceBlock>,
    /// `storage "etcd" { ... }`: the store on etcd, for several servers (absent: the embedded
    /// store in `data_dir`).
    #[serde(default)]
    pub(crate) storage: Option<StorageBlocks>,
    /// `object_store "s3" { ... }` or `object_store "dir" { path }`: where the platform's blobs
    /// live (absent: `<data_dir>/blobs`).
    #[serde(default)]
    pub(crate) object_store: Option<ObjectStoreBlocks>,
}

/// The labelled `object_store` blocks; at most one may be given.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ObjectStoreBlocks {
    #[serde(default)]
    pub(crate) s3: Option<S3Block>,
    #[serde(default)]
    pub(crate) dir: Option<DirBlock>,
}

/// `object_store "s3"`: an S3-compatible bucket.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct S3Block {
    pub(crate) bucket: String,
    #[serde(default)]
    pub(crate) endpoint: Option<String>,
    #[serde(default)]
    pub(crate) region: Option<String>,
    #[serde(default)]
    pub(crate) access_key_id: Option<String>,
    #[serde(default)]
    pub(crate) secret_access_key: Option<String>,
    #[serde(default)]
    pub(crate) prefix: Option<String>,
}

/// `object_store "dir"`: a directory (shared by every server when there are several).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct DirBlock {
    pub(crate) path: PathBuf,
}

/// The labelled `storage` blocks; only `etcd` exists (the embedded store needs no block).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct StorageBlocks {
    #[serde(default)]
    pub(crate) etcd: Option<storage_etcd::EtcdBlock>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServiceBlock {
    #[serde(default = "enabled_by_default")]
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) address: Option<SocketAddr>,
    #[serde(default)]
    pub(crate) tls: Option<TlsBlock>,
    /// The URL other servers and clients reach this service at (`http(s)://host:port`; Vault's
    /// `api_addr`); absent: the bound address (a wildcard bind as loopback).
    #[serde(default)]
    pub(crate) advertise: Option<String>,
    /// Registry: `acl { enabled = true  initial_management_token = "..."  default_policy = "deny" }`;
    /// scheduler: `acl { enabled = true }`. Both default to enabled.
    #[serde(default)]
    pub(crate) acl: Option<AclBlock>,
    /// Platform only: the upstream of `/api/registry/public/v1` (default the public Terraform
    /// registry).
    #[serde(default)]
    pub(crate) public_registry: Option<String>,
    /// Platform only (required there, or CAIRN_PLATFORM_ENCRYPTION_PASSWORD): the password
    /// the platform's stored credentials are encrypted under (TFE's `encryption_password`).
    #[serde(default)]
    pub(crate) encryption_password: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct AclBlock {
    #[serde(default = "enabled_by_default")]
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) initial_management_token: Option<String>,
    /// `allow` or `deny` (the default): what a request without a token may do.
    #[serde(default)]
    pub(crate) default_policy: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsBlock {
    pub(crate) cert_file: PathBuf,
    pub(crate) key_file: PathBuf,
    /// The CA that signed the other servers' certificates for this service (Nomad's
    /// `ca_file`): with several servers, a server forwarding to the leader (the scheduler's
    /// writes, `sys/step-down` on a standby) verifies the leader's certificate against it.
    #[serde(default)]
    pub(crate) ca_file: Option<PathBuf>,
}

fn enabled_by_default() -> bool {
    true
}

pub(crate) async fn run_server(args: ServerArgs) -> Result<(), Error> {
    http_kit::init_tracing(args.log.log_format, &args.log.log_level);
    let plan = load(&args.config)?;
    wiring::run(plan).await
}

/// Reads and validates a configuration file. Relative paths inside it are relative to the file.
pub(crate) fn load(path: &Path) -> Result<Plan, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| Error::Config(format!("cannot read {}: {err}", path.display())))?;
    let config: ServerConfig =
        hcl::from_str(&text).map_err(|err| Error::Config(format!("{}: {err}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let env_password = std::env::var("CAIRN_PLATFORM_ENCRYPTION_PASSWORD").ok();
    plan_from(config, base, env_password)
}

/// `url` when it is an absolute http(s) URL (the public registry proxy's upstream).
pub(crate) fn check_registry_url(url: &str) -> Result<String, Error> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => {
            Ok(url.trim_end_matches('/').to_owned())
        }
        _ => Err(Error::Config(format!(
            "platform public registry: {url:?} is not an absolute http or https URL"
        ))),
    }
}

/// A service's `advertise` URL: `http(s)://host:port`, nothing after the port.
fn check_advertise(kind: ServiceKind, url: &str) -> Result<String, Error> {
    let url = url.trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let valid = rest.is_some_and(|rest| {
        rest.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        })
    });
    if valid {
        Ok(url.to_owned())
    } else {
        Err(Error::Config(format!(
            "{}: advertise must be http://host:port or https://host:port, not {url:?}",
            kind.name()
        )))
    }
}

/// `env_password`: CAIRN_PLATFORM_ENCRYPTION_PASSWORD, used when the platform block sets none.
fn plan_from(
    config: ServerConfig,
    base: &Path,
    env_password: Option<String>,
) -> Result<Plan, Error> {
    let resolve = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
    let blocks = [
        (ServiceKind::Secrets, config.secrets),
        (ServiceKind::Registry, config.registry),
        (ServiceKind::Scheduler, config.scheduler),
        (ServiceKind::Platform, config.platform),
    ];
    let mut services = Vec::new();
    let mut platform_public_registry = platform::DEFAULT_PUBLIC_REGISTRY.to_owned();
    let mut platform_password = None;
    for (kind, block) in blocks {
        let Some(block) = block.filter(|b| b.enabled) else {
            continue;
        };
        let addr = block.address.unwrap_or_else(|| kind.default_addr());
        if let Some(other) = services
            .iter()
            .find(|s: &&Listen| s.addr == addr && addr.port() != 0)
        {
            return Err(Error::Config(format!(
                "{} and {} both listen on {addr}",
                other.kind.name(),
                kind.name()
            )));
        }
        if kind == ServiceKind::Platform {
            if let Some(url) = &block.public_registry {
                platform_public_registry = check_registry_url(url)?;
            }
            let password = block.encryption_password.clone().or(env_password.clone());
            match password {
                Some(password) if !password.is_empty() => platform_password = Some(password),
                _ => {
                    return Err(Error::Config(
                        "platform: encryption_password is required (the stored credentials are \
                         encrypted under it), or set CAIRN_PLATFORM_ENCRYPTION_PASSWORD"
                            .to_owned(),
                    ));
                }
            }
        } else if block.public_registry.is_some() || block.encryption_password.is_some() {
            return Err(Error::Config(format!(
                "{}: public_registry and encryption_password belong in the platform block",
                kind.name()
            )));
        }
        let tls = block.tls.map(|tls| TlsFiles {
            cert_file: resolve(tls.cert_file),
            key_file: resolve(tls.key_file),
            ca_file: tls.ca_file.map(&resolve),
        });
        let (registry_acl, scheduler_acl) = match (kind, block.acl) {
            (_, None) => (None, None),
            (ServiceKind::Registry, Some(acl)) => (Some(registry_acl(acl)?), None),
            (ServiceKind::Scheduler, Some(acl)) => (None, Some(scheduler_acl(acl)?)),
            (other, Some(_)) => {
                return Err(Error::Config(format!(
                    "{}: acl blocks are only supported for the registry and the scheduler",
                    other.name()
                )));
            }
        };
        let advertise = match &block.advertise {
            None => None,
            Some(url) => Some(check_advertise(kind, url)?),
        };
        services.push(Listen {
            kind,
            addr,
            tls,
            registry_acl,
            scheduler_acl,
            advertise,
        });
    }
    if services.is_empty() {
        return Err(Error::Config(
            "no service is enabled: add a secrets, registry, scheduler or platform block"
                .to_owned(),
        ));
    }
    let platform_runs = services.iter().any(|s| s.kind == ServiceKind::Platform);
    let on_etcd = config.storage.as_ref().is_some_and(|b| b.etcd.is_some());
    let blobs = blob_place(config.object_store, &resolve, on_etcd && platform_runs)?;
    let storage = match config.storage.and_then(|blocks| blocks.etcd) {
        None => wiring::StorageChoice::Embedded,
        Some(block) => wiring::StorageChoice::Etcd(block.into_config(base).map_err(Error::Config)?),
    };
    Ok(Plan {
        storage,
        blobs,
        mode: "server",
        data_dir: DataDir::Kept(resolve(config.data_dir)),
        services,
        dev_root_token: None,
        dev_acl: false,
        dev_env_files: Vec::new(),
        platform_rate_limiting: true,
        platform_public_registry,
        platform_encryption: match platform_password {
            Some(password) => PlatformEncryption::Password(password),
            // No platform runs.
            None => PlatformEncryption::RandomPerRun,
        },
        scheduler_client: false,
    })
}

/// Where the platform's blobs go. `shared_needed`: several servers (etcd) run the platform, so
/// the default `<data_dir>/blobs` is refused.
fn blob_place(
    blocks: Option<ObjectStoreBlocks>,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
    shared_needed: bool,
) -> Result<wiring::BlobPlace, Error> {
    let blocks = blocks.unwrap_or(ObjectStoreBlocks {
        s3: None,
        dir: None,
    });
    match (blocks.s3, blocks.dir) {
        (Some(_), Some(_)) => Err(Error::Config(
            "object_store: give one block, \"s3\" or \"dir\", not both".to_owned(),
        )),
        (None, None) if shared_needed => Err(Error::Config(
            "with storage \"etcd\" the platform needs an object_store \"s3\" block (a bucket) or \
             an object_store \"dir\" block (a directory every server shares): blobs in one \
             server's data_dir would be invisible to the others"
                .to_owned(),
        )),
        (None, None) => Ok(wiring::BlobPlace::DataDir),
        (None, Some(dir)) => {
            if dir.path.as_os_str().is_empty() {
                return Err(Error::Config(
                    "object_store \"dir\": path is empty".to_owned(),
                ));
            }
            Ok(wiring::BlobPlace::Dir(resolve(dir.path)))
        }
        (Some(s3), None) => {
            if s3.bucket.trim().is_empty() {
                return Err(Error::Config(
                    "object_store \"s3\": bucket is empty".to_owned(),
                ));
            }
            if s3.access_key_id.is_some() != s3.secret_access_key.is_some() {
                return Err(Error::Config(
                    "object_store \"s3\": access_key_id and secret_access_key go together"
                        .to_owned(),
                ));
            }
            if let Some(endpoint) = &s3.endpoint
                && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
            {
                return Err(Error::Config(format!(
                    "object_store \"s3\": endpoint {endpoint:?} is not an http or https URL"
                )));
            }
            Ok(wiring::BlobPlace::S3(platform::S3Blobs {
                bucket: s3.bucket,
                endpoint: s3.endpoint.map(|e| e.trim_end_matches('/').to_owned()),
                region: s3.region,
                access_key_id: s3.access_key_id,
                secret_access_key: s3.secret_access_key,
                prefix: s3.prefix.unwrap_or_default(),
            }))
        }
    }
}

/// The scheduler's `acl` block: only `enabled` (Nomad bootstraps its first management token
/// through `/v1/acl/bootstrap`).
fn scheduler_acl(block: AclBlock) -> Result<bool, Error> {
    if block.initial_management_token.is_some() || block.default_policy.is_some() {
        return Err(Error::Config(
            "scheduler acl: only `enabled` is supported (bootstrap the first token with /v1/acl/bootstrap)"
                .to_owned(),
        ));
    }
    Ok(block.enabled)
}

fn registry_acl(block: AclBlock) -> Result<registry::AclConfig, Error> {
    let default_policy_allow = match block.default_policy.as_deref() {
        None | Some("deny") => false,
        Some("allow") => true,
        Some(other) => {
            return Err(Error::Config(format!(
                "registry acl: default_policy must be allow or deny, not {other:?}"
            )));
        }
    };
    if let Some(token) = &block.initial_management_token
        && token.trim().is_empty()
    {
        return Err(Error::Config(
            "registry acl: initial_management_token must not be empty".to_owned(),
        ));
    }
    Ok(registry::AclConfig {
        enabled: block.enabled,
        initial_management_token: block.initial_management_token,
        default_policy_allow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(hcl_text: &str) -> Result<Plan, String> {
        let config: ServerConfig = hcl::from_str(hcl_text).map_err(|e| e.to_string())?;
        plan_from(config, Path::new("/etc/cairn"), None).map_err(|e| e.to_string())
    }

    #[test]
    fn config_reads_the_platform_registry_and_requires_its_encryption_password() {
        let plan = check(
            "data_dir = \"d\"\nplatform {\n  public_registry = \"http://127.0.0.1:9/\"\n  encryption_password = \"pw\"\n}",
        )
        .unwrap();
        assert_eq!(plan.platform_public_registry, "http://127.0.0.1:9");
        assert_eq!(
            plan.platform_encryption,
            PlatformEncryption::Password("pw".to_owned())
        );
        let err = check("data_dir = \"d\"\nplatform {}").unwrap_err();
        assert!(err.contains("encryption_password is required"), "{err}");
        let config: ServerConfig = hcl::from_str("data_dir = \"d\"\nplatform {}").unwrap();
        let plan = plan_from(config, Path::new("/"), Some("from-env".to_owned())).unwrap();
        assert_eq!(
            plan.platform_encryption,
            PlatformEncryption::Password("from-env".to_owned())
        );
        let err = check(
            "data_dir = \"d\"\nplatform {\n  public_registry = \"ftp://x\"\n  encryption_password = \"pw\"\n}",
        )
        .unwrap_err();
        assert!(err.contains("not an absolute http"), "{err}");
        let err = check("data_dir = \"d\"\nregistry { encryption_password = \"pw\" }").unwrap_err();
        assert!(err.contains("belong in the platform block"), "{err}");
    }

    #[test]
    fn config_enables_only_present_blocks_with_upstream_defaults() {
        let plan =
            check("data_dir = \"data\"\nregistry {}\nscheduler { enabled = false }").unwrap();
        assert_eq!(plan.services.len(), 1);
        assert_eq!(plan.services[0].kind, ServiceKind::Registry);
        assert_eq!(plan.services[0].addr, "127.0.0.1:8500".parse().unwrap());
        assert_eq!(plan.data_dir.path(), Path::new("/etc/cairn/data"));
    }

    #[test]
    fn config_reads_tls_files_relative_to_the_file() {
        let plan = check(
            "data_dir = \"/var/lib/cairn\"\nsecrets {\n address = \"0.0.0.0:8201\"\n tls {\n  cert_file = \"tls.crt\"\n  key_file = \"/k.pem\"\n }\n}",
        )
        .unwrap();
        let tls = plan.services[0].tls.as_ref().unwrap();
        assert_eq!(tls.cert_file, Path::new("/etc/cairn/tls.crt"));
        assert_eq!(tls.key_file, Path::new("/k.pem"));
        assert_eq!(tls.ca_file, None);
        assert_eq!(plan.services[0].addr, "0.0.0.0:8201".parse().unwrap());
        let plan = check(
            "data_dir = \"/d\"\nscheduler {\n tls {\n  cert_file = \"a.crt\"\n  key_file = \"a.key\"\n  ca_file = \"ca.crt\"\n }\n}",
        )
        .unwrap();
        let tls = plan.services[0].tls.as_ref().unwrap();
        assert_eq!(tls.ca_file.as_deref(), Some(Path::new("/etc/cairn/ca.crt")));
    }

    #[test]
    fn config_rejects_unknown_keys() {
        let err = check("data_dir = \"d\"\nsecrets { adress = \"127.0.0.1:1\" }").unwrap_err();
        assert!(err.contains("adress"), "{err}");
    }

    #[test]
    fn config_rejects_no_enabled_service() {
        let err = check("data_dir = \"d\"\nsecrets { enabled = false }").unwrap_err();
        assert!(err.contains("no service is enabled"), "{err}");
    }

    #[test]
    fn config_rejects_shared_address() {
        let err = check("data_dir = \"d\"\nsecrets { address = \"127.0.0.1:9000\" }\nplatform { address = \"127.0.0.1:9000\" }")
            .unwrap_err();
        assert!(err.contains("both listen on"), "{err}");
    }

    #[test]
    fn config_rejects_bad_address() {
        assert!(check("data_dir = \"d\"\nsecrets { address = \"localhost\" }").is_err());
    }

    #[test]
    fn config_reads_registry_acl() {
        let plan = check(
            "data_dir = \"d\"\nregistry {\n acl {\n initial_management_token = \"root\"\n }\n}",
        )
        .unwrap();
        let acl = plan.services[0].registry_acl.as_ref().unwrap();
        assert!(acl.enabled && !acl.default_policy_allow);
        assert_eq!(acl.initial_management_token.as_deref(), Some("root"));
        let err = check("data_dir = \"d\"\nsecrets {\n acl {}\n}").unwrap_err();
        assert!(err.contains("only supported for the registry"), "{err}");
        let err = check("data_dir = \"d\"\nregistry {\n acl { default_policy = \"maybe\" }\n}")
            .unwrap_err();
        assert!(err.contains("allow or deny"), "{err}");
    }

    #[test]
    fn config_reads_scheduler_acl_and_leaves_it_on_by_default() {
        let plan = check("data_dir = \"d\"\nscheduler {}").unwrap();
        assert_eq!(
            plan.services[0].scheduler_acl, None,
            "absent: the default (on)"
        );
        let plan = check("data_dir = \"d\"\nscheduler {\n acl { enabled = false }\n}").unwrap();
        assert_eq!(plan.services[0].scheduler_acl, Some(false));
        let err = check("data_dir = \"d\"\nscheduler {\n acl { default_policy = \"allow\" }\n}")
            .unwrap_err();
        assert!(err.contains("only `enabled`"), "{err}");
    }

    #[test]
    fn config_reads_advertise_urls_and_rejects_malformed_ones() {
        let plan =
            check("data_dir = \"d\"\nregistry { advertise = \"http://10.0.0.5:8500/\" }").unwrap();
        assert_eq!(
            plan.services[0].advertise.as_deref(),
            Some("http://10.0.0.5:8500")
        );
        for bad in [
            "10.0.0.5:8500",
            "http://10.0.0.5",
            "http://h:8500/x",
            "ftp://h:1",
        ] {
            let err = check(&format!(
                "data_dir = \"d\"\nsecrets {{ advertise = \"{bad}\" }}"
            ))
            .unwrap_err();
            assert!(err.contains("advertise must be"), "{bad}: {err}");
        }
    }

    const ETCD: &str =
        "storage \"etcd\" {\n endpoints = [\"http://127.0.0.1:2379\"]\n prefix = \"c/\"\n}\n";
    const PLATFORM: &str = "platform { encryption_password = \"pw\" }\n";

    #[test]
    fn config_reads_object_store_blocks() {
        let plan = check("data_dir = \"d\"\nregistry {}").unwrap();
        assert_eq!(plan.blobs, wiring::BlobPlace::DataDir);
        let plan = check(&format!(
            "data_dir = \"d\"\n{PLATFORM}object_store \"dir\" {{ path = \"shared\" }}"
        ))
        .unwrap();
        assert_eq!(
            plan.blobs,
            wiring::BlobPlace::Dir(PathBuf::from("/etc/cairn/shared"))
        );
        let plan = check(&format!(
            "data_dir = \"d\"\n{PLATFORM}object_store \"s3\" {{\n bucket = \"b\"\n endpoint = \"http://127.0.0.1:9020/\"\n access_key_id = \"a\"\n secret_access_key = \"s\"\n prefix = \"cairn/\"\n}}"
        ))
        .unwrap();
        let wiring::BlobPlace::S3(bucket) = plan.blobs else {
            panic!("{:?}", plan.blobs);
        };
        assert_eq!(bucket.bucket, "b");
        assert_eq!(bucket.endpoint.as_deref(), Some("http://127.0.0.1:9020"));
        assert_eq!(bucket.prefix, "cairn/");
        for (bad, says) in [
            ("object_store \"s3\" { bucket = \"\" }", "bucket is empty"),
            (
                "object_store \"s3\" {\n bucket = \"b\"\n access_key_id = \"a\"\n}",
                "go together",
            ),
            (
                "object_store \"s3\" {\n bucket = \"b\"\n endpoint = \"h:1\"\n}",
                "not an http",
            ),
            ("object_store \"s3\" { bukket = \"b\" }", "bukket"),
            ("object_store \"nfs\" { path = \"x\" }", "nfs"),
            (
                "object_store \"s3\" { bucket = \"b\" }\nobject_store \"dir\" { path = \"x\" }",
                "not both",
            ),
        ] {
            let err = check(&format!("data_dir = \"d\"\n{PLATFORM}{bad}")).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn config_refuses_etcd_with_the_platform_and_no_shared_blob_store() {
        let err = check(&format!("data_dir = \"d\"\n{ETCD}{PLATFORM}")).unwrap_err();
        assert!(err.contains("invisible to the others"), "{err}");
        // Without the platform there are no blobs; with a shared place it starts.
        check(&format!("data_dir = \"d\"\n{ETCD}registry {{}}")).unwrap();
        let plan = check(&format!(
            "data_dir = \"d\"\n{ETCD}{PLATFORM}object_store \"dir\" {{ path = \"/mnt/blobs\" }}"
        ))
        .unwrap();
        assert_eq!(
            plan.blobs,
            wiring::BlobPlace::Dir(PathBuf::from("/mnt/blobs"))
        );
    }

    #[test]
    fn config_requires_data_dir() {
        let err = check("secrets {}").unwrap_err();
        assert!(err.contains("data_dir"), "{err}");
    }
}
