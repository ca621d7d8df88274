//! Framing and validation of SIP messages from the network, and the text of
//! the messages we send.
//!
//! rsipstack's parser is lenient where a server must not be: it reads a
//! non-numeric `Content-Length` as 0, takes a short body as it is, and
//! refuses unknown methods outright (so nobody could answer them `501`).
//! [`frame`] runs first and is strict about exactly those things: a size
//! bound, one numeric `Content-Length` that the datagram honours, a
//! well-formed start line, and the five headers every response copies
//! (`Via`, `From`, `To`, `Call-ID`, `CSeq`). What passes is then handed to
//! rsipstack for typed access (Via branch, tags, URIs).

use std::fmt::Write as _;

/// Why a message was not accepted, with what can still be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message of {len} bytes is over the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("no blank line ends the headers (truncated or not SIP)")]
    Truncated,
    #[error("headers are not UTF-8")]
    NotUtf8,
    #[error("bad start line: {0}")]
    BadStartLine(String),
    #[error("bad Content-Length: {0}")]
    BadContentLength(String),
    #[error("Content-Length {declared} but {available} body bytes")]
    ShortBody { declared: usize, available: usize },
    #[error("missing or repeated {0} header")]
    MissingHeader(&'static str),
    #[error("header line without a colon")]
    BadHeaderLine,
    #[error("more than {0} header lines")]
    TooManyHeaders(usize),
}

/// Header lines a message may carry before it is refused.
pub const MAX_HEADERS: usize = 128;

/// The start line of a framed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartLine {
    /// A request; `method` is the token as sent (upper-cased).
    Request { method: String, uri: String },
    /// A response.
    Response { code: u16 },
}

/// A message that passed [`frame`]: its start line, its headers with
/// compact names expanded, and its body (exactly `Content-Length` bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    pub start: StartLine,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The whole message as it should be handed to the typed parser (the
    /// body cut to `Content-Length`).
    pub raw: Vec<u8>,
}

impl Framed {
    /// The first value of header `name` (canonical name, any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, comma-separated values split.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| split_commas(v))
            .collect()
    }

    /// The request method, if this is a request.
    pub fn method(&self) -> Option<&str> {
        match &self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => None,
        }
    }

    /// `CSeq` as (number, method).
    pub fn cseq(&self) -> Option<(u32, String)> {
        let v = self.header("CSeq")?;
        let mut it = v.split_whitespace();
        let n = it.next()?.parse().ok()?;
        let m = it.next()?.to_ascii_uppercase();
        it.next().is_none().then_some((n, m))
    }
}

/// Splits a header value at commas that are outside quotes and `<...>`.
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

/// Expands RFC 3261 §7.3.3 compact header names.
fn canonical(name: &str) -> &str {
    match name {
        "v" | "V" => "Via",
        "f" | "F" => "From",
        "t" | "T" => "To",
        "i" | "I" => "Call-ID",
        "l" | "L" => "Content-Length",
        "c" | "C" => "Content-Type",
        "m" | "M" => "Contact",
        "k" | "K" => "Supported",
        "s" | "S" => "Subject",
        "e" | "E" => "Content-Encoding",
        "r" | "R" => "Refer-To",
        "o" | "O" => "Event",
        _ => name,
    }
}

/// Frames one complete message (a UDP datagram, or one message cut from a
/// TCP stream by [`StreamFramer`]).
pub fn frame(data: &[u8], max: usize) -> Result<Framed, WireError> {
    if data.len() > max {
        return Err(WireError::TooLarge {
            len: data.len(),
            max,
        });
    }
    let end = find(data, b"\r\n\r\n").ok_or(WireError::Truncated)?;
    let head = std::str::from_utf8(&data[..end]).map_err(|_| WireError::NotUtf8)?;
    let mut lines = head.split("\r\n");
    let start = start_line(lines.next().unwrap_or_default())?;
    let headers = header_lines(lines)?;
    let body_at = end + 4;
    let available = data.len() - body_at;
    let declared = content_length(&headers)?;
    let len = match declared {
        Some(n) if n > available => {
            return Err(WireError::ShortBody {
                declared: n,
                available,
            });
        }
        Some(n) => n,
        None => available,
    };
    for required in ["Via", "From", "To", "Call-ID", "CSeq"] {
        let n = headers.iter().filter(|(h, _)| h == required).count();
        // Via may repeat (one per hop); the others exactly once.
        if n == 0 || (n > 1 && required != "Via") {
            return Err(WireError::MissingHeader(required));
        }
    }
    let body = data[body_at..body_at + len].to_vec();
    let raw = data[..body_at + len].to_vec();
    let framed = Framed {
        start,
        headers,
        body,
        raw,
    };
    if framed.cseq().is_none() {
        return Err(WireError::MissingHeader("CSeq"));
    }
    Ok(framed)
}

