//! A child's CPU time and resident memory, read from `/proc` (no libc:
//! `unsafe` is denied workspace-wide, and `getconf` answers `CLK_TCK`).

use std::io;

/// `CLK_TCK` when `getconf` is missing or says something unexpected: the
/// value on every mainstream Linux architecture.
const DEFAULT_CLOCK_TICKS: u64 = 100;

/// User + system CPU time of a whole process (all its threads), in clock
/// ticks, from the text of `/proc/<pid>/stat`.
///
/// The command name (field 2) is in parentheses and may itself contain
/// spaces or parentheses, so fields are counted from the *last* `)`:
/// after it come field 3 (`state`) onwards, `utime` and `stime` being
/// fields 14 and 15.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The parent pid (field 4) and the CPU ticks of the process itself plus
/// its reaped children (`utime + stime + cutime + cstime`, fields 14–17).
pub fn parse_stat_ppid_and_ticks(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().take(15).collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks = fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((ppid, ticks))
}

/// CPU ticks of process `root` and its direct children (e.g. the
/// postmaster and its backends), reaped children included.
///
/// # Errors
/// `/proc` cannot be listed or `root` is gone.
pub fn tree_cpu_ticks(root: u32) -> io::Result<u64> {
    let own = std::fs::read_to_string(format!("/proc/{root}/stat"))?;
    let (_, mut total) = parse_stat_ppid_and_ticks(&own).ok_or_else(|| unexpected(root, "stat"))?;
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may exit between listing and reading: skip it.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((ppid, ticks)) = parse_stat_ppid_and_ticks(&stat)
            && ppid == root
        {
            total += ticks;
        }
    }
    Ok(total)
}

/// Busy CPU ticks of the whole machine (all CPUs: everything but `idle` and
/// `iowait`), from the text of `/proc/stat`.
pub fn parse_machine_busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user, so only the first eight add up.
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    Some(total.saturating_sub(idle))
}

/// Busy CPU ticks of the whole machine so far.
///
/// # Errors
/// `/proc/stat` is unreadable or unexpected.
pub fn machine_busy_ticks() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/stat")?;
    parse_machine_busy_ticks(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "/proc/stat has an unexpected format",
        )
    })
}

/// `VmRSS` in KiB from the text of `/proc/<pid>/status`.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
}

/// CPU ticks used so far by process `pid`.
///
/// # Errors
/// The process is gone or `/proc` is unreadable or unexpected.
pub fn cpu_ticks(pid: u32) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat_cpu_ticks(&text).ok_or_else(|| unexpected(pid, "stat"))
}

/// Resident memory of process `pid` now, in KiB.
///
/// # Errors
/// The process is gone or `/proc` is unreadable or unexpected.
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vm_rss_kib(&text).ok_or_else(|| unexpected(pid, "status"))
}

/// Descriptors of process `pid` by kind: TCP, UDP and Unix sockets (from
/// the socket inodes in `/proc/<pid>/net/*`), and everything else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FdKinds {
    pub tcp: usize,
    pub udp: usize,
    pub unix: usize,
    pub other: usize,
}

/// [`FdKinds`] of process `pid`.
///
/// # Errors
/// The process is gone or `/proc` cannot be read.
pub fn fd_kinds(pid: u32) -> io::Result<FdKinds> {
    let inodes = |files: &[&str], column: usize| -> std::collections::HashSet<String> {
        files
            .iter()
            .filter_map(|f| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
            .flat_map(|t| {
                t.lines()
                    .skip(1)
                    .filter_map(|l| l.split_whitespace().nth(column).map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let (tcp, udp, unix) = (
        inodes(&["tcp", "tcp6"], 9),
        inodes(&["udp", "udp6"], 9),
        inodes(&["unix"], 6),
    );
    let mut k = FdKinds::default();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let link = std::fs::read_link(e?.path()).unwrap_or_default();
        let link = link.to_string_lossy();
        let inode = link
            .strip_prefix("socket:[")
            .and_then(|r| r.strip_suffix(']'));
        match inode {
            Some(i) if tcp.contains(i) => k.tcp += 1,
            Some(i) if udp.contains(i) => k.udp += 1,
            Some(i) if unix.contains(i) => k.unix += 1,
            _ => k.other += 1,
        }
    }
    Ok(k)
}

fn unexpected(pid: u32, file: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("/proc/{pid}/{file} has an unexpected format"),
    )
}

/// Clock ticks per second (`getconf CLK_TCK`), 100 if it cannot be asked.
pub fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(DEFAULT_CLOCK_TICKS)
}

/// Ticks → seconds.
pub fn ticks_to_secs(ticks: u64, per_second: u64) -> f64 {
    ticks as f64 / per_second.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime_even_with_a_strange_command_name() {
        // Fields 14 and 15 are 1234 and 56; the name contains ") (" and spaces.
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    1234 56 0 0 20 0 9 0 358598 3133440 361 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(1_290));
        let real = "22117 (cat) R 22113 22113 15659 0 -1 4194304 97 0 0 0 7 3 0 0 20 0 1 0";
        assert_eq!(parse_stat_cpu_ticks(real), Some(10));
        assert_eq!(parse_stat_cpu_ticks("12 (short) S 1 2"), None);
        // Reaped children's time (fields 16 and 17: 7 and 8) counts for a tree.
        let with_children = "4242 (postgres) S 77 4242 4242 0 -1 0 0 0 0 0 5 6 7 8 20";
        assert_eq!(parse_stat_ppid_and_ticks(with_children), Some((77, 26)));
        assert_eq!(parse_stat_cpu_ticks("no parenthesis"), None);
    }

    #[test]
    fn rss_is_read_in_kib() {
        let status = "Name:\tcallgate\nVmPeak:\t  999 kB\nVmRSS:\t   51234 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss_kib(status), Some(51_234));
        assert_eq!(parse_vm_rss_kib("Name:\tkthread\n"), None);
    }

    #[test]
    fn machine_busy_time_excludes_idle_and_iowait() {
        let stat = "cpu  100 5 50 1000 20 3 2 1 40 0\ncpu0 50 2 25 500 10 1 1 0 20 0\nintr 1 2\n";
        // 100 + 5 + 50 + 3 + 2 + 1; guest (40) is already inside user.
        assert_eq!(parse_machine_busy_ticks(stat), Some(161));
        assert_eq!(parse_machine_busy_ticks("intr 1 2\n"), None);
        assert!(machine_busy_ticks().is_ok());
    }

    #[test]
    fn this_process_can_be_measured() {
        let me = std::process::id();
        assert!(rss_kib(me).unwrap() > 0);
        // CPU time only grows, so the process alone, read first, can never
        // exceed the tree (itself and its children) read after it.
        let own = cpu_ticks(me).unwrap();
        assert!(tree_cpu_ticks(me).unwrap() >= own);
        assert!(clock_ticks_per_second() > 0);
        assert!((ticks_to_secs(250, 100) - 2.5).abs() < 1e-9);
    }
}
