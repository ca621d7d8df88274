//! Samples the server while a run is in flight: resident memory from
//! `/proc` every 100 ms, and the admission gate's active/queued counts from
//! `GET /admin/status` every 500 ms (rarely enough not to load the server).

use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::procfs;

/// How often the server's RSS is read.
pub const RSS_EVERY: Duration = Duration::from_millis(100);
/// How often the admin status is polled.
const STATUS_EVERY: Duration = Duration::from_millis(500);

/// The highest values seen during a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Peaks {
    pub rss_kib: u64,
    pub active: u64,
    pub queued: u64,
    /// RSS samples taken (a run with none measured nothing).
    pub samples: u64,
    /// Highest p99 lateness of the server's media clock `/admin/status`
    /// reported, µs.
    pub lag_p99_us: u64,
    /// The instance ceiling's value the first time `/admin/status` showed
    /// it binding (state not `healthy`): where the instance began to refuse.
    pub ceiling_at_trip: Option<u64>,
}

impl Peaks {
    fn see_status(&mut self, status: &serde_json::Value) {
        let get = |k: &str| status["admission"][k].as_u64().unwrap_or(0);
        self.active = self.active.max(get("active"));
        self.queued = self.queued.max(get("queued"));
        let lag_ms = status["admission"]["instance"]["lag_p99_ms"]
            .as_f64()
            .unwrap_or(0.0);
        self.lag_p99_us = self.lag_p99_us.max((lag_ms * 1e3) as u64);
        let instance = &status["admission"]["instance"];
        let binding = instance["state"].as_str().is_some_and(|s| s != "healthy");
        if binding && self.ceiling_at_trip.is_none() {
            self.ceiling_at_trip = instance["ceiling"].as_u64();
        }
    }
}

/// A running sampler; [`Sampler::finish`] stops it and returns the peaks.
pub struct Sampler {
    stop: CancellationToken,
    rss: JoinHandle<(u64, u64)>,
    gate: JoinHandle<Peaks>,
}

impl Sampler {
    /// Starts sampling process `pid` and its `status_url`. The two samplers
    /// are separate tasks so a slow status answer never delays an RSS read.
    pub fn start(pid: u32, http: reqwest::Client, status_url: String) -> Sampler {
        let stop = CancellationToken::new();
        let rss = tokio::spawn(sample_rss(pid, stop.clone()));
        let gate = tokio::spawn(sample_status(http, status_url, stop.clone()));
        Sampler { stop, rss, gate }
    }

    /// Stops sampling and returns what was seen.
    pub async fn finish(self) -> Peaks {
        self.stop.cancel();
        let (rss_kib, samples) = self.rss.await.unwrap_or_default();
        let gate = self.gate.await.unwrap_or_default();
        Peaks {
            rss_kib,
            samples,
            ..gate
        }
    }
}

/// Highest RSS and the number of samples, until `stop`.
async fn sample_rss(pid: u32, stop: CancellationToken) -> (u64, u64) {
    let (mut peak, mut samples) = (0, 0);
    let mut tick = interval(RSS_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return (peak, samples),
            _ = tick.tick() => {}
        }
        if let Ok(kib) = procfs::rss_kib(pid) {
            peak = peak.max(kib);
            samples += 1;
        }
    }
}

/// Highest gate counts, until `stop`.
async fn sample_status(http: reqwest::Client, url: String, stop: CancellationToken) -> Peaks {
    let mut peaks = Peaks::default();
    let mut tick = interval(STATUS_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return peaks,
            _ = tick.tick() => {}
        }
        // A slow or failed poll only loses one sample; the client has a timeout.
        let poll = async {
            http.get(&url)
                .send()
                .await?
                .json::<serde_json::Value>()
                .await
        };
        tokio::select! {
            () = stop.cancelled() => return peaks,
            res = poll => if let Ok(body) = res { peaks.see_status(&body) },
        }
    }
}

fn interval(every: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_keep_the_highest_gate_counts() {
        let mut p = Peaks::default();
        p.see_status(&serde_json::json!({ "admission": { "active": 220, "queued": 7 } }));
        p.see_status(&serde_json::json!({ "admission": { "active": 12, "queued": 100 } }));
        p.see_status(&serde_json::json!({ "unexpected": true }));
        assert_eq!((p.active, p.queued), (220, 100));
    }

    #[test]
    fn the_ceiling_is_kept_from_the_first_status_that_shows_it_binding() {
        let mut p = Peaks::default();
        let status = |state: &str, ceiling: u64| serde_json::json!({ "admission": { "instance": { "state": state, "ceiling": ceiling } } });
        p.see_status(&status("healthy", 1_995));
        assert_eq!(p.ceiling_at_trip, None);
        p.see_status(&status("overloaded", 41));
        p.see_status(&status("overloaded", 30));
        p.see_status(&status("recovering", 33));
        assert_eq!(p.ceiling_at_trip, Some(41));
    }
}
