//! What the storage-redb integration tests share: the runtime their synchronous test bodies
//! block on (two workers, as the server's own runtime has at the least).

/// A multi-thread runtime with two workers and every driver enabled.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
