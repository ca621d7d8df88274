//! `callgate-test-support` — the seeded input mutator of the stable "smoke
//! fuzz" unit tests. Dev-only: crates take it as a `[dev-dependencies]`
//! entry, and it is never published.
//!
//! What it is: CI runs only the stable test suite, where libFuzzer is not
//! available, so every parser of untrusted input also has a unit test that
//! feeds it a few thousand mutants of valid messages and asserts the same
//! invariants as its cargo-fuzz target (`fuzz/README.md`). This crate is
//! the mutator those tests share: [`Mutator`] mutates entries of a corpus,
//! [`Rng`] draws the shapes audio and protocol code is sensitive to
//! (texts, sample runs, chunk lengths).
//!
//! The mutations are the cheap structural ones that find parser bugs: bit
//! flips, interesting bytes, truncation, deletion, duplication, splices of
//! two corpus entries and insertion of JSON-ish or domain tokens.
//!
//! What it never does: read the clock, the environment or the file system,
//! or draw entropy from anywhere but its seed — a seed gives the same
//! inputs on every machine, so a failure replays exactly; depend on
//! anything beyond `std`; or catch a panic — a failing check still fails
//! its test, after the iteration and the input that broke it are printed
//! to stderr.
//!
//! How to drive it: build a [`Mutator`] from a seed, a corpus of valid
//! inputs and the protocol's tokens, then hand [`Mutator::run_bytes`] or
//! [`Mutator::run_text`] the check to run on each mutant:
//!
//! ```
//! use callgate_test_support::Mutator;
//!
//! let mut m = Mutator::new(7, &[r#"{"event":"mark"}"#], &["\"name\""]);
//! m.run_text(100, |text| {
//!     // The parser under test, and the invariants on what it returned.
//!     let _ = text.parse::<u32>();
//! });
//! ```
//!
//! The fuzz targets never link this crate: its users are the `#[cfg(test)]`
//! smoke modules, which the fuzz build does not compile.

/// Inputs never grow past this: the parsers under test see frames of a few
/// hundred bytes, and a bounded size keeps every test well under a second.
const MAX_LEN: usize = 4_096;