fn start_line(line: &str) -> Result<StartLine, WireError> {
    let bad = || WireError::BadStartLine(line.chars().take(80).collect());
    let parts: Vec<&str> = line.split(' ').collect();
    if let Some(rest) = line.strip_prefix("SIP/2.0 ") {
        let code = rest.get(..3).and_then(|c| c.parse::<u16>().ok());
        return match code {
            Some(code) if (100..700).contains(&code) => Ok(StartLine::Response { code }),
            _ => Err(bad()),
        };
    }
    match parts.as_slice() {
        [method, uri, "SIP/2.0"]
            if is_token(method) && uri.contains(':') && !uri.starts_with('<') =>
        {
            Ok(StartLine::Request {
                method: method.to_ascii_uppercase(),
                uri: (*uri).to_string(),
            })
        }
        _ => Err(bad()),
    }
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b))
}

fn header_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<(String, String)>, WireError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            // Folded continuation (RFC 3261 §7.3.1).
            let last = out.last_mut().ok_or(WireError::BadHeaderLine)?;
            last.1.push(' ');
            last.1.push_str(line.trim());
            continue;
        }
        let (name, value) = line.split_once(':').ok_or(WireError::BadHeaderLine)?;
        let name = name.trim();
        if !is_token(name) {
            return Err(WireError::BadHeaderLine);
        }
        if out.len() == MAX_HEADERS {
            return Err(WireError::TooManyHeaders(MAX_HEADERS));
        }
        out.push((canonical(name).to_string(), value.trim().to_string()));
    }
    // Canonical case for the names we look up.
    for (n, _) in &mut out {
        for known in ["Via", "From", "To", "Call-ID", "CSeq", "Content-Length"] {
            if n.eq_ignore_ascii_case(known) {
                *n = known.to_string();
            }
        }
    }
    Ok(out)
}

