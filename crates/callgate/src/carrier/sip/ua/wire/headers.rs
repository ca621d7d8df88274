//! How the user agent reads the headers of a [`Framed`] message: out of
//! rsip's one parse of it ([`Framed::headers`]), exact values through rsip's
//! untyped headers (`Call-ID`, the `Via`s, `From`, `To`, `CSeq` copied into
//! responses, RFC 3261 §8.2.6.2), fields through its typed ones (`.typed()`:
//! the top `Via`'s branch and sent-by, the `From`/`To` tags, `CSeq`).
//!
//! What it never does: scan header text by hand, except in these named
//! exceptions, each where rsip is lossy or wrong for a user agent, each
//! shown by a test below:
//! - [`valid_via`]: typed `Via` takes `;;` (RFC 4475 §3.1.2.1, to be refused)
//!   and refuses the transport `UNKNOWN` (§3.1.1.10, to be accepted);
//! - [`valid_name_addr`]: typed `From`/`To` take an unclosed quote
//!   (§3.1.2.6, to be refused);
//! - [`split_commas`] and [`uri_of`], for the URIs that go back on the wire
//!   (the remote target and route set, RFC 3261 §12.1.1): rsip writes a
//!   typed URI back changed (`%6C` becomes `%256C`, `;transport=udp` and
//!   `?headers` dropped), and has no public splitter that keeps the text;
//! - tags: typed `From`/`To` keep `tag = x` (LWS around `=`, §3.1.1.1) as a
//!   parameter named `tag `, which [`Framed::to_tag`] reads as the tag;
//! - `CSeq`: typed `CSeq` knows only rsip's fourteen methods; one with an
//!   extension method (§3.1.1.2, answered `501`) is read with rsip's CSeq
//!   tokenizer;
//! - `Require`: rsip has no typed option-tag list; [`Framed::require`]
//!   splits it with [`split_commas`].
//!
//! How to use it: [`super::frame`] a message, then ask the [`Framed`].

use rsipstack::sip::prelude::*;
use rsipstack::sip::typed::tokenizers::CseqTokenizer;
use rsipstack::sip::{self as rsip, HasHeaders, Header, Headers};

use super::Framed;

impl HasHeaders for Framed {
    fn headers(&self) -> &Headers {
        &self.headers
    }
    fn headers_mut(&mut self) -> &mut Headers {
        &mut self.headers
    }
}

/// rsip's accessors (`call_id_header`, `via_header`, `contact_headers`, …).
impl HeadersExt for Framed {}

impl Framed {
    /// `Call-ID` as received.
    pub fn call_id(&self) -> &str {
        self.call_id_header().map_or("", |h| h.value())
    }

    /// `From` as received.
    pub fn from_value(&self) -> &str {
        self.from_header().map_or("", |h| h.value())
    }

    /// `To` as received.
    pub fn to_value(&self) -> &str {
        self.to_header().map_or("", |h| h.value())
    }

    /// `CSeq` as received.
    pub fn cseq_value(&self) -> &str {
        self.cseq_header().map_or("", |h| h.value())
    }

    /// Every `Via` header as received, in order.
    pub fn vias(&self) -> impl Iterator<Item = &str> {
        self.headers.iter().filter_map(|h| match h {
            Header::Via(v) => Some(v.value()),
            _ => None,
        })
    }

    /// The top `Via` (the first value of the first `Via` header), typed.
    pub fn top_via(&self) -> Option<rsip::typed::Via> {
        self.via_header().ok()?.first_value().ok()?.typed().ok()
    }

    /// The `branch` of the top `Via`.
    pub fn branch(&self) -> Option<String> {
        Some(self.top_via()?.branch()?.to_string())
    }

    /// `CSeq` as (number, method upper-cased), typed; see the module
    /// documentation for an extension method.
    pub fn cseq(&self) -> Option<(u32, String)> {
        let h = self.cseq_header().ok()?;
        match h.typed() {
            Ok(c) => Some((c.seq, c.method.to_string())),
            Err(_) => extension_cseq(h.value()),
        }
    }

    /// The `tag` of `From`, typed.
    pub fn from_tag(&self) -> Option<String> {
        tag_in(&self.from_header().ok()?.typed().ok()?.params)
    }

    /// The `tag` of `To`, typed.
    pub fn to_tag(&self) -> Option<String> {
        tag_in(&self.to_header().ok()?.typed().ok()?.params)
    }

