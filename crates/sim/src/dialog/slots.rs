//! Slot extraction for the booking bot: pure functions from a transcript to
//! party size, name and time. Deliberately small and rule-based; it must
//! understand [`crate::script::DEFAULT_CALLER_SCRIPT`] and the common
//! phrasings of the same facts.

/// Which slot the bot asked for last: bare answers ("Four.", "It's Alex.")
/// only count for the slot that was asked.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Expecting {
    PartySize,
    Name,
    Time,
    Nothing,
}

/// What one utterance said about the booking.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extracted {
    pub party_size: Option<u32>,
    /// Capitalised words, e.g. `Alex Morgan`.
    pub name: Option<String>,
    /// 24-hour `HH:MM`; 1–11 without am/pm is taken as evening.
    pub time: Option<String>,
}

/// One word of the transcript, punctuation trimmed.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    /// As spoken (case kept), for names.
    pub raw: String,
    /// Lower case, `p.m` → `pm`.
    pub lower: String,
    /// Followed by `, . ! ? ;`: a name stops here.
    pub ends_clause: bool,
}

/// Splits a transcript into tokens.
pub(crate) fn tokenize(text: &str) -> Vec<Token> {
    text.split_whitespace()
        .filter_map(|piece| {
            let ends_clause = piece.ends_with([',', '.', '!', '?', ';']);
            let raw = piece
                .trim_start_matches(|c: char| !c.is_alphanumeric())
                .trim_end_matches(|c: char| !c.is_alphanumeric());
            if raw.is_empty() {
                return None;
            }
            let lower = raw.to_lowercase().replace("p.m", "pm").replace("a.m", "am");
            Some(Token {
                raw: raw.to_owned(),
                lower: lower.replace('’', "'"),
                ends_clause,
            })
        })
        .collect()
}

/// Extracts every slot the utterance mentions.
pub fn extract(text: &str, expecting: Expecting) -> Extracted {
    let tokens = tokenize(text);
    let time = find_time(&tokens);
    let consumed = time.as_ref().map(|(_, r)| r.clone()).unwrap_or(0..0);
    Extracted {
        party_size: find_party(&tokens, &consumed, expecting == Expecting::PartySize),
        name: find_name(&tokens, expecting == Expecting::Name),
        time: time.map(|(t, _)| t),
    }
}