fn content_length(headers: &[(String, String)]) -> Result<Option<usize>, WireError> {
    let mut found = None;
    for (_, v) in headers.iter().filter(|(n, _)| n == "Content-Length") {
        let v = v.trim();
        let n = (!v.is_empty() && v.len() <= 9 && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse::<usize>().ok())
            .flatten()
            .ok_or_else(|| WireError::BadContentLength(v.chars().take(20).collect()))?;
        if found.is_some_and(|f| f != n) {
            return Err(WireError::BadContentLength("two different values".into()));
        }
        found = Some(n);
    }
    Ok(found)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Cuts messages out of a TCP byte stream by `Content-Length` (required on
/// a stream, RFC 3261 §18.3). Bounded: a head or message over `max` is an
/// error and the connection is to be closed.
#[derive(Debug)]
pub struct StreamFramer {
    buf: Vec<u8>,
    max: usize,
}

impl StreamFramer {
    pub fn new(max: usize) -> StreamFramer {
        StreamFramer {
            buf: Vec::new(),
            max,
        }
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, `Ok(None)` if more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        // Keep-alive CRLFs between messages (RFC 5626 §3.5.1).
        let lead = self
            .buf
            .iter()
            .take_while(|b| **b == b'\r' || **b == b'\n')
            .count();
        self.buf.drain(..lead);
        let Some(end) = find(&self.buf, b"\r\n\r\n") else {
            if self.buf.len() > self.max {
                return Err(WireError::TooLarge {
                    len: self.buf.len(),
                    max: self.max,
                });
            }
            return Ok(None);
        };
        let head = std::str::from_utf8(&self.buf[..end]).map_err(|_| WireError::NotUtf8)?;
        let headers = header_lines(head.split("\r\n").skip(1))?;
        let len = content_length(&headers)?
            .ok_or(WireError::BadContentLength("missing on a stream".into()))?;
        let total = end + 4 + len;
        if total > self.max {
            return Err(WireError::TooLarge {
                len: total,
                max: self.max,
            });
        }
        if self.buf.len() < total {
            return Ok(None);
        }
        Ok(Some(self.buf.drain(..total).collect()))
    }
}

/// Builds the text of a response to `req`: its `Via`s, `From`, `Call-ID`
/// and `CSeq` copied, `To` with `to_tag` added when it has none, then
/// `extra` headers and the body with its `Content-Length`.
pub fn response(
    req: &Framed,
    code: u16,
    reason: &str,
    to_tag: Option<&str>,
    extra: &[(&str, String)],
    body: Option<(&str, &[u8])>,
) -> Vec<u8> {
    let mut s = format!("SIP/2.0 {code} {reason}\r\n");
    for (n, v) in req.headers.iter().filter(|(n, _)| n == "Via") {
        let _ = write!(s, "{n}: {v}\r\n");
    }
    let to = req.header("To").unwrap_or_default();
    let to = match to_tag {
        Some(tag) if !has_tag(to) => format!("{to};tag={tag}"),
        _ => to.to_string(),
    };
    let _ = write!(s, "From: {}\r\n", req.header("From").unwrap_or_default());
    let _ = write!(s, "To: {to}\r\n");
    let _ = write!(
        s,
        "Call-ID: {}\r\n",
        req.header("Call-ID").unwrap_or_default()
    );
    let _ = write!(s, "CSeq: {}\r\n", req.header("CSeq").unwrap_or_default());
    finish(s, extra, body)
}

/// Appends `extra` headers, `Content-Type`/`Content-Length` and the body.
pub fn finish(mut s: String, extra: &[(&str, String)], body: Option<(&str, &[u8])>) -> Vec<u8> {
    for (n, v) in extra {
        let _ = write!(s, "{n}: {v}\r\n");
    }
    let body = match body {
        Some((ctype, b)) => {
            let _ = write!(s, "Content-Type: {ctype}\r\n");
            b
        }
        None => &[],
    };
    let _ = write!(s, "Content-Length: {}\r\n\r\n", body.len());
    let mut out = s.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Whether a `From`/`To` value carries a `tag` parameter (outside its URI).
pub fn has_tag(v: &str) -> bool {
    tag_of(v).is_some()
}

/// The `tag` parameter of a `From`/`To` value.
pub fn tag_of(v: &str) -> Option<&str> {
    // Parameters of the header follow the `>` of a name-addr, or the URI itself.
    let params = match v.rfind('>') {
        Some(i) => &v[i + 1..],
        None => v,
    };
    params.split(';').skip(1).find_map(|p| {
        let (k, val) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("tag").then(|| val.trim())
    })
}

/// The URI of a name-addr (`"Bob" <sip:bob@host>;tag=1` → `sip:bob@host`)
/// or of an addr-spec (parameters after `;` dropped).
pub fn uri_of(v: &str) -> &str {
    match (v.find('<'), v.find('>')) {
        (Some(a), Some(b)) if a < b => &v[a + 1..b],
        _ => v.split(';').next().unwrap_or(v).trim(),
    }
}

/// The standard reason phrase of the codes we send.
pub fn reason(code: u16) -> &'static str {
    match code {
        100 => "Trying",
        180 => "Ringing",
        200 => "OK",
        202 => "Accepted",
        302 => "Moved Temporarily",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        415 => "Unsupported Media Type",
        416 => "Unsupported URI Scheme",
        420 => "Bad Extension",
        481 => "Call/Transaction Does Not Exist",
        483 => "Too Many Hops",
        486 => "Busy Here",
        487 => "Request Terminated",
        488 => "Not Acceptable Here",
        491 => "Request Pending",
        500 => "Server Internal Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "Version Not Supported",
        513 => "Message Too Large",
        603 => "Decline",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &str = "INVITE sip:bot@127.0.0.1 SIP/2.0\r\n\
        v: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK1\r\n\
        f: \"A, B\" <sip:a@b>;tag=1\r\n\
        t: <sip:bot@127.0.0.1>\r\n\
        i: x1\r\n\
        CSeq: 1 INVITE\r\n\
        l: 4\r\n\r\nabcdEXTRA";

    #[test]
    fn frames_compact_headers_and_cuts_the_body_to_content_length() {
        let f = frame(INVITE.as_bytes(), 4096).unwrap();
        assert_eq!(f.method(), Some("INVITE"));
        assert_eq!(f.header("call-id"), Some("x1"));
        assert_eq!(f.body, b"abcd");
        assert!(f.raw.ends_with(b"\r\n\r\nabcd"));
        assert_eq!(f.cseq(), Some((1, "INVITE".into())));
        assert_eq!(tag_of(f.header("From").unwrap()), Some("1"));
        assert_eq!(uri_of(f.header("From").unwrap()), "sip:a@b");
    }

    #[test]
    fn refuses_what_the_lenient_parser_would_take() {
        let short = INVITE.replace("l: 4", "l: 40");
        assert!(matches!(
            frame(short.as_bytes(), 4096),
            Err(WireError::ShortBody { declared: 40, .. })
        ));
        let nan = INVITE.replace("l: 4", "l: four");
        assert!(matches!(
            frame(nan.as_bytes(), 4096),
            Err(WireError::BadContentLength(_))
        ));
        let no_callid = INVITE.replace("i: x1\r\n", "");
        assert_eq!(
            frame(no_callid.as_bytes(), 4096),
            Err(WireError::MissingHeader("Call-ID"))
        );
        assert!(matches!(
            frame(&INVITE.as_bytes()[..60], 4096),
            Err(WireError::Truncated)
        ));
        assert!(matches!(
            frame(INVITE.as_bytes(), 64),
            Err(WireError::TooLarge { .. })
        ));
        assert!(matches!(frame(b"", 64), Err(WireError::Truncated)));
    }

    #[test]
    fn response_copies_the_transaction_headers_and_adds_a_tag() {
        let f = frame(INVITE.as_bytes(), 4096).unwrap();
        let r = response(
            &f,
            200,
            "OK",
            Some("cg1"),
            &[("Contact", "<sip:x>".into())],
            None,
        );
        let r = String::from_utf8(r).unwrap();
        assert!(
            r.starts_with("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK1\r\n")
        );
        assert!(r.contains("To: <sip:bot@127.0.0.1>;tag=cg1\r\n"));
        assert!(r.ends_with("Content-Length: 0\r\n\r\n"));
        let again = frame(r.as_bytes(), 4096).unwrap();
        assert_eq!(again.start, StartLine::Response { code: 200 });
    }

    #[test]
    fn stream_framer_cuts_by_content_length_and_needs_it() {
        let mut s = StreamFramer::new(4096);
        let msg = INVITE.replace("EXTRA", "");
        s.push(b"\r\n");
        s.push(&msg.as_bytes()[..30]);
        assert_eq!(s.next_message().unwrap(), None);
        s.push(&msg.as_bytes()[30..]);
        s.push(msg.as_bytes());
        assert_eq!(s.next_message().unwrap().unwrap(), msg.as_bytes());
        assert_eq!(s.next_message().unwrap().unwrap(), msg.as_bytes());
        assert_eq!(s.next_message().unwrap(), None);
        let mut s = StreamFramer::new(4096);
        s.push(msg.replace("l: 4\r\n", "").as_bytes());
        assert!(s.next_message().is_err());
    }

    #[test]
    fn commas_inside_quotes_and_angles_do_not_split() {
        assert_eq!(
            split_commas("<sip:a,b@x;lr>, \"x,y\" <sip:c@d>"),
            vec!["<sip:a,b@x;lr>", "\"x,y\" <sip:c@d>"]
        );
    }
}
