//! Tidy checks over the whole workspace, run by `cargo test` (rust-analyzer's `tidy.rs` idea).
//!
//! - Every Rust source file opens with a `//!` doc saying what it is.
//! - No test is skipped or expected to panic (neither the ignore nor the should_panic attribute).
//! - The dependency rules of docs/design.md §L hold: service crates never depend on one
//!   another, `storage` depends on no backend, secrets engines depend only on `secrets-sdk`,
//!   only `cairn` depends on a service crate, base crates depend on no service, `stdx` on no
//!   HTTP crate, and `testkit` is only ever a dev-dependency.
//! - Nothing cites a file outside the repository (the design notes the code relies on are in
//!   docs/design.md).

use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

fn all_sources() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("bench"), &mut files);
    assert!(files.len() > 20, "found only {} Rust files", files.len());
    files
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    let missing: Vec<_> = all_sources()
        .into_iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            !text.trim_start().starts_with("//!")
        })
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` module doc: {missing:#?}"
    );
}

#[test]
fn no_test_is_ignored_or_expected_to_panic() {
    let needles = [concat!("#[", "ignore"), concat!("#[", "should_panic")];
    let offenders: Vec<_> = all_sources()
        .into_iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            needles.iter().any(|needle| text.contains(needle))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "skipped or should_panic tests in: {offenders:#?}"
    );
}

/// The service crates: only `cairn` may depend on them.
const SERVICES: [&str; 4] = ["secrets", "registry", "scheduler", "platform"];

/// The `[dependencies]` (not dev-dependencies) names of a crate's manifest.
fn dependencies(krate: &str) -> Vec<String> {
    section(krate, "[dependencies]")
}

/// The names listed in one section (`[dependencies]`, `[dev-dependencies]`) of a crate's
/// manifest (`bench` is the workspace's `bench/`, every other name a directory of `crates/`).
fn section(krate: &str, header: &str) -> Vec<String> {
    let dir = if krate == "bench" {
        workspace_root().join("bench")
    } else {
        workspace_root().join("crates").join(krate)
    };
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == header;
            continue;
        }
        if in_deps && let Some((name, _)) = line.split_once(['=', '.']) {
            let name = name.trim();
            if !name.is_empty() && !name.starts_with('#') {
                names.push(name.to_owned());
            }
        }
    }
    names
}

#[test]
fn service_crates_never_depend_on_each_other() {
    let services = ["secrets", "registry", "scheduler", "platform"];
    for service in services {
        let deps = dependencies(service);
        for other in services.iter().filter(|other| **other != service) {
            assert!(
                !deps.iter().any(|d| d == other),
                "{service} depends on {other}"
            );
        }
    }
}

#[test]
fn storage_depends_on_no_backend() {
    let deps = dependencies("storage");
    for backend in ["redb", "storage-redb", "etcd-client", "storage-etcd"] {
        assert!(
            !deps.iter().any(|d| d == backend),
            "storage depends on {backend}"
        );
    }
}

/// Every workspace member: the directories of `crates/`, and `bench`.
fn workspace_crates() -> Vec<String> {
    let mut crates: Vec<String> = std::fs::read_dir(workspace_root().join("crates"))
        .unwrap()
        .flatten()
        .filter(|entry| entry.path().join("Cargo.toml").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    crates.push("bench".to_owned());
    assert!(crates.len() > 10, "found only {crates:?}");
    crates
}

#[test]
fn only_cairn_depends_on_the_services() {
    let deps = dependencies("cairn");
    for service in SERVICES {
        assert!(
            deps.iter().any(|d| d == service),
            "cairn does not wire {service}"
        );
    }
    for krate in workspace_crates().iter().filter(|k| *k != "cairn") {
        for header in ["[dependencies]", "[dev-dependencies]"] {
            let deps = section(krate, header);
            for service in SERVICES {
                assert!(
                    !deps.iter().any(|d| d == service) || krate == service,
                    "{krate} lists the service crate {service} in {header}; only cairn may"
                );
            }
        }
    }
}

#[test]
fn base_crates_stay_below_the_services() {
    let base = [
        "storage",
        "http-kit",
        "jsonapi",
        "stdx",
        "cluster",
        "testkit",
        "scheduler-structs",
        "scheduler-jobspec",
        "scheduler-diff",
        "bexpr",
    ];
    for krate in base {
        let deps = dependencies(krate);
        for service in SERVICES {
            assert!(
                !deps.iter().any(|d| d == service),
                "{krate} depends on {service}"
            );
        }
    }
    let stdx = dependencies("stdx");
    for http in ["axum", "hyper", "http", "http-kit", "reqwest", "tower"] {
        assert!(!stdx.iter().any(|d| d == http), "stdx depends on {http}");
    }
}

#[test]
fn testkit_is_only_a_dev_dependency() {
    for krate in workspace_crates() {
        assert!(
            !dependencies(&krate).iter().any(|d| d == "testkit"),
            "{krate} lists testkit in [dependencies]; it belongs in [dev-dependencies]"
        );
    }
}

#[test]
fn nothing_cites_a_file_outside_the_repository() {
    let root = workspace_root();
    let mut files = all_sources();
    for extra in [
        "README.md",
        "ARCHITECTURE.md",
        "docs/compat.md",
        "docs/performance.md",
    ] {
        files.push(root.join(extra));
    }
    for dir in ["conformance", "scripts"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            if entry.path().is_file() {
                files.push(entry.path());
            }
        }
    }
    // The notes outside the repository, as code used to cite them.
    let needles = [
        concat!("DESIGN", ".md"),
        concat!("reference ", "§"),
        concat!("shared/", "reference"),
        concat!("shared/", "spec"),
    ];
    let offenders: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let hits: Vec<&str> = needles
                .iter()
                .copied()
                .filter(|needle| text.contains(needle))
                .collect();
            (!hits.is_empty()).then(|| format!("{}: {hits:?}", path.display()))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "cite docs/design.md (or a file in the repository) instead: {offenders:#?}"
    );
}

/// `secrets-*` crates that are libraries of the core, not engines.
const SECRETS_LIBRARIES: &[&str] = &["secrets-totp"];

#[test]
fn engines_depend_only_on_the_sdk() {
    let root = workspace_root().join("crates");
    let engines: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("secrets-") && name != "secrets-sdk")
        .collect();
    assert!(!engines.is_empty(), "no engine crates found");
    for engine in engines {
        let deps = dependencies(&engine);
        // The core's pure libraries (docs/design.md §L) need no SDK; engines do.
        assert!(
            SECRETS_LIBRARIES.contains(&engine.as_str()) || deps.iter().any(|d| d == "secrets-sdk"),
            "{engine} does not use secrets-sdk"
        );
        for forbidden in ["secrets", "storage", "storage-redb", "http-kit"] {
            assert!(
                !deps.iter().any(|d| d == forbidden),
                "{engine} depends on {forbidden}"
            );
        }
    }
}
