//! The migration runner: ordered, embedded, checksummed, serialized by an
//! advisory lock.
//!
//! Why not refinery or sqlx-migrate: one small loop instead of another
//! dependency tree; checksums that refuse an edited migration instead of
//! silently skipping it; and `pg_advisory_xact_lock`, so several instances
//! starting at once apply each migration exactly once.

use std::fmt::Write as _;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::conn::{Conn, Pool};
use crate::error::StoreError;

/// One embedded SQL migration.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Migration {
    /// Applied in ascending order; never reused.
    pub version: i32,
    /// File stem, recorded in `schema_migrations.name`.
    pub name: &'static str,
    /// The file's text, run as one transaction.
    pub sql: &'static str,
}

/// Every migration, in order. Append only: an applied migration's text must
/// never change (the runner refuses it).
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_init",
        sql: include_str!("../../../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "0002_partner",
        sql: include_str!("../../../migrations/0002_partner.sql"),
    },
    Migration {
        version: 3,
        name: "0003_reconcile",
        sql: include_str!("../../../migrations/0003_reconcile.sql"),
    },
    Migration {
        version: 4,
        name: "0004_instance_events",
        sql: include_str!("../../../migrations/0004_instance_events.sql"),
    },
    Migration {
        version: 5,
        name: "0005_instance_heartbeats",
        sql: include_str!("../../../migrations/0005_instance_heartbeats.sql"),
    },
    Migration {
        version: 6,
        name: "0006_carrier_call_lookup",
        sql: include_str!("../../../migrations/0006_carrier_call_lookup.sql"),
    },
    Migration {
        version: 7,
        name: "0007_refusal_lookup",
        sql: include_str!("../../../migrations/0007_refusal_lookup.sql"),
    },
    Migration {
        version: 8,
        name: "0008_turn_latency",
        sql: include_str!("../../../migrations/0008_turn_latency.sql"),
    },
    Migration {
        version: 9,
        name: "0009_carrier_end",
        sql: include_str!("../../../migrations/0009_carrier_end.sql"),
    },
];

/// Advisory lock key shared by every callgate instance ("callgate" in ASCII).
const LOCK_KEY: i64 = 0x6361_6c6c_6761_7465;

/// A migration may rewrite tables; it gets far longer than a per-turn write.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(120);

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)";

/// Applies every migration in `set` not yet recorded; returns the names of
/// the ones it applied (empty when the schema was already current).
pub(crate) async fn run(pool: &Pool, set: &[Migration]) -> Result<Vec<String>, StoreError> {
    let mut conn = pool.checkout().await?;
    conn.set_deadline(MIGRATION_TIMEOUT);
    ensure_table(&mut conn).await?;
    let mut applied = Vec::new();
    for m in set {
        if apply_one(&mut conn, m).await? {
            tracing::info!(version = m.version, name = m.name, "migration applied");
            applied.push(m.name.to_owned());
        }
    }
    warn_about_unknown_versions(&mut conn, set).await?;
    Ok(applied)
}

/// Creates the bookkeeping table under the lock (two instances racing on
/// `CREATE TABLE IF NOT EXISTS` could otherwise both try to create it).
async fn ensure_table(conn: &mut Conn) -> Result<(), StoreError> {
    begin_locked(conn).await?;
    conn.batch("migrate", CREATE_TABLE).await?;
    conn.commit("migrate").await
}

async fn begin_locked(conn: &mut Conn) -> Result<(), StoreError> {
    conn.begin("migrate").await?;
    let timeout = format!(
        "SET LOCAL statement_timeout = {}",
        MIGRATION_TIMEOUT.as_millis()
    );
    conn.batch("migrate", &timeout).await?;
    conn.query("migrate", "SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await?;
    Ok(())
}

/// One migration in its own transaction under the lock. `Ok(false)` when it
/// was already applied with the same checksum.
async fn apply_one(conn: &mut Conn, m: &Migration) -> Result<bool, StoreError> {
    let embedded = checksum(m.sql);
    begin_locked(conn).await?;
    let recorded = conn
        .query(
            "migrate",
            "SELECT checksum FROM schema_migrations WHERE version = $1",
            &[&m.version],
        )
        .await?;
    if let Some(row) = recorded.first() {
        let recorded: String = row
            .try_get(0)
            .map_err(|e| StoreError::decode("migrate", &e))?;
        // Nothing was written; committing just ends the transaction.
        conn.commit("migrate").await?;
        if recorded != embedded {
            return Err(StoreError::MigrationChanged {
                version: m.version,
                name: m.name.to_owned(),
                recorded,
                embedded,
            });
        }
        return Ok(false);
    }
    conn.batch("migrate", m.sql).await?;
    conn.query(
        "migrate",
        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        &[&m.version, &m.name, &embedded],
    )
    .await?;
    conn.commit("migrate").await?;
    Ok(true)
}

/// A database migrated by a newer build is legal during a rolling deploy,
/// but worth saying out loud.
async fn warn_about_unknown_versions(conn: &mut Conn, set: &[Migration]) -> Result<(), StoreError> {
    let rows = conn
        .query(
            "migrate",
            "SELECT version, name FROM schema_migrations",
            &[],
        )
        .await?;
    for row in rows {
        let version: i32 = row
            .try_get(0)
            .map_err(|e| StoreError::decode("migrate", &e))?;
        if !set.iter().any(|m| m.version == version) {
            let name: String = row
                .try_get(1)
                .map_err(|e| StoreError::decode("migrate", &e))?;
            tracing::warn!(
                version,
                name,
                "database has a migration this build does not know"
            );
        }
    }
    Ok(())
}

/// Lowercase hex sha256 of a migration's text.
pub(crate) fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_ordered_and_unique() {
        let versions: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
        let mut sorted = versions.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(versions, sorted);
        assert!(MIGRATIONS.iter().all(|m| !m.sql.trim().is_empty()));
        // The name is the file stem and starts with the zero-padded version.
        for m in MIGRATIONS {
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn checksum_is_hex_sha256() {
        assert_eq!(
            checksum(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(checksum("a"), checksum("a "));
    }
}
