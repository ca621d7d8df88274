//! What the server recorded in Postgres during a run: its ledger receipts
//! (admitted calls) and its refusal rows, read by the run's time window.

use std::time::{Duration, SystemTime};

use anyhow::Context;
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;

/// Bound on connecting to Postgres and on each query.
const DB_TIMEOUT: Duration = Duration::from_secs(30);

/// Which table a server row came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `call_ledger`: the call was admitted (it may still have failed setup).
    Ledger,
    /// `admission_rejections`: the gate (or setup before a ledger row) said no.
    Rejection,
}

/// One call as the server recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerCall {
    pub source: Source,
    /// The Twilio `CallSid`, which the load records carry too.
    pub carrier_call_id: Option<String>,
    /// Ledger: `end_reason`; rejection: `reason`.
    pub reason: Option<String>,
    /// Ledger: `admission_wait_ms`; rejection: `waited_ms`.
    pub wait_ms: u64,
}

impl ServerCall {
    /// The refusal reason if the server refused this call: every rejection
    /// row, and ledger rows closed as `setup_failed:*` (admitted, then sent
    /// to the overflow path because a resource could not be opened).
    pub fn refusal(&self) -> Option<&str> {
        let reason = self.reason.as_deref();
        match self.source {
            Source::Rejection => Some(reason.unwrap_or("unknown")),
            Source::Ledger => reason.filter(|r| r.starts_with("setup_failed")),
        }
    }
}

/// A read-only connection for the bench's queries.
pub struct Db {
    client: tokio_postgres::Client,
    connection: JoinHandle<()>,
}

impl Db {
    /// Connects to `conninfo` (libpq style or URL).
    ///
    /// # Errors
    /// Postgres cannot be reached in time.
    pub async fn connect(conninfo: &str) -> anyhow::Result<Db> {
        let (client, conn) =
            tokio::time::timeout(DB_TIMEOUT, tokio_postgres::connect(conninfo, NoTls))
                .await
                .context("connecting to Postgres timed out")?
                .context("connecting to Postgres")?;
        let connection = tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::warn!(error = %e, "bench database connection ended");
            }
        });
        Ok(Db { client, connection })
    }

    /// Every ledger and refusal row of `instance` stamped within `[from, to]`.
    ///
    /// # Errors
    /// A query failed or timed out.
    pub async fn window(
        &self,
        instance: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Vec<ServerCall>> {
        let ledger = "SELECT carrier_call_id, end_reason, admission_wait_ms FROM call_ledger \
                      WHERE owner_instance = $1 AND admitted_at BETWEEN $2 AND $3";
        let refused = "SELECT carrier_call_id, reason, waited_ms FROM admission_rejections \
                       WHERE instance = $1 AND at BETWEEN $2 AND $3";
        let mut calls = self
            .rows(ledger, Source::Ledger, instance, from, to)
            .await?;
        calls.extend(
            self.rows(refused, Source::Rejection, instance, from, to)
                .await?,
        );
        Ok(calls)
    }

    async fn rows(
        &self,
        sql: &str,
        source: Source,
        instance: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Vec<ServerCall>> {
        let rows =
            tokio::time::timeout(DB_TIMEOUT, self.client.query(sql, &[&instance, &from, &to]))
                .await
                .with_context(|| format!("{source:?} query timed out"))?
                .with_context(|| format!("{source:?} query"))?;
        rows.iter()
            .map(|r| {
                let wait: i64 = r.try_get(2)?;
                Ok(ServerCall {
                    source,
                    carrier_call_id: r.try_get(0)?,
                    reason: r.try_get(1)?,
                    wait_ms: u64::try_from(wait).unwrap_or(0),
                })
            })
            .collect()
    }

    /// Closes the connection.
    pub fn close(self) {
        drop(self.client);
        self.connection.abort();
    }
}
