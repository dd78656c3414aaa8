//! Leadership through etcd against real etcd processes: of two servers exactly one leads and
//! runs the leader loops; a leader that dies (its handle dropped, so its lease is no longer
//! kept alive) hands over within 5 s; a resigning one at once; a leader cut off from etcd stops
//! leading within the lease's lifetime, whether its connection breaks or etcd stops answering;
//! a server told it is not fit to lead hands over to a fit one (and a lone unfit one leads);
//! a step-down hands over, and a lone server that steps down leads again; when both step
//! down in turn, the first leads again once its pause ends.
//!
//! Invariant: every wait polls with a deadline; each test campaigns on a fresh prefix of the
//! shared etcd, or on a private etcd it may kill.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cluster::{Leadership, Runner};
use etcd_client::Client;
use storage_etcd::{EtcdLeadership, LeadershipOptions};
use tokio_util::sync::CancellationToken;

use support::{PrivateEtcd, shared_endpoints, unique_prefix};

async fn shared_client() -> Client {
    Client::connect(shared_endpoints(), None)
        .await
        .expect("connect to the shared etcd")
}

fn options(prefix: &str, id: &str) -> LeadershipOptions {
    LeadershipOptions::new(format!("{prefix}meta/leader").into_bytes(), id)
}

/// Polls `condition` every 20 ms until it holds; fails after `limit`. Returns the time taken.
async fn within(limit: Duration, what: &str, condition: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

fn leaders(servers: &[&EtcdLeadership]) -> usize {
    servers.iter().filter(|server| server.is_leader()).count()
}

/// A leader loop on `runner` that counts how many instances run at once, cluster-wide.
fn count_running(runner: &Runner, running: Arc<AtomicUsize>, most: Arc<AtomicUsize>) {
    runner.leader_loop("count", move |token| {
        let running = running.clone();
        let most = most.clone();
        async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            token.cancelled().await;
            running.fetch_sub(1, Ordering::SeqCst);
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_servers_leads_and_a_dead_leader_hands_over_within_5s() {
    let prefix = unique_prefix();
    let client = shared_client().await;
    let a = Arc::new(EtcdLeadership::start(client.clone(), options(&prefix, "a")));
    let b = Arc::new(EtcdLeadership::start(client.clone(), options(&prefix, "b")));
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let shutdown_a = CancellationToken::new();
    let runner_a = Runner::new(a.clone(), shutdown_a.clone());
    let runner_b = Runner::new(b.clone(), CancellationToken::new());
    count_running(&runner_a, running.clone(), most.clone());
    count_running(&runner_b, running.clone(), most.clone());

    within(Duration::from_secs(15), "a leader", || {
        leaders(&[&a, &b]) == 1
    })
    .await;
    // It stays exactly one for a while (several keep-alive rounds).
    for _ in 0..50 {
        assert_eq!(leaders(&[&a, &b]), 1, "exactly one leads");
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    within(Duration::from_secs(5), "the leader loop runs", || {
        running.load(Ordering::SeqCst) == 1
    })
    .await;
    let key = format!("{prefix}meta/leader").into_bytes();
    let (leader, follower, leader_runner, follower_runner, leader_name) = if a.is_leader() {
        (a, b, runner_a, runner_b, "a")
    } else {
        (b, a, runner_b, runner_a, "b")
    };
    assert_eq!(
        EtcdLeadership::read_leader_id(&client, &key)
            .await
            .expect("leader"),
        Some(leader_name.to_owned())
    );

    // The leader dies: its runner stops and its handle goes without revoking the lease.
    leader_runner.shutdown_and_wait().await;
    drop(leader_runner);
    drop(leader);
    let took = within(Duration::from_secs(5), "the follower takes over", || {
        follower.is_leader()
    })
    .await;
    eprintln!("handover after the leader's death took {took:?}");
    within(Duration::from_secs(5), "the leader loop runs again", || {
        running.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two loops at once");
    follower_runner.shutdown_and_wait().await;
    follower.resign().await;
    shutdown_a.cancel();
}

fn server(prefix: &str, id: &str, port: u16) -> LeadershipOptions {
    let info = cluster::ServerInfo::new(id, "host")
        .with_url("registry", format!("http://127.0.0.1:{port}"));
    options(prefix, id)
        .with_server(info)
        .with_members(format!("{prefix}meta/members/").into_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_names_the_same_leader_and_peers_and_a_resigned_one_leaves_them() {
    let prefix = unique_prefix();
    let client = shared_client().await;
    let a = EtcdLeadership::start(client.clone(), server(&prefix, "a", 1001));
    let b = EtcdLeadership::start(client.clone(), server(&prefix, "b", 1002));
    assert!(a.is_elected() && b.is_elected());
    let agree = || {
        let (Some(from_a), Some(from_b)) = (a.leader(), b.leader()) else {
            return false;
        };
        from_a == from_b
            && from_a.url("registry").is_some()
            && a.peers().len() == 2
            && b.peers().len() == 2
    };
    within(
        Duration::from_secs(15),
        "both name one leader with its URL",
        agree,
    )
    .await;
    let leader = a.leader().expect("a leader");
    let (leading, following) = if leader.id == "a" { (&a, &b) } else { (&b, &a) };
    assert!(leading.is_leader() && !following.is_leader());
    assert_eq!(leading.leader(), Some(leading.this_server()));
    let ids: Vec<String> = a.peers().into_iter().map(|peer| peer.id).collect();
    assert_eq!(ids, vec!["a".to_owned(), "b".to_owned()], "ordered by id");

    leading.resign().await;
    within(
        Duration::from_secs(5),
        "the other leads and is alone",
        || {
            following.is_leader()
                && following.leader() == Some(following.this_server())
                && following.peers().len() == 1
        },
    )
    .await;
    following.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigning_leader_hands_over_at_once() {
    let prefix = unique_prefix();
    let client = shared_client().await;
    let first = EtcdLeadership::start(client.clone(), options(&prefix, "first"));
    within(Duration::from_secs(15), "the first leads", || {
        first.is_leader()
    })
    .await;
    let second = EtcdLeadership::start(client.clone(), options(&prefix, "second"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_leader(), "the key is taken");

    first.resign().await;
    assert!(!first.is_leader(), "not leading once resigned");
    let took = within(Duration::from_secs(5), "the second takes over", || {
        second.is_leader()
    })
    .await;
    assert!(
        took < Duration::from_secs(2),
        "a revoked lease hands over without waiting for its TTL (took {took:?})"
    );
    second.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_stops_leading_within_the_lease() {
    let etcd = PrivateEtcd::start().await;
    let client = Client::connect([&etcd.endpoint], None)
        .await
        .expect("connect to the private etcd");
    let leadership = EtcdLeadership::start(client, options("cairn/", "alone"));
    let mut changes = leadership.watch();
    within(Duration::from_secs(15), "leading", || {
        leadership.is_leader()
    })
    .await;
    let _ = changes.borrow_and_update();

    drop(etcd); // kills the process: no keep-alive is acknowledged any more
    let took = within(Duration::from_secs(5), "not leading", || {
        !leadership.is_leader()
    })
    .await;
    eprintln!("stopped leading {took:?} after etcd went away");
    assert!(
        changes.has_changed().unwrap_or(true),
        "the watch saw the change"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_etcd_stops_answering_stops_leading_before_its_lease_can_expire() {
    let etcd = PrivateEtcd::start().await;
    let client = Client::connect([&etcd.endpoint], None)
        .await
        .expect("connect to the private etcd");
    let options = options("cairn/", "frozen");
    let ttl = options.ttl;
    let leadership = EtcdLeadership::start(client, options);
    within(Duration::from_secs(15), "leading", || {
        leadership.is_leader()
    })
    .await;

    etcd.signal("-STOP"); // no answer, no reset: only the keep-alive deadline can tell
    let took = within(ttl, "not leading before the TTL", || {
        !leadership.is_leader()
    })
    .await;
    eprintln!("stopped leading {took:?} after etcd froze (TTL {ttl:?})");
    etcd.signal("-CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfit_leader_hands_over_to_a_fit_server_and_a_lone_unfit_one_still_leads() {
    let prefix = unique_prefix();
    let client = shared_client().await;
    let first = EtcdLeadership::start(client.clone(), options(&prefix, "first"));
    first.set_fit(false);
    within(Duration::from_secs(15), "a lone unfit server leads", || {
        first.is_leader()
    })
    .await;
    let second = EtcdLeadership::start(client.clone(), options(&prefix, "second"));
    within(
        Duration::from_secs(5),
        "the fit server takes over from the unfit leader",
        || second.is_leader() && !first.is_leader(),
    )
    .await;
    assert_eq!(
        first.peers().len(),
        2,
        "the unfit server stays a member after handing over"
    );
    first.set_fit(true);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        second.is_leader(),
        "becoming fit does not take leadership back"
    );
    second.set_fit(false);
    within(Duration::from_secs(5), "the fit one leads again", || {
        first.is_leader() && !second.is_leader()
    })
    .await;
    first.resign().await;
    second.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_steps_down_hands_over_and_a_lone_one_leads_again() {
    let prefix = unique_prefix();
    let client = shared_client().await;
    let first = EtcdLeadership::start(client.clone(), options(&prefix, "first"));
    within(Duration::from_secs(15), "the first leads", || {
        first.is_leader()
    })
    .await;
    assert!(first.active_since().is_some(), "a term start while leading");
    let second = EtcdLeadership::start(client.clone(), options(&prefix, "second"));
    within(Duration::from_secs(5), "both are members", || {
        first.peers().len() == 2
    })
    .await;
    first.step_down();
    within(Duration::from_secs(5), "the second takes over", || {
        second.is_leader() && !first.is_leader()
    })
    .await;
    assert_eq!(first.active_since(), None);
    second.resign().await;
    // Alone, a server that steps down leads again at once.
    within(Duration::from_secs(10), "the first is alone", || {
        first.peers().len() == 1
    })
    .await;
    first.step_down();
    within(
        Duration::from_secs(5),
        "the lone server leads again",
        || first.is_leader(),
    )
    .await;
    first.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_both_servers_step_down_in_turn_the_first_leads_again_after_its_pause() {
    let prefix = unique_prefix();
    let client = shared_client().await;
    let first = EtcdLeadership::start(client.clone(), options(&prefix, "first"));
    within(Duration::from_secs(15), "the first leads", || {
        first.is_leader()
    })
    .await;
    let second = EtcdLeadership::start(client.clone(), options(&prefix, "second"));
    within(Duration::from_secs(5), "both are members", || {
        first.peers().len() == 2 && second.peers().len() == 2
    })
    .await;
    first.step_down();
    let stepped = Instant::now();
    within(Duration::from_secs(5), "the second takes over", || {
        second.is_leader() && !first.is_leader()
    })
    .await;
    // The second steps down within the first's pause: nobody may campaign until the first's
    // pause ends, and then the first leads again.
    second.step_down();
    within(Duration::from_secs(5), "the second stepped down", || {
        !second.is_leader()
    })
    .await;
    within(Duration::from_secs(20), "the first leads again", || {
        first.is_leader()
    })
    .await;
    assert!(
        stepped.elapsed() >= Duration::from_secs(9),
        "the first held back for its pause: {:?}",
        stepped.elapsed()
    );
    assert!(!second.is_leader());
    first.resign().await;
    second.resign().await;
}
