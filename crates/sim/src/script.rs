//! The words the simulated STT "hears": the n-th utterance of a stream is the
//! n-th line of the script (cycling), so tests can assert exact transcripts.
//!
//! The default is a table-booking call that the simulated dialog bot
//! ([`crate::dialog`]) understands end to end: party size, name, time, a
//! confirmation (which triggers the availability tool and the booking), and
//! a goodbye.

/// The default caller script.
pub const DEFAULT_CALLER_SCRIPT: &[&str] = &[
    "Hi, I'd like to book a table for four people.",
    "The name is Alex Morgan.",
    "Tonight at seven thirty.",
    "Yes, please book it.",
    "Thank you, goodbye.",
];

/// The default script as owned strings.
pub fn default_script() -> Vec<String> {
    DEFAULT_CALLER_SCRIPT
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The line for utterance `index` (0-based), cycling through `script`.
/// An empty script yields an empty transcript.
pub fn line(script: &[String], index: usize) -> &str {
    if script.is_empty() {
        return "";
    }
    &script[index % script.len()]
}
