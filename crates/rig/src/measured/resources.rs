//! What the rig's processes used during a run: CPU seconds of the server,
//! the simulators, the generator (this process), the throwaway Postgres and
//! the whole machine, from two `/proc` readings, with the sampler's peaks.

use serde::Serialize;

use super::Ticks;
use super::procfs;
use super::sampler::Peaks;

/// What the processes used during a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Resources {
    pub wall_s: f64,
    pub server_cpu_s: f64,
    pub sims_cpu_s: f64,
    /// This process: the load generator (plus the bench's own bookkeeping).
    pub load_cpu_s: f64,
    /// The throwaway Postgres (0 when `CALLGATE_DATABASE_URL` is used).
    pub postgres_cpu_s: f64,
    /// All CPUs of the machine, every process: what the rig did not use is
    /// someone else's, and makes the measurement less clean.
    pub machine_cpu_s: f64,
    pub peaks: Peaks,
}

impl Resources {
    /// What the processes used between two CPU readings `wall_s` apart.
    pub fn between(
        before: Ticks,
        after: Ticks,
        clock_ticks: u64,
        wall_s: f64,
        peaks: Peaks,
    ) -> Self {
        let secs = |a: u64, b: u64| procfs::ticks_to_secs(b.saturating_sub(a), clock_ticks);
        Resources {
            wall_s,
            server_cpu_s: secs(before.server, after.server),
            sims_cpu_s: secs(before.sims, after.sims),
            load_cpu_s: secs(before.load, after.load),
            postgres_cpu_s: secs(before.postgres, after.postgres),
            machine_cpu_s: secs(before.machine, after.machine),
            peaks,
        }
    }

    /// CPU seconds the machine spent on anything but the rig.
    pub fn others_cpu_s(&self) -> f64 {
        let rig = self.server_cpu_s + self.sims_cpu_s + self.load_cpu_s + self.postgres_cpu_s;
        (self.machine_cpu_s - rig).max(0.0)
    }
}