const SMALL: [&str; 20] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// `4`, `four` → 4 (words one … twenty, digits up to 99).
pub(crate) fn number(word: &str) -> Option<u32> {
    if let Some(i) = SMALL.iter().position(|w| *w == word) {
        return u32::try_from(i + 1).ok();
    }
    if word.is_empty() || word.len() > 2 || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

/// 4 → `four` for 1–20, digits above.
pub fn number_words(n: u32) -> String {
    match usize::try_from(n)
        .ok()
        .and_then(|i| SMALL.get(i.wrapping_sub(1)))
    {
        Some(w) => (*w).to_owned(),
        None => n.to_string(),
    }
}

fn lower_at(tokens: &[Token], i: usize) -> &str {
    tokens.get(i).map_or("", |t| t.lower.as_str())
}

/// Party size: a number next to `people`/`guests`/`of us`, after
/// `for`/`of`, or a bare number when the party size was asked. Numbers
/// that are part of the time never count.
fn find_party(tokens: &[Token], time: &std::ops::Range<usize>, asked: bool) -> Option<u32> {
    let mut bare = None;
    for (i, tok) in tokens.iter().enumerate() {
        if time.contains(&i) {
            continue;
        }
        let Some(n) = number(&tok.lower).filter(|n| *n > 0) else {
            continue;
        };
        let next = lower_at(tokens, i + 1);
        let prev = if i > 0 { lower_at(tokens, i - 1) } else { "" };
        let counted = matches!(
            next,
            "people" | "persons" | "person" | "guests" | "of" | "adults"
        );
        if counted || matches!(prev, "for" | "of") {
            return Some(n);
        }
        bare = bare.or(Some(n));
    }
    bare.filter(|_| asked)
}

/// Words that end (or rule out) a name.
const NOT_NAME: &[&str] = &[
    "a",
    "an",
    "and",
    "the",
    "at",
    "for",
    "please",
    "tonight",
    "today",
    "tomorrow",
    "thanks",
    "thank",
    "table",
    "booking",
    "people",
    "looking",
    "calling",
    "trying",
    "wondering",
    "here",
    "fine",
    "good",
    "great",
    "okay",
    "ok",
    "sorry",
    "not",
    "just",
    "so",
    "going",
    "yes",
    "no",
    "interested",
    "about",
    "with",
    "in",
    "on",
    "to",
    "is",
    "name",
    "my",
    "me",
    "i",
    "we",
];

/// The name after `name is`, `under`, and — when the name was asked —
/// `I'm`, `it's`, `this is`, `call me`.
fn find_name(tokens: &[Token], asked: bool) -> Option<String> {
    let words: Vec<&str> = tokens.iter().map(|t| t.lower.as_str()).collect();
    for i in 0..words.len() {
        let start = match (words[i], words.get(i + 1).copied()) {
            ("name", Some("is")) => i + 2,
            ("name's", _) => i + 1,
            ("under", _) => skip_the_name(&words, i + 1),
            ("i'm" | "it's", _) if asked => i + 1,
            ("i" | "it" | "this", Some("am" | "is")) if asked => i + 2,
            ("call", Some("me")) if asked => i + 2,
            _ => continue,
        };
        if let Some(name) = name_at(tokens, start) {
            return Some(name);
        }
    }
    None
}

/// `under the name X` / `under name X` → index of X.
fn skip_the_name(words: &[&str], i: usize) -> usize {
    match (words.get(i).copied(), words.get(i + 1).copied()) {
        (Some("the"), Some("name")) => i + 2,
        (Some("name"), _) => i + 1,
        _ => i,
    }
}

/// Up to three name words from `start`, capitalised; stops at punctuation,
/// a number or a word that cannot be part of a name.
fn name_at(tokens: &[Token], start: usize) -> Option<String> {
    let mut parts = Vec::new();
    for tok in tokens.iter().skip(start).take(3) {
        let plausible = tok
            .raw
            .chars()
            .all(|c| c.is_alphabetic() || c == '\'' || c == '-');
        if !plausible || NOT_NAME.contains(&tok.lower.as_str()) || number(&tok.lower).is_some() {
            break;
        }
        parts.push(capitalise(&tok.raw));
        if tok.ends_clause {
            break;
        }
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The first time mentioned, as `HH:MM`, with the token range it used.
fn find_time(tokens: &[Token]) -> Option<(String, std::ops::Range<usize>)> {
    (0..tokens.len()).find_map(|i| time_at(tokens, i))
}

/// A time starting at token `i`, if any.
fn time_at(tokens: &[Token], i: usize) -> Option<(String, std::ops::Range<usize>)> {
    let word = lower_at(tokens, i);
    let prev = if i > 0 { lower_at(tokens, i - 1) } else { "" };
    // "half past seven", "quarter past eight"
    if matches!(word, "half" | "quarter") && lower_at(tokens, i + 1) == "past" {
        let hour = number(lower_at(tokens, i + 2)).filter(|h| (1..=12).contains(h))?;
        let minute = if word == "half" { 30 } else { 15 };
        let (suffix, used) = suffix_at(tokens, i + 3);
        return Some((clock(hour, minute, suffix)?, i..i + 3 + used));
    }
    // "7:30", "7:30pm", "19:30", "8pm"
    let (digits, glued) = split_suffix(word);
    if let Some((h, m)) = digits.split_once(':') {
        let (hour, minute) = (h.parse().ok()?, m.parse().ok()?);
        let (suffix, used) = glued.map_or_else(|| suffix_at(tokens, i + 1), |s| (Some(s), 0));
        return Some((clock(hour, minute, suffix)?, i..i + 1 + used));
    }
    let hour = number(digits).filter(|h| (1..=12).contains(h))?;
    if let Some(s) = glued {
        return Some((clock(hour, 0, Some(s))?, i..i + 1));
    }
    // "seven thirty", "eight o'clock", "8 pm", "at eight"
    let (minute, used_min) = minute_at(tokens, i + 1);
    let (suffix, used_suf) = suffix_at(tokens, i + 1 + used_min);
    let marked = used_min > 0 || suffix.is_some() || matches!(prev, "at" | "around" | "by");
    marked.then_some(())?;
    Some((clock(hour, minute, suffix)?, i..i + 1 + used_min + used_suf))
}

/// `8pm` → (`8`, pm); `7:30` → (`7:30`, none).
fn split_suffix(word: &str) -> (&str, Option<Meridiem>) {
    if let Some(d) = word.strip_suffix("pm") {
        return (d, Some(Meridiem::Pm));
    }
    if let Some(d) = word.strip_suffix("am")
        && !d.is_empty()
        && d.bytes().all(|b| b.is_ascii_digit() || b == b':')
    {
        return (d, Some(Meridiem::Am));
    }
    (word, None)
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Meridiem {
    Am,
    Pm,
}

/// The minutes spoken after an hour word, and how many tokens they used.
fn minute_at(tokens: &[Token], i: usize) -> (u32, usize) {
    match (lower_at(tokens, i), lower_at(tokens, i + 1)) {
        ("thirty", _) => (30, 1),
        ("fifteen", _) => (15, 1),
        ("forty-five", _) => (45, 1),
        ("forty", "five") => (45, 2),
        ("o'clock" | "oclock", _) => (0, 1),
        _ => (0, 0),
    }
}

/// An `am`/`pm` token at `i`, and how many tokens it used.
fn suffix_at(tokens: &[Token], i: usize) -> (Option<Meridiem>, usize) {
    match lower_at(tokens, i) {
        "pm" => (Some(Meridiem::Pm), 1),
        "am" => (Some(Meridiem::Am), 1),
        _ => (None, 0),
    }
}

/// 24-hour `HH:MM`; without a suffix, 1–11 is evening (a dinner booking).
fn clock(hour: u32, minute: u32, suffix: Option<Meridiem>) -> Option<String> {
    if minute > 59 || hour > 23 {
        return None;
    }
    let h = match suffix {
        Some(Meridiem::Pm) if (1..12).contains(&hour) => hour + 12,
        Some(Meridiem::Am) if hour == 12 => 0,
        Some(_) if hour > 12 || hour == 0 => return None,
        None if (1..12).contains(&hour) => hour + 12,
        _ => hour,
    };
    Some(format!("{h:02}:{minute:02}"))
}

/// `19:30` → `7:30`, for speaking.
pub fn spoken_time(hhmm: &str) -> String {
    let Some((h, m)) = hhmm.split_once(':') else {
        return hhmm.to_owned();
    };
    match h.parse::<u32>() {
        Ok(h) => format!("{}:{m}", if h % 12 == 0 { 12 } else { h % 12 }),
        Err(_) => hhmm.to_owned(),
    }
}

/// True if any token is one of `words`.
pub(crate) fn has_any(tokens: &[Token], words: &[&str]) -> bool {
    tokens.iter().any(|t| words.contains(&t.lower.as_str()))
}

/// True if the two words appear next to each other.
pub(crate) fn has_pair(tokens: &[Token], a: &str, b: &str) -> bool {
    tokens
        .windows(2)
        .any(|w| w[0].lower == a && w[1].lower == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(text: &str, expecting: Expecting) -> Extracted {
        extract(text, expecting)
    }

    #[test]
    fn default_script_lines() {
        let e = ex(
            "Hi, I'd like to book a table for four people.",
            Expecting::PartySize,
        );
        assert_eq!(
            e,
            Extracted {
                party_size: Some(4),
                ..Extracted::default()
            }
        );
        let e = ex("The name is Alex Morgan.", Expecting::Name);
        assert_eq!(e.name.as_deref(), Some("Alex Morgan"));
        assert_eq!((e.party_size, e.time), (None, None));
        let e = ex("Tonight at seven thirty.", Expecting::Time);
        assert_eq!(e.time.as_deref(), Some("19:30"));
        assert_eq!(e.party_size, None, "the hour is not a party size");
        assert_eq!(
            ex("Yes, please book it.", Expecting::Nothing),
            Extracted::default()
        );
    }

    #[test]
    fn party_sizes() {
        assert_eq!(
            ex("we are 6 people", Expecting::Nothing).party_size,
            Some(6)
        );
        assert_eq!(
            ex("a table for two", Expecting::Nothing).party_size,
            Some(2)
        );
        assert_eq!(ex("Twelve.", Expecting::PartySize).party_size, Some(12));
        assert_eq!(ex("Twelve.", Expecting::Name).party_size, None);
        assert_eq!(
            ex("four of us at eight", Expecting::Nothing).party_size,
            Some(4)
        );
        assert_eq!(ex("for 14 guests", Expecting::Nothing).party_size, Some(14));
    }

    #[test]
    fn names() {
        let name = |t: &str, e| ex(t, e).name;
        assert_eq!(
            name("under smith, please", Expecting::Nothing).as_deref(),
            Some("Smith")
        );
        assert_eq!(
            name("under the name Jo Ann Lee", Expecting::Nothing).as_deref(),
            Some("Jo Ann Lee")
        );
        assert_eq!(name("I'm alex.", Expecting::Name).as_deref(), Some("Alex"));
        assert_eq!(
            name("It's Morgan!", Expecting::Name).as_deref(),
            Some("Morgan")
        );
        assert_eq!(name("it's fine", Expecting::Name), None);
        assert_eq!(
            name("I'm alex", Expecting::PartySize),
            None,
            "only when asked"
        );
        assert_eq!(
            name("my name is Alex and we are four", Expecting::Nothing).as_deref(),
            Some("Alex")
        );
    }

    #[test]
    fn times() {
        let time = |t: &str| ex(t, Expecting::Nothing).time;
        assert_eq!(time("seven thirty").as_deref(), Some("19:30"));
        assert_eq!(time("at 7:30").as_deref(), Some("19:30"));
        assert_eq!(time("8 pm").as_deref(), Some("20:00"));
        assert_eq!(time("8pm please").as_deref(), Some("20:00"));
        assert_eq!(time("at eight").as_deref(), Some("20:00"));
        assert_eq!(time("eight o'clock").as_deref(), Some("20:00"));
        assert_eq!(time("half past six").as_deref(), Some("18:30"));
        assert_eq!(time("19:45").as_deref(), Some("19:45"));
        assert_eq!(time("11 a.m.").as_deref(), Some("11:00"));
        assert_eq!(time("12 pm").as_deref(), Some("12:00"));
        assert_eq!(time("a table for four people"), None);
        assert_eq!(time("25:00"), None);
    }

    #[test]
    fn mixed_utterance() {
        let e = ex("Table for four at eight under Rossi.", Expecting::Nothing);
        assert_eq!(e.party_size, Some(4));
        assert_eq!(e.time.as_deref(), Some("20:00"));
        assert_eq!(e.name.as_deref(), Some("Rossi"));
    }

    #[test]
    fn speaking_helpers() {
        assert_eq!(spoken_time("19:30"), "7:30");
        assert_eq!(spoken_time("12:00"), "12:00");
        assert_eq!(number_words(4), "four");
        assert_eq!(number_words(20), "twenty");
        assert_eq!(number_words(42), "42");
        assert_eq!(number("0"), Some(0));
        assert_eq!(number("123"), None);
    }
}
