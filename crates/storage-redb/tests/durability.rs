//! Crash durability of [`RedbStorage`]: a child process writes with several concurrent writers
//! (so group commit batches), reporting each acknowledged transaction on stdout only after
//! `txn` returned; the parent SIGKILLs it at random moments, reopens the store in the same
//! directory, and checks that nothing acknowledged was lost. Thirty-odd rounds on one
//! directory, so every round also recovers from the previous crashes.
//!
//! Where it sits: an integration test of `storage-redb`. The child is this same test binary,
//! re-executed with [`CHILD_ENV`] set and asked to run only [`child_writes_until_killed`]
//! (which does nothing when run normally); that works the same under `cargo test` and nextest.
//!
//! Invariants checked after every kill: every acknowledged write is present with its value and
//! revision; the revision is at least every acknowledged one; at most one unacknowledged
//! transaction per writer (the one in flight) is visible; keys deleted by acknowledged
//! transactions stay deleted; a full scan works; a watch from 0 (or, once compacted, from the
//! oldest kept revision) replays a contiguous history up to the current revision.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use storage::{Error, EventKind, KeyRange, Op, Storage, Txn};
use storage_redb::{RedbOptions, RedbStorage};

mod support;

use support::runtime;

/// Set (to the database path) in the child's environment.
const CHILD_ENV: &str = "CAIRN_REDB_DURABILITY_CHILD_DB";
/// The round number, which prefixes the child's keys.
const ROUND_ENV: &str = "CAIRN_REDB_DURABILITY_CHILD_ROUND";
/// Overrides the random seed, to replay a failing run.
const SEED_ENV: &str = "CAIRN_REDB_DURABILITY_SEED";
const CHILD_TEST: &str = "child_writes_until_killed";

const ROUNDS: u32 = 32;
const WRITERS: u32 = 4;
/// Small, so compaction runs (and is recovered from) during the test.
const RETENTION: u64 = 300;

fn main_key(round: u32, writer: u32, index: u64) -> String {
    format!("main/r{round:02}/w{writer}/{index:06}")
}

fn main_value(round: u32, writer: u32, index: u64) -> String {
    format!("v{round}.{writer}.{index}")
}

fn tmp_key(round: u32, writer: u32, index: u64) -> String {
    format!("tmp/r{round:02}/w{writer}/{index:06}")
}

fn options() -> RedbOptions {
    RedbOptions::default()
        .with_history_retention(RETENTION)
        .with_cache_size(8 << 20)
}

/// The child: when spawned by the crash test, opens the store and writes until killed; run
/// normally, does nothing.
#[test]
fn child_writes_until_killed() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let round: u32 = std::env::var(ROUND_ENV)
        .expect("round")
        .parse()
        .expect("round number");
    runtime().block_on(async move {
        let store =
            Arc::new(RedbStorage::open_with(Path::new(&path), options()).expect("child open"));
        // On a line of its own: libtest has printed "test ... " without a newline.
        report("\nREADY");
        let mut writers = Vec::new();
        for writer in 0..WRITERS {
            let store = store.clone();
            writers.push(tokio::spawn(async move {
                for index in 0.. {
                    // Put this transaction's key and a temporary one; delete the previous
                    // temporary one.
                    let mut txn = Txn::put(
                        main_key(round, writer, index),
                        main_value(round, writer, index),
                    )
                    .then(Op::Put {
                        key: tmp_key(round, writer, index).into_bytes(),
                        value: Vec::new(),
                    });
                    if index > 0 {
                        txn = txn.then(Op::Delete {
                            key: tmp_key(round, writer, index - 1).into_bytes(),
                        });
                    }
                    let result = store.txn(txn).await.expect("child txn");
                    report(&format!("ACK {} {round} {writer} {index}", result.revision));
                }
            }));
        }
        for writer in writers {
            writer.await.expect("writer");
        }
    });
}

/// One line on stdout, in one write (atomic on a pipe), flushed.
fn report(line: &str) {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(format!("{line}\n").as_bytes())
        .expect("stdout");
    stdout.flush().expect("flush stdout");
}

#[derive(Debug, Clone, Copy)]
struct Ack {
    revision: u64,
    round: u32,
    writer: u32,
    index: u64,
}

