//! Squeezing the server the way production does: pinned to one core under
//! a CFS quota (what a Kubernetes CPU limit sets), or sharing that core with
//! a CPU burner (a noisy neighbour), while the rig — Postgres, the
//! simulators and the load generator — runs on the other core.
//!
//! With `taskset` (util-linux) for affinity and a cgroup for the quota:
//! cgroup v1's `cpu` controller (`/sys/fs/cgroup/cpu/<name>/cpu.cfs_quota_us`)
//! where it is mounted, else cgroup v2's `cpu.max` (`/sys/fs/cgroup/<name>`,
//! the `cpu` controller enabled for the root's children). `unsafe` is
//! denied workspace-wide, so no `sched_setaffinity` call. The quota needs
//! root; burners need neither root nor a cgroup. [`Squeeze`] undoes what it set when dropped: the
//! burner is killed, the server moved back to the root group, the group
//! removed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};

/// CFS period: 100 ms, the kernel's (and Kubernetes') default.
const PERIOD_US: u64 = 100_000;

/// Where cgroup v1's `cpu` controller is mounted on this kind of machine.
const CPU_CGROUP_ROOT: &str = "/sys/fs/cgroup/cpu";

/// How the server is squeezed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum How {
    /// Pinned to core 0 with this share of it (0 < share ≤ 1).
    Quota(f64),
    /// Pinned to core 0 beside this many processes that burn it (CFS
    /// then gives the server about 1 / (n + 1) of the core).
    Burners(u32),
    /// Pinned to core 0, nothing else: the unthrottled reference.
    Pinned,
}

impl How {
    /// A label for the table.
    pub fn label(&self) -> String {
        match self {
            How::Quota(q) => format!("quota {q:.2}"),
            How::Burners(1) => "1 burner".into(),
            How::Burners(n) => format!("{n} burners"),
            How::Pinned => "pinned".into(),
        }
    }
}

/// What was set; undone on drop.
#[derive(Debug)]
pub struct Squeeze {
    group: Option<PathBuf>,
    burners: Vec<Child>,
}

/// Pins every thread of `pid` to `cpus` (a `taskset` list such as `0`).
///
/// # Errors
/// `taskset` is missing or refused.
pub fn pin(pid: u32, cpus: &str) -> anyhow::Result<()> {
    let ok = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running taskset (util-linux)")?
        .success();
    if !ok {
        bail!("taskset could not pin {pid} to CPU {cpus}");
    }
    Ok(())
}

/// Pins `root` and every process below it (a Postgres postmaster and its
/// backends; children forked later inherit the affinity).
///
/// # Errors
/// As [`pin`].
pub fn pin_tree(root: u32, cpus: &str) -> anyhow::Result<()> {
    pin(root, cpus)?;
    for entry in std::fs::read_dir("/proc")
        .context("listing /proc")?
        .flatten()
    {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = super::procfs::parse_stat_ppid_and_ticks(&stat).map(|(p, _)| p);
        if ppid == Some(root) {
            // A backend that exited in between is no error.
            let _ = pin(pid, cpus);
        }
    }
    Ok(())
}

impl Squeeze {
    /// Pins `server` to core 0 and applies `how`.
    ///
    /// # Errors
    /// The machine has fewer than two cores, or pinning, the cgroup or the
    /// burner could not be set up.
    pub fn apply(server: u32, how: How) -> anyhow::Result<Squeeze> {
        // Not `available_parallelism`: the bench has pinned itself to core 1
        // by now, and that answers for this process, not the machine.
        if !std::path::Path::new("/sys/devices/system/cpu/cpu1").exists() {
            bail!("squeezing the server needs two cores: one for it, one for the rig");
        }
        pin(server, "0")?;
        let mut s = Squeeze {
            group: None,
            burners: Vec::new(),
        };
        match how {
            How::Quota(share) => s.group = Some(quota_group(server, share)?),
            How::Burners(n) => {
                for _ in 0..n {
                    s.burners.push(burner()?);
                }
            }
            How::Pinned => {}
        }
        Ok(s)
    }
}

/// Where cgroup v2 is mounted (the unified hierarchy).
const CGROUP2_ROOT: &str = "/sys/fs/cgroup";

/// A cgroup with `share` of a core, holding `pid`: v1's `cpu` controller
/// where it is mounted, else v2's `cpu.max`.
fn quota_group(pid: u32, share: f64) -> anyhow::Result<PathBuf> {
    if !(share > 0.0 && share <= 1.0) {
        bail!("--cpu-quota is a share of one core, above 0 and at most 1");
    }
    let quota = (share * PERIOD_US as f64).round() as u64;
    let name = format!("callgate-squeeze-{pid}");
    let v1 = PathBuf::from(CPU_CGROUP_ROOT);
    let v2 = PathBuf::from(CGROUP2_ROOT);
    let (dir, limits) = if v1.join("cpu.cfs_quota_us").exists() {
        let limits = vec![
            ("cpu.cfs_period_us", PERIOD_US.to_string()),
            ("cpu.cfs_quota_us", quota.to_string()),
        ];
        (v1.join(name), limits)
    } else if v2.join("cgroup.controllers").exists() {
        // The root's children get the cpu controller (idempotent).
        std::fs::write(v2.join("cgroup.subtree_control"), "+cpu")
            .context("enabling the cgroup v2 cpu controller (needs root)")?;
        (
            v2.join(name),
            vec![("cpu.max", format!("{quota} {PERIOD_US}"))],
        )
    } else {
        bail!(
            "no cgroup cpu controller (v1 {CPU_CGROUP_ROOT} or v2 {CGROUP2_ROOT}); squeeze with --burners instead"
        );
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating {} (needs root)", dir.display()))?;
    for (file, value) in limits {
        std::fs::write(dir.join(file), value).with_context(|| format!("writing {file}"))?;
    }
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).context("writing cgroup.procs")?;
    Ok(dir)
}

/// A shell loop that burns core 0.
fn burner() -> anyhow::Result<Child> {
    Command::new("taskset")
        .args(["-c", "0", "sh", "-c", "while :; do :; done"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the CPU burner")
}

impl Drop for Squeeze {
    fn drop(&mut self) {
        for mut b in self.burners.drain(..) {
            let _ = b.kill();
            let _ = b.wait();
        }
        if let Some(dir) = self.group.take() {
            // Whatever is left in the group goes back to the root group (the
            // group's parent, in either version), then the empty group can be
            // removed.
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            let root = dir
                .parent()
                .unwrap_or(std::path::Path::new(CGROUP2_ROOT))
                .join("cgroup.procs");
            for pid in procs.lines() {
                let _ = std::fs::write(&root, pid);
            }
            let _ = std::fs::remove_dir(&dir);
        }
    }
}
