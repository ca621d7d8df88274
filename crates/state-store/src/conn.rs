//! The pool and the connection guard: every checkout and every statement
//! has a deadline, and a connection whose user was interrupted mid-statement
//! is discarded instead of going back to the pool in an unknown state.

use std::time::Duration;

use deadpool_postgres::{
    ClientWrapper, Manager, ManagerConfig, Object, PoolError, RecyclingMethod, Runtime, TimeoutType,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::config::StoreConfig;
use crate::error::StoreError;

/// Statement parameters as tokio-postgres takes them.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A snapshot of the pool, for health endpoints and tests.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    /// Connections currently open (idle + checked out).
    pub size: usize,
    /// Idle connections ready to be checked out.
    pub available: usize,
    /// Tasks waiting for a connection.
    pub waiting: usize,
    /// The configured maximum (`StoreConfig::pool_size`).
    pub max_size: usize,
}

/// deadpool with callgate's deadlines.
#[derive(Clone)]
pub(crate) struct Pool {
    pool: deadpool_postgres::Pool,
    checkout_timeout: Duration,
    connect_timeout: Duration,
    query_deadline: Duration,
}

impl Pool {
    /// A pool of at most `size` connections with `cfg`'s deadlines.
    pub(crate) fn new(cfg: &StoreConfig, size: usize) -> Result<Self, StoreError> {
        let manager = Manager::from_config(
            cfg.pg_config()?,
            NoTls,
            ManagerConfig {
                // `is_closed` only: a discarded connection never comes back,
                // so a returned one is known to be idle and healthy.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(size)
            .wait_timeout(Some(cfg.checkout_timeout))
            .create_timeout(Some(cfg.connect_timeout))
            .recycle_timeout(Some(cfg.checkout_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::InvalidConfig {
                reason: format!("pool: {e}"),
            })?;
        Ok(Self {
            pool,
            checkout_timeout: cfg.checkout_timeout,
            connect_timeout: cfg.connect_timeout,
            query_deadline: cfg.query_deadline(),
        })
    }

    pub(crate) fn status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus {
            size: s.size,
            available: s.available,
            waiting: s.waiting,
            max_size: s.max_size,
        }
    }

    /// Checks a connection out: at most `checkout_timeout` waiting for a free
    /// slot plus `connect_timeout` opening a new connection.
    pub(crate) async fn checkout(&self) -> Result<Conn, StoreError> {
        let bound = self.checkout_timeout + self.connect_timeout;
        let got = tokio::time::timeout(bound, self.pool.get()).await;
        let obj = match got {
            Ok(Ok(obj)) => obj,
            Ok(Err(e)) => return Err(self.map_pool_error(e)),
            Err(_elapsed) => return Err(self.checkout_timeout_error()),
        };
        Ok(Conn {
            obj: Some(obj),
            in_flight: false,
            in_tx: false,
            deadline: self.query_deadline,
            cancel_deadline: self.connect_timeout,
        })
    }

    fn map_pool_error(&self, e: PoolError) -> StoreError {
        match e {
            PoolError::Timeout(TimeoutType::Create) => StoreError::ConnectTimeout {
                after: self.connect_timeout,
            },
            PoolError::Timeout(TimeoutType::Wait | TimeoutType::Recycle) => {
                self.checkout_timeout_error()
            }
            PoolError::Backend(source) => StoreError::Connect { source },
            PoolError::Closed => StoreError::PoolClosed,
            other => StoreError::InvalidConfig {
                reason: format!("pool: {other}"),
            },
        }
    }

    fn checkout_timeout_error(&self) -> StoreError {
        StoreError::CheckoutTimeout {
            waited: self.checkout_timeout,
            pool_size: self.pool.status().max_size,
        }
    }
}

/// A checked-out connection. It goes back to the pool on drop only if no
/// statement or transaction was left unfinished; otherwise it is detached
/// from the pool (`Object::take`), its running statement is cancelled on
/// the server, and the socket is closed.
pub(crate) struct Conn {
    /// `Some` for the guard's whole life; taken only in `Drop`.
    obj: Option<Object>,
    /// A statement was started and has not completed: its future was
    /// dropped (cancellation) or its deadline passed.
    in_flight: bool,
    /// `BEGIN` ran and no `COMMIT` has succeeded yet.
    in_tx: bool,
    deadline: Duration,
    cancel_deadline: Duration,
}

impl Conn {
    /// Uses `deadline` instead of the statement deadline for later calls
    /// (migrations may legitimately run longer than a per-turn write).
    pub(crate) fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    fn client(&self) -> Result<&ClientWrapper, StoreError> {
        // `obj` is only `None` inside `Drop`, so this never fails in practice.
        self.obj.as_deref().ok_or(StoreError::PoolClosed)
    }

    /// One statement returning rows, prepared once per connection (cached).
    pub(crate) async fn query(
        &mut self,
        op: &'static str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        self.in_flight = true;
        let deadline = self.deadline;
        let client = self.client()?;
        let work = async {
            let stmt = client.prepare_cached(sql).await?;
            client.query(&stmt, params).await
        };
        let rows = tokio::time::timeout(deadline, work)
            .await
            .map_err(|_elapsed| StoreError::QueryTimeout {
                op,
                after: deadline,
            })?;
        // Completed (with rows or a server error): the connection is in a
        // known state again. A broken socket is caught by deadpool's recycle.
        self.in_flight = false;
        rows.map_err(|e| StoreError::db(op, e))
    }

    /// One statement returning the number of rows it affected.
    pub(crate) async fn execute(
        &mut self,
        op: &'static str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<u64, StoreError> {
        self.in_flight = true;
        let deadline = self.deadline;
        let client = self.client()?;
        let work = async {
            let stmt = client.prepare_cached(sql).await?;
            client.execute(&stmt, params).await
        };
        let n = tokio::time::timeout(deadline, work)
            .await
            .map_err(|_elapsed| StoreError::QueryTimeout {
                op,
                after: deadline,
            })?;
        self.in_flight = false;
        n.map_err(|e| StoreError::db(op, e))
    }

    /// Exactly one row expected.
    pub(crate) async fn query_one(
        &mut self,
        op: &'static str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Row, StoreError> {
        let mut rows = self.query(op, sql, params).await?;
        match rows.pop() {
            Some(row) if rows.is_empty() => Ok(row),
            _ => Err(StoreError::UnexpectedResult {
                op,
                detail: format!("expected exactly one row, got {}", rows.len() + 1),
            }),
        }
    }

    /// Unprepared statements (DDL, a migration's text).
    pub(crate) async fn batch(&mut self, op: &'static str, sql: &str) -> Result<(), StoreError> {
        self.in_flight = true;
        let deadline = self.deadline;
        let client = self.client()?;
        let res = tokio::time::timeout(deadline, client.batch_execute(sql))
            .await
            .map_err(|_elapsed| StoreError::QueryTimeout {
                op,
                after: deadline,
            })?;
        self.in_flight = false;
        res.map_err(|e| StoreError::db(op, e))
    }

    /// Opens a transaction; until [`Conn::commit`] succeeds the guard
    /// discards the connection on drop, so an abandoned transaction never
    /// returns to the pool.
    pub(crate) async fn begin(&mut self, op: &'static str) -> Result<(), StoreError> {
        self.in_tx = true;
        self.batch(op, "BEGIN").await
    }

    /// Commits the open transaction; the guard becomes reusable.
    pub(crate) async fn commit(&mut self, op: &'static str) -> Result<(), StoreError> {
        self.batch(op, "COMMIT").await?;
        self.in_tx = false;
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !(self.in_flight || self.in_tx) {
            return; // `obj` drops normally and returns to the pool
        }
        let Some(obj) = self.obj.take() else { return };
        let client = Object::take(obj);
        tracing::debug!("discarding a pooled connection left mid-statement");
        // Ask the server to stop the orphaned statement (it may be waiting on
        // a lock and holding others up); the socket closes when `client`
        // drops. The request is best effort and bounded.
        let token = client.cancel_token();
        let bound = self.cancel_deadline;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = tokio::time::timeout(bound, token.cancel_query(NoTls)).await;
            });
        }
        drop(client);
    }
}