/// xorshift64*: tiny and fast; only used to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator for `seed`; equal seeds give equal sequences.
    pub fn new(seed: u64) -> Self {
        // The state must never be zero.
        Rng((seed ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of `items` (non-empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// A short string mixing ASCII, JSON metacharacters and multi-byte
    /// characters (names, ids, marks).
    pub fn text(&mut self, max_chars: usize) -> String {
        const CHARS: &[char] = &[
            'a',
            'Z',
            '0',
            '9',
            '-',
            '_',
            ' ',
            '"',
            '\\',
            '/',
            '{',
            '\n',
            '\u{0}',
            'é',
            '€',
            '\u{1F600}',
            '\u{202E}',
        ];
        let n = self.below(max_chars + 1);
        (0..n).map(|_| *self.pick(CHARS)).collect()
    }

    /// Linear samples in shapes that stress audio code: silence, full-scale
    /// square waves, `i16::MIN`, white noise, quiet noise and bursts.
    pub fn samples(&mut self, max_len: usize) -> Vec<i16> {
        let len = self.below(max_len + 1);
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let run = (1 + self.below(400)).min(len - out.len());
            let shape = self.below(6);
            for i in 0..run {
                out.push(match shape {
                    0 => 0,
                    1 => {
                        if (i / 8) % 2 == 0 {
                            i16::MAX
                        } else {
                            i16::MIN
                        }
                    }
                    2 => self.next_u64() as i16,
                    3 => (self.next_u64() as i16) >> 10,
                    4 => *self.pick(&[i16::MIN, i16::MAX, -1, 1]),
                    _ => ((i as f32 * 0.3).sin() * 12_000.0) as i16,
                });
            }
        }
        out
    }

    /// Splits `len` items into random chunk lengths (some empty), as a
    /// network would cut a stream into frames.
    pub fn chunk_lengths(&mut self, len: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut left = len;
        while left > 0 {
            let n = self.below(left.min(700) + 1);
            out.push(n);
            left -= n;
        }
        out
    }
}

/// Tokens that steer JSON parsers into their corners.
pub const JSON_TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "null",
    "true",
    "false",
    "0",
    "-0",
    "-1",
    "1e999",
    "1.5e-300",
    "18446744073709551616",
    "-9223372036854775809",
    "\"NaN\"",
    "\"inf\"",
    "\"-inf\"",
    "\" 7 \"",
    "\"\"",
    "\" \"",
    "\"true\"",
    "[]",
    "{}",
    "\u{0}",
    "é",
    "\u{10FFFF}",
    "\u{202E}",
    " ",
    "\n",
    "=",
    "==",
    "+",
    "/",
    "AAAA",
    "////",
];

/// Bytes that matter in a text or audio frame.
const BYTES: &[u8] = &[
    0x00, 0x01, 0x7F, 0x80, 0xFF, b'"', b'\\', b'{', b'}', b'[', b',', b':', b' ', b'=', b'+',
    b'/', 0xC3, 0xED, 0xF4,
];

/// Mutates entries of a corpus of valid inputs.
#[derive(Debug)]
pub struct Mutator {
    rng: Rng,
    corpus: Vec<Vec<u8>>,
    tokens: Vec<&'static str>,
}

impl Mutator {
    /// A mutator over `corpus` (non-empty) whose insertions draw from
    /// [`JSON_TOKENS`] plus `tokens` (field names and values of the protocol).
    pub fn new<S: AsRef<[u8]>>(seed: u64, corpus: &[S], tokens: &[&'static str]) -> Self {
        assert!(!corpus.is_empty(), "a mutator needs at least one input");
        Mutator {
            rng: Rng::new(seed),
            corpus: corpus.iter().map(|c| c.as_ref().to_vec()).collect(),
            tokens: JSON_TOKENS.iter().chain(tokens).copied().collect(),
        }
    }

    /// The mutator's random source, for a test that builds inputs of
    /// its own alongside the mutants.
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// The next input: a corpus entry with one to four mutations, or one
    /// unchanged entry in sixteen so the valid path stays exercised.
    pub fn next_bytes(&mut self) -> Vec<u8> {
        let mut buf = self.corpus[self.rng.below(self.corpus.len())].clone();
        if self.rng.one_in(16) {
            return buf;
        }
        for _ in 0..=self.rng.below(4) {
            self.mutate_once(&mut buf);
        }
        buf.truncate(MAX_LEN);
        buf
    }

    /// [`Mutator::next_bytes`] as text (invalid UTF-8 replaced), for parsers
    /// that take `&str`.
    pub fn next_text(&mut self) -> String {
        String::from_utf8_lossy(&self.next_bytes()).into_owned()
    }

    /// Runs `check` on `iterations` text inputs; a panic inside `check`
    /// reports the iteration and the input before it propagates.
    pub fn run_text(&mut self, iterations: usize, mut check: impl FnMut(&str)) {
        for i in 0..iterations {
            let input = self.next_text();
            let _report = ReportOnPanic(i, input.as_bytes());
            check(&input);
        }
    }

    /// [`Mutator::run_text`] for byte inputs.
    pub fn run_bytes(&mut self, iterations: usize, mut check: impl FnMut(&[u8])) {
        for i in 0..iterations {
            let input = self.next_bytes();
            let _report = ReportOnPanic(i, &input);
            check(&input);
        }
    }

    fn mutate_once(&mut self, buf: &mut Vec<u8>) {
        let len = buf.len();
        match self.rng.below(9) {
            0 if len > 0 => {
                let i = self.rng.below(len);
                buf[i] ^= 1 << self.rng.below(8);
            }
            1 if len > 0 => {
                let i = self.rng.below(len);
                buf[i] = *self.rng.pick(BYTES);
            }
            2 => buf.truncate(self.rng.below(len + 1)),
            3 if len > 0 => {
                let (a, b) = self.range(len);
                buf.drain(a..b);
            }
            4 if len > 0 => {
                let (a, b) = self.range(len);
                let copy = buf[a..b].to_vec();
                let at = self.rng.below(len + 1);
                buf.splice(at..at, copy);
            }
            5 => {
                let other = &self.corpus[self.rng.below(self.corpus.len())];
                let cut = self.rng.below(other.len() + 1);
                let keep = self.rng.below(len + 1);
                buf.truncate(keep);
                buf.extend_from_slice(&other[cut..]);
            }
            6 | 7 => {
                let token = *self.rng.pick(&self.tokens);
                let at = self.insertion_point(buf);
                buf.splice(at..at, token.bytes());
            }
            _ => {
                // Replace a JSON value: from just after a `:` up to the next
                // `,` or `}` becomes a token.
                let colons: Vec<usize> = buf
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b':')
                    .map(|(i, _)| i + 1)
                    .collect();
                if colons.is_empty() {
                    return;
                }
                let start = *self.rng.pick(&colons);
                let token = *self.rng.pick(&self.tokens);
                let end = buf[start..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}'))
                    .map_or(buf.len(), |e| start + e);
                buf.splice(start..end, token.bytes());
            }
        }
    }

    /// A random non-empty range inside `0..len` (`len > 0`).
    fn range(&mut self, len: usize) -> (usize, usize) {
        let a = self.rng.below(len);
        let b = a + 1 + self.rng.below((len - a).min(64));
        (a, b)
    }

    /// Usually next to a JSON metacharacter, where tokens do most damage.
    fn insertion_point(&mut self, buf: &[u8]) -> usize {
        let meta: Vec<usize> = buf
            .iter()
            .enumerate()
            .filter(|(_, b)| matches!(b, b'"' | b':' | b',' | b'{' | b'['))
            .map(|(i, _)| i + 1)
            .collect();
        if meta.is_empty() || self.rng.one_in(4) {
            self.rng.below(buf.len() + 1)
        } else {
            *self.rng.pick(&meta)
        }
    }
}

/// Prints the failing iteration and input when a check panics.
struct ReportOnPanic<'a>(usize, &'a [u8]);

impl Drop for ReportOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "smoke fuzz: iteration {} failed on input {:?}",
                self.0,
                String::from_utf8_lossy(self.1)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CORPUS: &[&str] = &[r#"{"event":"media","media":{"payload":"AAAA"}}"#, "x"];

    #[test]
    fn a_seed_gives_the_same_inputs_every_time() {
        let run = |seed| {
            let mut m = Mutator::new(seed, CORPUS, &["\"event\""]);
            let texts: Vec<String> = (0..200).map(|_| m.next_text()).collect();
            (texts, m.rng().samples(500), m.rng().chunk_lengths(900))
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn mutants_stay_bounded_and_chunks_cover_the_input() {
        let mut m = Mutator::new(0, CORPUS, &[]);
        m.run_bytes(2_000, |b| assert!(b.len() <= MAX_LEN));
        let lengths = m.rng().chunk_lengths(10_000);
        assert_eq!(lengths.iter().sum::<usize>(), 10_000);
    }
}