fn parse_ack(line: &str) -> Option<Ack> {
    let mut fields = line.strip_prefix("ACK ")?.split(' ');
    let ack = Ack {
        revision: fields.next()?.parse().ok()?,
        round: fields.next()?.parse().ok()?,
        writer: fields.next()?.parse().ok()?,
        index: fields.next()?.parse().ok()?,
    };
    fields.next().is_none().then_some(ack)
}

/// xorshift64*: enough randomness for kill times, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var(SEED_ENV)
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |now| now.as_nanos() as u64)
                    | 1
            });
        eprintln!("durability seed: {seed} (set {SEED_ENV} to replay)");
        Rng(seed)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    }
}

struct Spawned {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: std::thread::JoinHandle<()>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn_child(path: &Path, round: u32) -> Spawned {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, path)
        .env(ROUND_ENV, round.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let (sender, lines) = mpsc::channel();
    let mut out = BufReader::new(child.stdout.take().expect("child stdout"));
    let stdout = std::thread::spawn(move || {
        let mut line = String::new();
        // Only complete lines count: a line cut by the kill was never fully reported.
        while out.read_line(&mut line).is_ok_and(|n| n > 0) && line.ends_with('\n') {
            if sender.send(line.trim_end().to_owned()).is_err() {
                break;
            }
            line.clear();
        }
    });
    let mut err = child.stderr.take().expect("child stderr");
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    Spawned {
        child,
        lines,
        stdout,
        stderr,
    }
}

/// Runs one round: spawn, wait a random moment, SIGKILL, collect the acknowledgements.
fn crash_round(path: &Path, round: u32, rng: &mut Rng) -> Vec<Ack> {
    let Spawned {
        mut child,
        lines,
        stdout,
        stderr,
    } = spawn_child(path, round);
    let mut seen = Vec::new();
    if round % 6 == 5 {
        // Now and then, kill it early: during startup or crash recovery.
        std::thread::sleep(Duration::from_millis(rng.below(30)));
    } else {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line == "READY" => break,
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "round {round}: the child never opened the store: {}",
                        stderr.join().unwrap_or_default()
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10 + rng.below(141)));
    }
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("wait for the child");
    stdout.join().expect("stdout reader");
    let errors = stderr.join().unwrap_or_default();
    assert_eq!(
        status.signal(),
        Some(9),
        "round {round}: the child died on its own ({status}): {errors}"
    );
    seen.extend(lines.try_iter());
    seen.iter().filter_map(|line| parse_ack(line)).collect()
}

