//! Owner fencing across instances, callgate's side: this instance's
//! heartbeat, closing the calls of instances that went silent, and closing
//! its own name's calls from before a restart. The SQL is
//! `state_store::ownership`.
//!
//! What it is: [`begin`] runs once in `server::start` before the listener
//! accepts a call — it closes the rows this `server.instance` owned before
//! (`instance_restart`: the process that served them is gone) and records
//! the first beat of this boot. [`run`] then beats every
//! `[ownership].heartbeat_interval_ms` and, after each beat that landed,
//! closes the open rows of instances whose latest beat is older than
//! `[ownership].lease_ms` (`owner_lost`), each with its cleanup receipt and
//! a bumped owner epoch. It also asks when the next other owner's lease
//! runs out and reclaims again at that moment, so a dead owner's calls are
//! closed as its lease ends rather than up to a beat later. The decisions —
//! reclaim only after this boot's own beat landed, when this instance's own
//! lease has lapsed, when another process took the name, whether a reclaim
//! between beats is still allowed — are the sans-IO [`Liveness`], driven
//! with `now`.
//!
//! What it never does: touch the call path (calls never wait on it, and it
//! never waits on a call), wait on Postgres without a bound (each statement
//! gets `[ownership].query_timeout_ms`; a slow one is a failed beat, not a
//! stalled loop), or close a call that is running here.
//!
//! How to drive it: `server::start` awaits [`begin`], then spawns
//! `run(app, boot, background_token)`; cancelling the token stops it
//! between ticks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use state_store::{Beat, BootId, ReclaimReason, Reclaimed, Store};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::app::App;
use crate::config::OwnershipConfig;
use crate::metrics as m;

/// Waited past a lease's end (by the database's clock, read over a round
/// trip) before reclaiming, so the statement finds the lease over.
const LAPSE_MARGIN: Duration = Duration::from_millis(20);

/// Bound on the start-up claim: it may close every row a crashed process
/// left (one statement), so it gets longer than a beat; the server does
/// not start without it.
const BEGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What one beat attempt came to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BeatResult {
    /// The beat landed for this boot.
    Recorded,
    /// Another boot holds this instance name now.
    Superseded(BootId),
    /// The statement failed or outlived its bound.
    Failed,
}

/// A change worth one log line.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// This boot's last landed beat is older than the lease: other
    /// instances may have closed its calls (their later writes are fenced).
    Lapsed {
        /// Age of the last landed beat.
        since: Duration,
    },
    /// A beat landed after a gap longer than the lease (reported whether
    /// or not a failed beat saw the lapse first: a paused process sees
    /// nothing until it runs again).
    Restored {
        /// How long no beat had landed.
        after: Duration,
    },
    /// Another process claimed this instance name.
    Superseded(BootId),
}

/// What [`Liveness::on_beat`] decided.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Close silent owners' rows now.
    pub reclaim: bool,
    /// What to log, if anything changed.
    pub change: Option<Change>,
}

/// The heartbeat policy, sans-IO: beat results and `now` in, whether to
/// reclaim and what changed out.
///
/// The policy: reclaim only after a landed beat of a boot that still holds
/// its name (an instance that cannot beat is the one most likely to be cut
/// off, and must not judge others), and only once this instance's beats
/// have landed steadily — no gap over two intervals, i.e. no missed beat —
/// for a whole lease. A missed beat (a Postgres stall, this process
/// paused) and the start both restart that wait: whatever stopped this
/// instance's beats may have stopped everyone's, and the others need the
/// same chance to beat again before anyone reads their silence as death.
#[derive(Debug)]
pub struct Liveness {
    interval: Duration,
    lease: Duration,
    last_landed: Instant,
    steady_since: Instant,
    /// The latest beat landed for this boot.
    healthy: bool,
    lapsed: bool,
    superseded: bool,
}

impl Liveness {
    /// Starts from the beat [`begin`] recorded at `claimed_at`.
    #[must_use]
    pub fn new(cfg: &OwnershipConfig, claimed_at: Instant) -> Self {
        Liveness {
            interval: cfg.interval(),
            lease: cfg.lease(),
            last_landed: claimed_at,
            steady_since: claimed_at,
            healthy: true,
            lapsed: false,
            superseded: false,
        }
    }

