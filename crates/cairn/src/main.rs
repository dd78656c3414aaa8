//! `cairn`: one binary serving four infrastructure APIs over one durable store.
//!
//! Entry point. Parses the command line (`cli.rs`); `agent` runs a scheduler client
//! (`agent.rs`); otherwise it turns `dev` flags or a `server` config
//! file (`config.rs`) into a [`wiring::Plan`], and hands it to `wiring::run`, which owns every
//! listener, service and background task until SIGINT/SIGTERM.
//!
//! Invariant: this is the only crate that depends on every service; services never see each
//! other, only the `Arc<dyn Storage>` built here.

mod agent;
mod cli;
mod config;
mod dev;
mod dev_env;
mod wiring;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// mimalloc rather than glibc's malloc: request paths allocate many small, short-lived
/// objects (records, rendered documents), and glibc's malloc, free and consolidation were
/// about a quarter of the platform's CPU per list page (docs/performance.md). Built with
/// mimalloc's `no_thp` (transparent huge pages off for the process): with them, mimalloc's
/// eagerly committed arenas faulted in whole 2 MiB pages, and an idle `cairn dev` held 52 MB
/// instead of 37 MB.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Version => {
            println_stdout(&format!("cairn {}", env!("CARGO_PKG_VERSION")));
            Ok(())
        }
        Command::Dev(args) => runtime().and_then(|rt| rt.block_on(dev::run(args))),
        Command::Server(args) => runtime().and_then(|rt| rt.block_on(config::run_server(args))),
        Command::Agent(args) => runtime().and_then(|rt| rt.block_on(agent::run(args))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("cairn: {err}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, wiring::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("cairn")
        .build()
        .map_err(wiring::Error::Runtime)
}

/// The one place the binary writes to stdout: its banner and `version`. Logs go to stderr.
#[allow(clippy::print_stdout, reason = "the CLI's own output")]
fn println_stdout(line: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (e.g. `cairn dev | head -1`) must not kill the server.
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}
