//! Store configuration and how it becomes a driver configuration.

use std::str::FromStr;
use std::time::Duration;

use crate::error::StoreError;

/// Extra client-side time beyond `statement_timeout` before a statement is
/// abandoned: the server normally cancels it first (a clean, typed error);
/// this deadline only fires when the server itself is stalled.
const QUERY_GRACE: Duration = Duration::from_secs(1);

/// How to reach Postgres and how long anything may wait for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// libpq-style `host=/tmp/x port=5432 user=postgres dbname=postgres`
    /// or a `postgres://` URL. A directory as `host` means a unix socket.
    pub conninfo: String,
    /// Maximum pooled connections. Size it for the write-behind writers plus
    /// the setup-time calls that can run at once (admissions per second ×
    /// setup latency), and keep it under the server's `max_connections`.
    pub pool_size: usize,
    /// Longest wait for a free pooled connection before `CheckoutTimeout`.
    pub checkout_timeout: Duration,
    /// Longest time to open (and authenticate) a new connection.
    pub connect_timeout: Duration,
    /// Server-side `statement_timeout`, set on every new connection; the
    /// client gives up one second later even if the server never answers.
    pub statement_timeout: Duration,
    /// This instance's name, recorded as the owner of the calls it opens.
    pub instance: String,
}

impl StoreConfig {
    /// A config with production defaults: 32 connections, 500 ms checkout,
    /// 3 s connect, 5 s statements.
    #[must_use]
    pub fn new(conninfo: impl Into<String>, instance: impl Into<String>) -> Self {
        Self {
            conninfo: conninfo.into(),
            pool_size: 32,
            checkout_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(5),
            instance: instance.into(),
        }
    }

    /// Client-side deadline for one statement.
    pub(crate) fn query_deadline(&self) -> Duration {
        self.statement_timeout + QUERY_GRACE
    }

    /// Checks the knobs and builds the driver config: connect timeout,
    /// `application_name`, and `statement_timeout` in the startup `options`
    /// so every pooled connection carries it from its first statement.
    pub(crate) fn pg_config(&self) -> Result<tokio_postgres::Config, StoreError> {
        self.validate()?;
        let mut pg = tokio_postgres::Config::from_str(&self.conninfo).map_err(|e| {
            StoreError::InvalidConfig {
                reason: format!("conninfo: {e}"),
            }
        })?;
        let timeout_opt = format!(
            "-c statement_timeout={}",
            self.statement_timeout.as_millis()
        );
        let options = match pg.get_options() {
            Some(existing) if !existing.trim().is_empty() => format!("{existing} {timeout_opt}"),
            _ => timeout_opt,
        };
        pg.options(options)
            .connect_timeout(self.connect_timeout)
            .application_name(format!("callgate:{}", self.instance));
        Ok(pg)
    }

    fn validate(&self) -> Result<(), StoreError> {
        let reason = if self.pool_size == 0 {
            "pool_size must be at least 1"
        } else if self.checkout_timeout.is_zero() {
            "checkout_timeout must be positive"
        } else if self.connect_timeout.is_zero() {
            "connect_timeout must be positive"
        } else if self.statement_timeout < Duration::from_millis(1) {
            "statement_timeout must be at least 1 ms"
        } else if self.instance.trim().is_empty() {
            "instance must not be empty"
        } else {
            return Ok(());
        };
        Err(StoreError::InvalidConfig {
            reason: reason.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_timeout_is_appended_to_existing_options() {
        let mut cfg = StoreConfig::new("host=/tmp/x user=postgres options='-c work_mem=4MB'", "a");
        cfg.statement_timeout = Duration::from_millis(1500);
        let pg = cfg.pg_config().unwrap();
        assert_eq!(
            pg.get_options(),
            Some("-c work_mem=4MB -c statement_timeout=1500")
        );
        assert_eq!(pg.get_application_name(), Some("callgate:a"));
    }

    #[test]
    fn urls_are_accepted_and_bad_knobs_refused() {
        let cfg = StoreConfig::new("postgres://postgres@localhost:5432/postgres", "a");
        assert!(cfg.pg_config().is_ok());
        let mut bad = cfg.clone();
        bad.pool_size = 0;
        assert!(matches!(
            bad.pg_config(),
            Err(StoreError::InvalidConfig { .. })
        ));
        let garbage = StoreConfig::new("host=/tmp port=notaport", "a");
        assert!(matches!(
            garbage.pg_config(),
            Err(StoreError::InvalidConfig { .. })
        ));
    }
}
