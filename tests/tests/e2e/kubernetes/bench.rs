//! The published figures the pod's resources are sized from, read from
//! `docs/benchmarks.md` (the newest entry of each benchmark is the current
//! one), so a new benchmark entry re-checks the manifest.

use super::repo;

/// What one call costs and what a surge peaks at.
#[derive(Debug)]
pub struct Figures {
    /// CPU per live call, in millicores: `bench sip`'s CPU ms per call
    /// divided by the call's length in s, the most expensive row.
    pub mcpu_per_call: f64,
    /// RSS per call, KiB: the top of `bench sip`'s widest range.
    pub rss_kib_per_call: f64,
    /// Server RSS at the worst `bench incident` surge, MiB (top of range).
    pub surge_peak_mib: f64,
    /// The capacity `bench incident` runs at.
    pub surge_capacity: f64,
    /// That peak as the table writes it (`117–121 MiB`).
    surge_cell: String,
}

impl Figures {
    pub fn published() -> Self {
        let text = std::fs::read_to_string(repo().join("docs/benchmarks.md")).unwrap();
        let sip = rows(current(section(&text, "## `bench sip`")));
        assert!(!sip.is_empty(), "no bench sip table");
        let mut mcpu_per_call: f64 = 0.0;
        let mut rss_kib_per_call: f64 = 0.0;
        for r in &sip {
            let (cpu, _) = number(&r[2]);
            let (_, rss) = number(&r[3]);
            let (secs, _) = number(&r[4]);
            mcpu_per_call = mcpu_per_call.max(cpu / secs);
            rss_kib_per_call = rss_kib_per_call.max(rss);
        }
        let incident = section(&text, "## `bench incident`");
        let surge_capacity = incident
            .split("capacity of ")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .expect("bench incident states its capacity");
        let (mut surge_peak_mib, mut surge_cell) = (0.0, String::new());
        for r in rows(current(incident)) {
            let cell = r.last().unwrap();
            let (_, hi) = number(cell);
            if hi > surge_peak_mib {
                (surge_peak_mib, surge_cell) = (hi, cell.clone());
            }
        }
        assert!(surge_peak_mib > 0.0, "no bench incident RSS");
        Figures {
            mcpu_per_call,
            rss_kib_per_call,
            surge_peak_mib,
            surge_capacity,
            surge_cell,
        }
    }

    /// How the manifest's comment must state them (ASCII ranges).
    pub fn as_stated(&self) -> Vec<String> {
        vec![
            format!("{:.1} mCPU per live call", self.mcpu_per_call),
            format!("{} KiB", self.rss_kib_per_call.round()),
            self.surge_cell.replace('–', "-"),
            format!("capacity {}", self.surge_capacity),
        ]
    }
}

/// From `heading` to the next `## ` heading.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(heading).unwrap_or_else(|| panic!("no {heading}"));
    let rest = &text[start + heading.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The newest `### ` entry of a section (entries are oldest first).
fn current(section: &str) -> &str {
    &section[section.rfind("\n### ").expect("an entry")..]
}

/// The cells of the first table's body rows.
fn rows(entry: &str) -> Vec<Vec<String>> {
    entry
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and |---|
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// `48.1 (45.8–50.3)` → (48.1, 50.3); `117–121 MiB` → (117, 121);
/// `≈10` → (10, 10).
fn number(cell: &str) -> (f64, f64) {
    let nums: Vec<f64> = cell
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert!(!nums.is_empty(), "no number in {cell:?}");
    (nums[0], nums.iter().copied().fold(f64::MIN, f64::max))
}

#[test]
fn cells_read_as_median_and_top_of_range() {
    assert_eq!(number("48.1 (45.8–50.3)"), (48.1, 50.3));
    assert_eq!(number("117–121 MiB"), (117.0, 121.0));
    assert_eq!(number("≈10"), (10.0, 10.0));
    let t = "intro\n\n### old\n| a | b |\n|---|---|\n| 1 | 2 |\n\n### new\n| a | b |\n|---|---|\n| 3 | 4 (3–5) |\ntext\n";
    assert_eq!(rows(current(t)), [["3", "4 (3–5)"]]);
}
