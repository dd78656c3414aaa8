//! Shared pieces of cairn's benchmark tools: the latency histogram, the target/flag parsing
//! and the built-in multi-request scenarios (registry operations and their etcd anchors) that
//! the `loadgen` binary uses, and the HTTP and in-process drivers of the engine benchmarks
//! (`pki_bench`, `ssh_bench`).
//!
//! Where it sits: `bench/` is outside the product. `scripts/bench` builds this crate together
//! with `cairn`, runs `anchor` (a bare hyper server) and `cairn dev`, and drives both with
//! `loadgen`, so every cairn number is printed next to an anchor number from the same run.
//! Benchmarks are never tests: the unit tests here only check the arithmetic and parsing.
//!
//! Invariants:
//! - `loadgen` only ever talks to loopback addresses; [`target::Target::parse`] refuses
//!   anything else, and resolves no host name except `localhost`.
//! - [`histogram::Histogram`] reports every percentile within 1/64 (about 1.6 %) above the
//!   true recorded value, never below it, and its `max` exactly.

pub mod engine_load;
pub mod histogram;
pub mod scenario;
pub mod target;