/// Reopens the store and checks everything acknowledged so far.
async fn verify(path: &Path, acks: &[Ack], round: u32) {
    let store = RedbStorage::open_with(path, options())
        .unwrap_or_else(|err| panic!("round {round}: reopen: {err}"));
    let current = store.revision().await.expect("revision");
    let max_acked = acks.iter().map(|ack| ack.revision).max().unwrap_or(0);
    assert!(
        current >= max_acked,
        "round {round}: revision {current} is behind acknowledged {max_acked}"
    );

    let scan = store.scan(KeyRange::all(), None).await.expect("full scan");
    assert_eq!(scan.revision, current);
    let kvs: BTreeMap<Vec<u8>, storage::KeyValue> = scan
        .kvs
        .into_iter()
        .map(|kv| (kv.key.clone(), kv))
        .collect();

    // Every acknowledged write, exactly as written.
    let mut last_acked: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for ack in acks {
        let key = main_key(ack.round, ack.writer, ack.index);
        let kv = kvs.get(key.as_bytes()).unwrap_or_else(|| {
            panic!(
                "round {round}: acknowledged {key} (revision {}) is lost",
                ack.revision
            )
        });
        assert_eq!(
            kv.value,
            main_value(ack.round, ack.writer, ack.index).as_bytes(),
            "round {round}: value of {key}"
        );
        assert_eq!(
            (kv.create_revision, kv.mod_revision, kv.version),
            (ack.revision, ack.revision, 1),
            "round {round}: metadata of {key}"
        );
        let last = last_acked
            .entry((ack.round, ack.writer))
            .or_insert(ack.index);
        *last = (*last).max(ack.index);
    }
    // Beyond those, at most the one transaction each writer had in flight; temporary keys
    // deleted by acknowledged transactions stay deleted.
    for key in kvs.keys() {
        let key = String::from_utf8_lossy(key);
        let mut parts = key.split('/');
        let (Some(family), Some(r), Some(w), Some(i)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            panic!("round {round}: unexpected key {key}");
        };
        let parse = |text: &str, prefix: char| {
            text.strip_prefix(prefix)
                .and_then(|n| n.parse::<u64>().ok())
        };
        let (Some(r), Some(w), Ok(i)) = (parse(r, 'r'), parse(w, 'w'), i.parse::<u64>()) else {
            panic!("round {round}: unexpected key {key}");
        };
        let next = last_acked
            .get(&(r as u32, w as u32))
            .map_or(0, |last| last + 1);
        match family {
            "main" => assert!(
                i <= next,
                "round {round}: {key} is visible but neither acknowledged nor in flight"
            ),
            "tmp" => assert!(
                i + 1 >= next && i <= next,
                "round {round}: {key} was deleted by an acknowledged transaction"
            ),
            _ => panic!("round {round}: unexpected key {key}"),
        }
    }

    // The history replays, contiguously, from 0 or from the oldest kept revision.
    let (mut stream, from) = match store
        .watch(KeyRange::all(), 0)
        .await
        .expect("watch")
        .next_event()
        .await
    {
        Some(Err(Error::Compacted { compacted, .. })) => (
            store
                .watch(KeyRange::all(), compacted)
                .await
                .expect("watch"),
            compacted,
        ),
        Some(Ok(_)) | None => (store.watch(KeyRange::all(), 0).await.expect("watch"), 0),
        Some(Err(err)) => panic!("round {round}: watch from 0: {err}"),
    };
    assert!(
        current - from <= RETENTION,
        "round {round}: history from {from} exceeds the retention at {current}"
    );
    let mut expected_revision = from + 1;
    let acked_at: BTreeMap<u64, &Ack> = acks.iter().map(|ack| (ack.revision, ack)).collect();
    while expected_revision <= current {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next_event())
            .await
            .unwrap_or_else(|_| {
                panic!("round {round}: history stalled before revision {expected_revision}")
            })
            .unwrap_or_else(|| {
                panic!("round {round}: history ended before revision {expected_revision}")
            })
            .unwrap_or_else(|err| panic!("round {round}: history: {err}"));
        // Each transaction's first event is the put of its main key.
        assert_eq!(
            event.revision, expected_revision,
            "round {round}: history is not contiguous"
        );
        assert_eq!(event.kind, EventKind::Put);
        if let Some(ack) = acked_at.get(&event.revision) {
            assert_eq!(
                event.key,
                main_key(ack.round, ack.writer, ack.index).as_bytes(),
                "round {round}: history at {}",
                event.revision
            );
        }
        // Skip the rest of this transaction's events.
        let mut rest = 1 + u64::from(!event.key.ends_with(b"/000000"));
        while rest > 0 {
            let more = stream.next_event().await.expect("event").expect("event");
            assert_eq!(
                more.revision, expected_revision,
                "round {round}: transaction split in history"
            );
            rest -= 1;
        }
        expected_revision += 1;
    }
    store.close().await.expect("close");
}

/// Thirty-odd SIGKILLs at random moments during group-committed writes lose nothing that was
/// acknowledged.
#[test]
fn acknowledged_writes_survive_sigkill_at_random_moments() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temporary directory");
    let path: PathBuf = dir.path().join("durability.redb");
    let mut rng = Rng::new();
    let runtime = runtime();
    let mut acks = Vec::new();
    let mut per_round = Vec::new();
    for round in 0..ROUNDS {
        let new = crash_round(&path, round, &mut rng);
        per_round.push(new.len());
        acks.extend(new);
        runtime.block_on(verify(&path, &acks, round));
    }
    assert!(
        acks.len() > ROUNDS as usize,
        "the children acknowledged almost nothing: {per_round:?}"
    );
    eprintln!(
        "durability: {ROUNDS} kills, {} acknowledged transactions ({per_round:?} per round), {:?}",
        acks.len(),
        started.elapsed()
    );
}
