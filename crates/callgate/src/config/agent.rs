//! The `[agent]` section: the HAProxy agent-check responder (`agent`).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Where and how the agent-check responder answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Answer agent checks at all. Off by default: the port reveals load.
    pub enabled: bool,
    /// TCP listener for agent checks (HAProxy's `agent-port`, and
    /// `agent-addr` when it is not the server's address).
    pub listen: SocketAddr,
    /// Connections answered at once; one more is closed unanswered
    /// (HAProxy keeps the server's last weight and state).
    pub max_connections: usize,
    /// Longest one connection may take: writing the line, then waiting for
    /// the balancer to close. Keep it below HAProxy's `agent-inter`.
    pub timeout_ms: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            enabled: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 9777)),
            max_connections: 64,
            timeout_ms: 1_000,
        }
    }
}

impl AgentConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("agent.max_connections must be at least 1".into());
        }
        if self.timeout_ms == 0 {
            return Err("agent.timeout_ms must be positive".into());
        }
        Ok(())
    }
}