    /// The URI of the first `Contact` value, as received.
    pub fn contact_uri(&self) -> Option<&str> {
        self.contact_headers()
            .into_iter()
            .flat_map(|c| split_commas(c.value()))
            .next()
            .map(uri_of)
    }

    /// Every `Record-Route` header as received, in order (a response that
    /// makes a dialog copies them).
    pub fn record_routes(&self) -> impl Iterator<Item = &str> {
        self.record_route_headers().into_iter().map(|r| r.value())
    }

    /// Every `Record-Route` value (comma-separated ones split), as
    /// received, in order: the UAS route set.
    pub fn route_set(&self) -> Vec<&str> {
        self.record_routes().flat_map(split_commas).collect()
    }

    /// `Content-Type` as received.
    pub fn content_type(&self) -> Option<&str> {
        self.headers.iter().find_map(|h| match h {
            Header::ContentType(v) => Some(v.value()),
            _ => None,
        })
    }

    /// `Event` as received.
    pub fn event(&self) -> Option<&str> {
        self.headers.iter().find_map(|h| match h {
            Header::Event(v) => Some(v.value()),
            _ => None,
        })
    }

    /// `Subscription-State` as received.
    pub fn subscription_state(&self) -> Option<&str> {
        self.headers.iter().find_map(|h| match h {
            Header::SubscriptionState(v) => Some(v.value()),
            _ => None,
        })
    }

    /// Every option-tag of every `Require` header.
    pub fn require(&self) -> Vec<&str> {
        self.headers
            .iter()
            .filter_map(|h| match h {
                Header::Require(v) => Some(v.value()),
                _ => None,
            })
            .flat_map(split_commas)
            .collect()
    }

    /// Every header as (name, value), in order: rsip's name (compact and
    /// odd-case names of the headers it knows written out), the value as
    /// received.
    pub fn header_list(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .map(|h| (h.name().to_string(), h.value().to_string()))
            .collect()
    }
}

/// The `tag` among typed `From`/`To` parameters. rsip reads `tag = x` (LWS
/// around `=`, valid by RFC 4475 §3.1.1.1) as a parameter named `tag `.
fn tag_in(params: &[rsip::Param]) -> Option<String> {
    params.iter().find_map(|p| match p {
        rsip::Param::Tag(t) => Some(t.value().trim().to_string()),
        rsip::Param::Other(name, Some(v)) if name.value().trim().eq_ignore_ascii_case("tag") => {
            Some(v.value().trim().to_string())
        }
        _ => None,
    })
}

/// A `CSeq` whose method typed `CSeq` does not know, read with rsip's CSeq
/// tokenizer: a number, then one method token.
fn extension_cseq(v: &str) -> Option<(u32, String)> {
    let t = CseqTokenizer::parse(v).ok()?;
    let seq = t.seq.parse().ok()?;
    let one_token = !t.method.contains(char::is_whitespace);
    one_token.then(|| (seq, t.method.to_ascii_uppercase()))
}