    /// A reloaded configuration's interval and lease.
    pub fn set_config(&mut self, cfg: &OwnershipConfig) {
        self.interval = cfg.interval();
        self.lease = cfg.lease();
    }

    /// Takes one beat's result at `now`.
    pub fn on_beat(&mut self, now: Instant, result: BeatResult) -> Verdict {
        self.healthy = result == BeatResult::Recorded;
        let (reclaim, change) = match result {
            BeatResult::Recorded => self.landed(now),
            BeatResult::Superseded(by) => {
                let first = !std::mem::replace(&mut self.superseded, true);
                (false, first.then_some(Change::Superseded(by)))
            }
            BeatResult::Failed => {
                let since = now.saturating_duration_since(self.last_landed);
                let lapsing = since > self.lease && !self.lapsed;
                self.lapsed |= lapsing;
                (false, lapsing.then_some(Change::Lapsed { since }))
            }
        };
        Verdict { reclaim, change }
    }

    fn landed(&mut self, now: Instant) -> (bool, Option<Change>) {
        let gap = now.saturating_duration_since(self.last_landed);
        self.last_landed = now;
        self.superseded = false;
        if gap > 2 * self.interval {
            self.steady_since = now;
        }
        let was_lapsed = std::mem::take(&mut self.lapsed);
        let change = (was_lapsed || gap > self.lease).then_some(Change::Restored { after: gap });
        let steady = now.saturating_duration_since(self.steady_since) >= self.lease;
        (steady, change)
    }

    /// Whether a reclaim between beats (when another owner's lease ends)
    /// may run at `now`: the latest beat landed, beats had been steady for
    /// a lease by then, and the next beat is not overdue (no gap over two
    /// intervals, the rule a landed beat applies).
    #[must_use]
    pub fn may_reclaim(&self, now: Instant) -> bool {
        self.healthy
            && !self.superseded
            && self
                .last_landed
                .saturating_duration_since(self.steady_since)
                >= self.lease
            && now.saturating_duration_since(self.last_landed) <= 2 * self.interval
    }

    /// Age of the last landed beat at `now`.
    #[must_use]
    pub fn beat_age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_landed)
    }
}

/// Claims this instance's name for a new boot: closes the rows it owned
/// before (`instance_restart`) and records the first beat. Awaited before
/// the listener binds.
///
/// # Errors
/// The claim failed or took longer than [`BEGIN_TIMEOUT`]: the server
/// must not admit calls under a name whose old rows it cannot close.
pub async fn begin(store: &Store, cfg: &OwnershipConfig) -> anyhow::Result<BootId> {
    let boot = BootId::new_random();
    let report = tokio::time::timeout(BEGIN_TIMEOUT, store.begin_boot(boot))
        .await
        .map_err(|_| anyhow::anyhow!("claiming the instance name timed out"))??;
    let instance = &store.config().instance;
    if let Some(p) = report.previous.filter(|p| p.beat_age < cfg.lease()) {
        warn!(
            %instance,
            previous_boot = %p.boot,
            beat_age_ms = p.beat_age.as_millis() as u64,
            "the previous process under this instance name beat within the lease: if it is still running, give each process its own server.instance"
        );
    }
    log_closed(&report.closed);
    info!(%instance, %boot, closed = report.closed.len(), "instance name claimed");
    Ok(boot)
}

