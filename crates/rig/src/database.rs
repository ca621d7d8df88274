//! The rig's Postgres: a throwaway cluster, or an existing database.

use anyhow::Context;
use state_store::{Frozen, LocalOptions, LocalPostgres};

/// The database a rig's server uses. A throwaway cluster is stopped and
/// deleted by [`Database::stop`] (or on drop); an existing database is left
/// as it was.
#[derive(Debug)]
pub struct Database {
    conninfo: String,
    local: Option<LocalPostgres>,
}

impl Database {
    /// Starts a throwaway cluster from the system's PostgreSQL binaries (as
    /// the `postgres` user when run as root: `initdb` refuses root). The
    /// ~1 s of `initdb` and `pg_ctl` runs off the async workers.
    ///
    /// # Errors
    /// PostgreSQL is not installed or the cluster would not start.
    pub async fn local(opts: LocalOptions) -> anyhow::Result<Database> {
        let pg = tokio::task::spawn_blocking(move || LocalPostgres::start(opts))
            .await?
            .context("starting a local Postgres")?;
        Ok(Database {
            conninfo: pg.conninfo(),
            local: Some(pg),
        })
    }

    /// The database `CALLGATE_DATABASE_URL` names when it is set and not
    /// empty; otherwise a throwaway cluster, announced on stderr (the
    /// command-line rigs `callgate demo` and `callgate-bench` use this).
    ///
    /// # Errors
    /// See [`Database::local`].
    pub async fn from_env_or_local(opts: LocalOptions) -> anyhow::Result<Database> {
        if let Ok(url) = std::env::var("CALLGATE_DATABASE_URL")
            && !url.is_empty()
        {
            return Ok(Database::existing(url));
        }
        eprintln!("starting a throwaway Postgres …");
        Database::local(opts).await
    }

    /// An existing database at `conninfo` (libpq style or URL).
    pub fn existing(conninfo: impl Into<String>) -> Database {
        Database {
            conninfo: conninfo.into(),
            local: None,
        }
    }

    /// Where the server connects (`database.url`).
    pub fn conninfo(&self) -> &str {
        &self.conninfo
    }

    /// The throwaway cluster, when this is one.
    pub fn local_postgres(&self) -> Option<&LocalPostgres> {
        self.local.as_ref()
    }

    /// Freezes the throwaway cluster with SIGSTOP — the postmaster and every
    /// backend and auxiliary process — until the returned guard is thawed
    /// or dropped (SIGCONT). Connections already open stop answering as
    /// well as new ones: Postgres hangs, it does not refuse.
    ///
    /// # Errors
    /// This is not a throwaway cluster (an existing database is never
    /// signalled), its postmaster pid cannot be read, or the processes
    /// could not be stopped.
    pub fn freeze(&self) -> anyhow::Result<Frozen> {
        let pg = self
            .local
            .as_ref()
            .context("only a throwaway cluster can be frozen")?;
        pg.freeze().context("freezing the throwaway Postgres")
    }

    /// Stops and deletes a throwaway cluster (`pg_ctl stop`, off the async
    /// workers; a failure is logged); leaves an existing database alone.
    /// Close pools on it first.
    pub async fn stop(self) {
        if let Some(pg) = self.local {
            let _ = tokio::task::spawn_blocking(move || drop(pg)).await;
        }
    }
}