/// Splits a header value at commas that are outside quotes and `<...>`,
/// keeping each value's text as received.
pub fn split_commas(v: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted, mut angle) = (Vec::new(), 0, false, false);
    for (i, c) in v.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '<' if !quoted => angle = true,
            '>' if !quoted => angle = false,
            ',' if !quoted && !angle => {
                out.push(v[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(v[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// Whether a `Via` header value is whole: every comma-separated entry
/// non-empty, `protocol/version/transport sent-by` (any transport token:
/// RFC 4475 §3.1.1.10), with no empty parameter (`;;`, a trailing `;`).
pub fn valid_via(v: &str) -> bool {
    let entries: Vec<&str> = v.split(',').map(str::trim).collect();
    entries.iter().all(|e| {
        !e.is_empty()
            && !e.ends_with(';')
            && !e.split(';').skip(1).any(|p| p.trim().is_empty())
            && e.split(';')
                .next()
                .is_some_and(|sent| sent.matches('/').count() == 2)
    })
}

/// Whether a `From`/`To`/`Contact` value is a whole name-addr or
/// addr-spec: quotes balanced (a `\\` escapes inside them), at most one
/// `<...>`, closed.
pub fn valid_name_addr(v: &str) -> bool {
    let (mut quoted, mut escaped, mut opens, mut closes) = (false, false, 0, 0);
    for c in v.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '<' if !quoted => opens += 1,
            '>' if !quoted => closes += 1,
            _ => {}
        }
    }
    !quoted && opens == closes && opens <= 1
}

/// The URI of a name-addr (`"Bob" <sip:bob@host>;tag=1` → `sip:bob@host`)
/// or of an addr-spec (parameters after `;` dropped), as received.
pub fn uri_of(v: &str) -> &str {
    match (v.find('<'), v.find('>')) {
        (Some(a), Some(b)) if a < b => &v[a + 1..b],
        _ => v.split(';').next().unwrap_or(v).trim(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsipstack::sip::typed;

    #[test]
    fn typed_via_takes_empty_params_and_refuses_unknown_transports() {
        // RFC 4475 §3.1.2.1 (badinv01): to be refused.
        let broken = "SIP/2.0/UDP 192.0.2.15;;";
        assert!(typed::Via::parse(broken).is_ok());
        assert!(!valid_via(broken));
        // §3.1.1.10 (transports): to be accepted.
        let unknown = "SIP/2.0/UNKNOWN t4.example.com;branch=z9hG4bKasd0f3en";
        assert!(typed::Via::parse(unknown).is_err());
        assert!(valid_via(unknown));
    }

    #[test]
    fn typed_to_takes_an_unclosed_quote() {
        // RFC 4475 §3.1.2.6 (quotbal): to be refused.
        let to = "\"Mr. J. User <sip:j.user@example.com>";
        assert!(typed::To::parse(to).is_ok());
        assert!(!valid_name_addr(to));
        assert!(valid_name_addr("\"J \\\"R\\\"\" <sip:j@example.com>;tag=1"));
    }

    #[test]
    fn typed_uris_are_written_back_changed_so_uris_are_cut_as_received() {
        // RFC 4475 §3.1.1.3 (esc01): an escaped user part.
        let c = "<sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31>";
        let typed = typed::Contact::parse(c).unwrap().uri.to_string();
        assert!(typed.starts_with("sip:cal%256Cer@"), "{typed}");
        assert_eq!(
            uri_of(c),
            "sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31"
        );
        let c = "<sip:alice@10.0.0.9:5062;transport=udp>";
        assert_eq!(
            typed::Contact::parse(c).unwrap().uri.to_string(),
            "sip:alice@10.0.0.9:5062"
        );
        assert_eq!(uri_of(c), "sip:alice@10.0.0.9:5062;transport=udp");
        assert_eq!(uri_of("\"Bob\" <sip:bob@host>;tag=1"), "sip:bob@host");
        assert_eq!(uri_of("sip:bob@host;tag=1"), "sip:bob@host");
    }

    #[test]
    fn commas_inside_quotes_and_angles_do_not_split() {
        assert_eq!(
            split_commas("<sip:a,b@x;lr>, \"x,y\" <sip:c@d>"),
            vec!["<sip:a,b@x;lr>", "\"x,y\" <sip:c@d>"]
        );
    }

    #[test]
    fn a_tag_with_lws_around_the_equals_sign_is_read() {
        // RFC 4475 §3.1.1.1 (wsinv): `tag = 98asjd8` is a tag.
        let from =
            typed::From::parse("\"J R\" <sip:jdrosen@example.com> ;  tag = 98asjd8").unwrap();
        assert!(from.tag().is_none(), "rsip reads a parameter named `tag `");
        assert_eq!(tag_in(&from.params).as_deref(), Some("98asjd8"));
        let to = typed::To::parse("<sip:bot@h>;TAG=x1").unwrap();
        assert_eq!(tag_in(&to.params).as_deref(), Some("x1"));
    }

    #[test]
    fn typed_cseq_refuses_an_extension_method_which_the_tokenizer_reads() {
        // RFC 4475 §3.1.1.2 (intmeth): answered 501, so its CSeq must be read.
        let v = "139122385 !interesting-Method0123456789_*+`.%indeed'~";
        assert!(typed::CSeq::parse(v).is_err());
        assert_eq!(
            extension_cseq(v),
            Some((
                139_122_385,
                "!INTERESTING-METHOD0123456789_*+`.%INDEED'~".into()
            ))
        );
        assert_eq!(extension_cseq("1 TWO WORDS"), None);
        assert_eq!(extension_cseq("4294967296 FOO"), None);
    }
}