/// Beats and reclaims until `stop` is cancelled.
pub async fn run(app: Arc<App>, boot: BootId, stop: CancellationToken) {
    let cfg = app.cfg().ownership.clone();
    let mut live = Liveness::new(&cfg, Instant::now());
    let mut every = cfg.heartbeat_interval_ms;
    let mut ticker = new_ticker(cfg.interval());
    // When another owner's lease ends, if before the next beat.
    let mut lapse: Option<tokio::time::Instant> = None;
    loop {
        let at_lapse = async {
            match lapse {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let cfg = tokio::select! {
            () = stop.cancelled() => return,
            () = at_lapse => {
                let cfg = app.cfg().ownership.clone();
                lapse = at_lapse_end(&app, boot, &cfg, &live).await;
                continue;
            }
            _ = ticker.tick() => app.cfg().ownership.clone(),
        };
        live.set_config(&cfg);
        lapse = tick(&app, boot, &cfg, &mut live).await;
        if cfg.heartbeat_interval_ms != every {
            every = cfg.heartbeat_interval_ms;
            ticker = new_ticker(cfg.interval());
        }
    }
}

fn new_ticker(every: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(every);
    // A late tick beats once, then the cadence resumes from there.
    t.set_missed_tick_behavior(MissedTickBehavior::Delay);
    t
}

/// One beat, and the reclaim it allows; returns when the next other
/// owner's lease ends, if a reclaim is allowed then.
async fn tick(
    app: &App,
    boot: BootId,
    cfg: &OwnershipConfig,
    live: &mut Liveness,
) -> Option<tokio::time::Instant> {
    let store = &app.call.store;
    let result = beat(store, boot, cfg.query_timeout()).await;
    let now = Instant::now();
    let verdict = live.on_beat(now, result);
    metrics::gauge!(m::OWNER_BEAT_AGE).set(live.beat_age(now).as_secs_f64());
    if let Some(c) = verdict.change {
        log_change(c, cfg);
        end_calls_owned_elsewhere(app, c, cfg).await;
    }
    if !verdict.reclaim {
        return None;
    }
    reclaim_lost(store, boot, cfg).await;
    next_lapse(store, cfg).await
}

/// Another owner's lease has just ended: reclaim its rows now rather than
/// at the next beat, if this instance is still fit to judge; then wait for
/// the next one.
async fn at_lapse_end(
    app: &App,
    boot: BootId,
    cfg: &OwnershipConfig,
    live: &Liveness,
) -> Option<tokio::time::Instant> {
    if !live.may_reclaim(Instant::now()) {
        return None;
    }
    reclaim_lost(&app.call.store, boot, cfg).await;
    next_lapse(&app.call.store, cfg).await
}

/// When the earliest lease of another owner of open rows ends (plus
/// [`LAPSE_MARGIN`]); `None` when none runs or the question failed (the
/// next beat's reclaim covers it).
async fn next_lapse(store: &Store, cfg: &OwnershipConfig) -> Option<tokio::time::Instant> {
    let asked = tokio::time::Instant::now();
    match tokio::time::timeout(cfg.query_timeout(), store.next_lapse(cfg.lease())).await {
        Ok(Ok(left)) => left.map(|left| asked + left + LAPSE_MARGIN),
        Ok(Err(e)) => {
            debug!(error = %e, "could not read the next lease end; the next beat reclaims");
            None
        }
        Err(_) => None,
    }
}

/// After a lapse (or when another process took this name), the calls
/// still running here whose records another instance closed are told so:
/// each says goodbye and ends `owner_fenced`, so no session has two
/// owners acting on it. Bounded; a failed check is retried at the next
/// lapse only — their writes are fenced meanwhile and the reconciler
/// reports them.
async fn end_calls_owned_elsewhere(app: &App, change: Change, cfg: &OwnershipConfig) {
    let running: Vec<_> = app.call.live.ids().into_iter().collect();
    let lost = match change {
        Change::Lapsed { .. } => return,
        // The new boot closed every row of this name at its start.
        Change::Superseded(_) => running,
        Change::Restored { .. } => {
            let check = app.call.store.owned_elsewhere(&running);
            match tokio::time::timeout(cfg.query_timeout(), check).await {
                Ok(Ok(lost)) => lost,
                Ok(Err(e)) => {
                    return warn!(error = %e, "could not check which calls are still ours");
                }
                Err(_) => return warn!("checking which calls are still ours timed out"),
            }
        }
    };
    if lost.is_empty() {
        return;
    }
    let told = app.call.live.lose(&lost);
    metrics::counter!(m::OWNER_FENCED_CALLS).increment(told as u64);
    for call in &lost {
        warn!(call_id = %call, "another instance closed this call's record: ending it here (owner_fenced)");
    }
}

async fn beat(store: &Store, boot: BootId, bound: Duration) -> BeatResult {
    let (result, label) = match tokio::time::timeout(bound, store.heartbeat(boot)).await {
        Ok(Ok(Beat::Recorded)) => (BeatResult::Recorded, "recorded"),
        Ok(Ok(Beat::Superseded { by })) => (BeatResult::Superseded(by), "superseded"),
        Ok(Err(e)) => {
            warn!(error = %e, "heartbeat failed");
            (BeatResult::Failed, "error")
        }
        Err(_) => {
            warn!(bound_ms = bound.as_millis() as u64, "heartbeat timed out");
            (BeatResult::Failed, "timeout")
        }
    };
    metrics::counter!(m::OWNER_HEARTBEATS, "result" => label).increment(1);
    result
}

async fn reclaim_lost(store: &Store, boot: BootId, cfg: &OwnershipConfig) {
    let bound = cfg.query_timeout();
    match tokio::time::timeout(bound, store.reclaim_lost(boot, cfg.lease())).await {
        Ok(Ok(closed)) => log_closed(&closed),
        Ok(Err(e)) => warn!(error = %e, "reclaiming silent owners' calls failed; next tick"),
        Err(_) => warn!(
            bound_ms = bound.as_millis() as u64,
            "reclaiming silent owners' calls timed out; next tick"
        ),
    }
}

/// One line per closed row (the operator's "which calls, from whom, why")
/// and the counter by reason.
fn log_closed(closed: &[Reclaimed]) {
    for r in closed {
        let last_beat = r
            .from_last_beat_at
            .map(unix_secs)
            .unwrap_or_else(|| "never".to_owned());
        let why = match r.reason {
            ReclaimReason::OwnerLost => "its owner stopped beating for longer than the lease",
            ReclaimReason::InstanceRestart => "its owner's instance name started again",
        };
        warn!(
            call_id = %r.call,
            from_instance = %r.from_instance,
            reason = r.reason.as_str(),
            last_beat,
            epoch_before = %r.epoch_before,
            epoch_after = %r.epoch_after,
            "closed a call whose owner is gone: {why}"
        );
    }
    for reason in ReclaimReason::ALL {
        let n = closed.iter().filter(|r| r.reason == reason).count();
        if n > 0 {
            metrics::counter!(m::SESSIONS_RECLAIMED, "reason" => reason.as_str())
                .increment(n as u64);
        }
    }
}

fn log_change(c: Change, cfg: &OwnershipConfig) {
    match c {
        Change::Lapsed { since } => error!(
            since_ms = since.as_millis() as u64,
            lease_ms = cfg.lease_ms,
            "this instance's last heartbeat is older than the lease: other instances may close its calls, and its writes to those are then fenced"
        ),
        Change::Restored { after } => {
            info!(after_ms = after.as_millis() as u64, "heartbeat restored")
        }
        Change::Superseded(by) => error!(
            holder = %by,
            "another process claimed this instance name and closed this process's calls (instance_restart); its writes are fenced — give each process its own server.instance"
        ),
    }
}

/// Seconds since the Unix epoch, for a log field.
fn unix_secs(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Beats every second, lease 5 s.
    fn cfg() -> OwnershipConfig {
        OwnershipConfig::default()
    }

    fn verdict(reclaim: bool, change: Option<Change>) -> Verdict {
        Verdict { reclaim, change }
    }

    /// Lands a beat every second from `from` to `to` (ms after `t0`).
    fn steady(l: &mut Liveness, t0: Instant, from: u64, to: u64) -> Verdict {
        let mut last = verdict(false, None);
        for at in (from..=to).step_by(1_000) {
            last = l.on_beat(t0 + ms(at), BeatResult::Recorded);
        }
        last
    }

    #[test]
    fn reclaims_only_after_a_lease_of_steady_landed_beats() {
        let t0 = Instant::now();
        let mut l = Liveness::new(&cfg(), t0);
        assert_eq!(steady(&mut l, t0, 1_000, 4_000), verdict(false, None));
        assert_eq!(steady(&mut l, t0, 5_000, 5_000), verdict(true, None));
        // A failed beat neither reclaims nor, short of two intervals, resets.
        assert_eq!(
            l.on_beat(t0 + ms(6_000), BeatResult::Failed),
            verdict(false, None)
        );
        assert_eq!(l.beat_age(t0 + ms(6_000)), ms(1_000));
        assert_eq!(
            l.on_beat(t0 + ms(6_500), BeatResult::Recorded),
            verdict(true, None)
        );
    }

    #[test]
    fn a_reclaim_between_beats_needs_a_steady_landed_and_current_beat() {
        let t0 = Instant::now();
        let mut l = Liveness::new(&cfg(), t0);
        steady(&mut l, t0, 1_000, 4_000);
        assert!(!l.may_reclaim(t0 + ms(4_500)), "not steady for a lease yet");
        steady(&mut l, t0, 5_000, 5_000);
        assert!(l.may_reclaim(t0 + ms(5_500)));
        assert!(l.may_reclaim(t0 + ms(7_000)));
        assert!(!l.may_reclaim(t0 + ms(7_001)), "the next beat is overdue");
        l.on_beat(t0 + ms(6_000), BeatResult::Failed);
        assert!(!l.may_reclaim(t0 + ms(6_100)), "the latest beat failed");
        l.on_beat(t0 + ms(7_000), BeatResult::Recorded);
        assert!(l.may_reclaim(t0 + ms(7_100)));
        l.on_beat(t0 + ms(8_000), BeatResult::Superseded(BootId::new_random()));
        assert!(
            !l.may_reclaim(t0 + ms(8_100)),
            "another boot holds the name"
        );
    }

    #[test]
    fn a_missed_beat_restarts_the_wait_so_others_can_beat_first() {
        let t0 = Instant::now();
        let mut l = Liveness::new(&cfg(), t0);
        steady(&mut l, t0, 1_000, 6_000);
        // A 3 s Postgres stall: two beats missed, none lapsed the lease.
        for at in [7_000, 8_000] {
            assert_eq!(
                l.on_beat(t0 + ms(at), BeatResult::Failed),
                verdict(false, None)
            );
        }
        assert_eq!(
            l.on_beat(t0 + ms(9_000), BeatResult::Recorded),
            verdict(false, None)
        );
        assert_eq!(steady(&mut l, t0, 10_000, 13_000), verdict(false, None));
        assert_eq!(steady(&mut l, t0, 14_000, 14_000), verdict(true, None));
    }

    #[test]
    fn a_lapse_past_the_lease_is_reported_once_and_its_end_too() {
        let t0 = Instant::now();
        let mut l = Liveness::new(&cfg(), t0);
        assert_eq!(
            l.on_beat(t0 + ms(5_000), BeatResult::Failed),
            verdict(false, None)
        );
        let lapsed = Change::Lapsed { since: ms(5_001) };
        assert_eq!(
            l.on_beat(t0 + ms(5_001), BeatResult::Failed),
            verdict(false, Some(lapsed))
        );
        assert_eq!(
            l.on_beat(t0 + ms(9_000), BeatResult::Failed),
            verdict(false, None)
        );
        let back = Change::Restored { after: ms(10_000) };
        assert_eq!(
            l.on_beat(t0 + ms(10_000), BeatResult::Recorded),
            verdict(false, Some(back))
        );
        assert_eq!(
            l.on_beat(t0 + ms(11_000), BeatResult::Recorded),
            verdict(false, None)
        );
    }

    #[test]
    fn a_paused_process_learns_of_its_lapse_from_its_next_beat() {
        let t0 = Instant::now();
        let mut l = Liveness::new(&cfg(), t0);
        steady(&mut l, t0, 1_000, 6_000);
        // SIGSTOP for 8 s: no failed beat saw it; the next one says so.
        let back = Change::Restored { after: ms(8_000) };
        assert_eq!(
            l.on_beat(t0 + ms(14_000), BeatResult::Recorded),
            verdict(false, Some(back))
        );
    }

    #[test]
    fn a_superseded_boot_never_reclaims_and_says_so_once() {
        let t0 = Instant::now();
        let mut l = Liveness::new(&cfg(), t0);
        steady(&mut l, t0, 1_000, 6_000);
        let other = BootId::new_random();
        assert_eq!(
            l.on_beat(t0 + ms(7_000), BeatResult::Superseded(other)),
            verdict(false, Some(Change::Superseded(other)))
        );
        assert_eq!(
            l.on_beat(t0 + ms(8_000), BeatResult::Superseded(other)),
            verdict(false, None)
        );
    }

    #[test]
    fn a_reloaded_lease_applies_to_the_next_judgement() {
        let t0 = Instant::now();
        let mut l = Liveness::new(&cfg(), t0);
        l.set_config(&OwnershipConfig {
            heartbeat_interval_ms: 500,
            lease_ms: 1_500,
            query_timeout_ms: 400,
        });
        assert_eq!(
            l.on_beat(t0 + ms(2_000), BeatResult::Failed),
            verdict(false, Some(Change::Lapsed { since: ms(2_000) }))
        );
    }
}
