//! `cairn agent --servers ADDR`: a scheduler client in its own process (Nomad's client agent),
//! running the allocations the servers place on its node until SIGINT/SIGTERM.
//!
//! Invariant: the data dir is always kept, so a restarted agent is the same node and
//! re-attaches to the tasks it left running (the agent never kills tasks on its own exit).

use tokio_util::sync::CancellationToken;

use crate::cli::AgentArgs;
use crate::wiring::{Error, Signals};

pub(crate) async fn run(args: AgentArgs) -> Result<(), Error> {
    http_kit::init_tracing(args.log.log_format, &args.log.log_level);
    let servers: Vec<String> = args
        .servers
        .iter()
        .map(|server| server_url(server))
        .collect();
    let mut config = scheduler_agent::AgentConfig::new(servers, args.data_dir);
    if let Some(name) = args.node_name {
        config.node_name = name;
    }
    config.datacenter = args.datacenter;
    config.node_pool = args.node_pool;
    config.token = args.token;
    config.consul = args
        .consul_addr
        .map(|address| scheduler_agent::ConsulSettings {
            address,
            token: args.consul_token,
        });
    let agent = scheduler_agent::Agent::new(config).map_err(|err| Error::Agent(err.to_string()))?;
    let signals = Signals::install()?;
    crate::println_stdout(&format!(
        "cairn agent\n  node id     {}\nready",
        agent.node_id()
    ));
    let shutdown = CancellationToken::new();
    let running = agent.run(shutdown.clone());
    tokio::pin!(running);
    tokio::select! {
        result = &mut running => return result.map_err(|err| Error::Agent(err.to_string())),
        signal = signals.recv() => tracing::info!(signal, "stopping the agent; tasks keep running"),
    }
    shutdown.cancel();
    running.await.map_err(|err| Error::Agent(err.to_string()))
}

/// `127.0.0.1:4646` → `http://127.0.0.1:4646`; URLs pass unchanged.
fn server_url(server: &str) -> String {
    let server = server.trim().trim_end_matches('/');
    if server.contains("://") {
        server.to_owned()
    } else {
        format!("http://{server}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_addresses_become_http_urls_and_urls_pass() {
        assert_eq!(server_url("127.0.0.1:4646"), "http://127.0.0.1:4646");
        assert_eq!(server_url("https://sched:4646/"), "https://sched:4646");
    }
}
