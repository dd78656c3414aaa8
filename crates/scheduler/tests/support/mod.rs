//! What the scheduler's API test binaries (`api.rs`, `acl.rs`) share: a scheduler over a
//! given store with its background loops running, requests sent through its router in-process
//! (`testkit::call`), and the reply assertions every test uses.
//!
//! Invariant: every [`Scheduler`] stops its loops when dropped; nothing here sleeps.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::{HeaderMap, Request, StatusCode};
use scheduler::{Config, State};
use serde_json::Value;
use storage::Storage;

/// A scheduler with its background loops running (the embedded runner: always the leader).
pub(crate) struct Scheduler {
    pub(crate) state: State,
    pub(crate) router: Router,
    runner: cluster::Runner,
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.runner.shutdown_token().cancel();
    }
}

impl Scheduler {
    /// Opens the scheduler's state over `storage` and starts its loops.
    pub(crate) async fn open(storage: Arc<dyn Storage>, config: Config) -> Scheduler {
        let state = State::open(storage, config).await.expect("open state");
        let runner = cluster::Runner::embedded(tokio_util::sync::CancellationToken::new());
        scheduler::start_tasks(&state, &runner);
        Scheduler {
            router: scheduler::router(state.clone()),
            state,
            runner,
        }
    }

    /// Sends one request through the router.
    pub(crate) async fn handle(&self, request: Request<Body>) -> Reply {
        let response = testkit::call(&self.router, request).await;
        Reply {
            status: response.status,
            body: response.text(),
            headers: response.headers,
        }
    }
}

/// One answer: status, headers and the body as text.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Reply {
    /// The body as JSON; panics if it is not JSON.
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {:?}", self.body))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// `X-Scheduler-Index` (also checks the `X-Nomad-Index` alias carries the same value).
    #[track_caller]
    pub(crate) fn index(&self) -> u64 {
        let index = self.header("x-scheduler-index").expect("X-Scheduler-Index");
        assert_eq!(
            self.header("x-nomad-index"),
            Some(index),
            "X-Nomad-Index alias"
        );
        index.parse().expect("numeric index")
    }

    #[track_caller]
    pub(crate) fn expect(self, status: StatusCode) -> Reply {
        assert_eq!(self.status, status, "body: {}", self.body);
        self
    }

    /// The status, and a plain-text body (Nomad's error shape) containing `text`.
    #[track_caller]
    pub(crate) fn expect_error(self, status: StatusCode, text: &str) -> Reply {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert!(self.body.contains(text), "{:?} lacks {text:?}", self.body);
        let content_type = self.header("content-type").unwrap_or("");
        assert!(
            content_type.starts_with("text/plain"),
            "errors are plain text, got {content_type:?}"
        );
        self
    }
}
