//! Test fixtures for the etcd backend: a fresh prefix on the shared etcd that `scripts/services`
//! runs (127.0.0.1:2379, or `CAIRN_ETCD_ENDPOINTS`), removed when the store is dropped, and a
//! private etcd process (Debian's `etcd` on free ports of 127.0.0.1, in a temporary directory)
//! for tests that compact, which is cluster-wide and would disturb tests running beside them.
//!
//! Invariant: every wait is bounded (30 s for a private etcd to answer); a private etcd is
//! killed and its directory removed when its guard drops.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, DeleteOptions};

/// The shared etcd's endpoints.
pub fn shared_endpoints() -> Vec<String> {
    std::env::var("CAIRN_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "127.0.0.1:2379".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// A prefix no other test uses.
pub fn unique_prefix() -> String {
    format!("cairn-test/{}/", uuid::Uuid::new_v4())
}

/// Deletes everything under a prefix of the shared etcd when dropped.
#[derive(Debug)]
pub struct PrefixGuard {
    pub endpoints: Vec<String>,
    pub prefix: String,
}

impl Drop for PrefixGuard {
    fn drop(&mut self) {
        let endpoints = self.endpoints.clone();
        let prefix = self.prefix.clone();
        // A thread of its own: drop may run inside or outside a runtime.
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut client) = Client::connect(&endpoints, None).await {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(10),
                        client.delete(prefix, Some(DeleteOptions::new().with_prefix())),
                    )
                    .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// An etcd process of this test's own.
#[derive(Debug)]
pub struct PrivateEtcd {
    child: Child,
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

impl PrivateEtcd {
    pub async fn start() -> PrivateEtcd {
        let dir = tempfile::tempdir().expect("temporary directory");
        let client_port = free_port();
        // The kernel may hand the port it just released to the next `bind(0)`.
        let peer_port = std::iter::repeat_with(free_port)
            .find(|port| *port != client_port)
            .expect("a second free port");
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let child = Command::new("etcd")
            .args([
                "--name",
                "private",
                "--data-dir",
                &dir.path().join("data").to_string_lossy(),
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &format!("private={peer_url}"),
                "--initial-cluster-state",
                "new",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting etcd (Debian's etcd-server; scripts/services installs it)");
        let etcd = PrivateEtcd {
            child,
            endpoint: client_url,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut client) = Client::connect([&etcd.endpoint], None).await
                && client.status().await.is_ok()
            {
                return etcd;
            }
            assert!(
                Instant::now() < deadline,
                "the private etcd did not answer within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl PrivateEtcd {
    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the process: a member that stops answering
    /// without closing its connections, as behind a network partition.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
