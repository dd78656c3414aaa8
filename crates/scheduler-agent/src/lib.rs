//! The scheduler's client agent (Nomad's client): registers its node with a scheduler server,
//! heartbeats, pulls the allocations placed on it and runs their tasks with the `raw_exec`
//! driver, reporting task states and allocation `ClientStatus` back.
//!
//! The agent talks to the server only over the server's HTTP API (the `/v1/internal/*` client
//! endpoints), whether it runs in the `cairn dev` process or as `cairn agent --servers ADDR`.
