//! Framing and validation of SIP messages from the network, and the text of
//! the messages we send.
//!
//! Every message is parsed once, by rsipstack's parser (pinned exactly;
//! `rsipstack::sip` is its copy of the `rsip` crate), and every header the
//! user agent reads comes out of that parse: the exact values through
//! rsip's untyped headers, the fields (branch, sent-by, tags, CSeq) through
//! its typed ones ([`headers`] has the accessors and the few named
//! exceptions where rsip is lossy or wrong).
//!
//! rsip's parser is lenient where a server must not be: it reads a
//! non-numeric `Content-Length` as 0, takes a short body as it is, drops a
//! header line without a colon and takes any header name. [`frame`] is
//! strict about exactly those things on rsip's result: a size bound, one
//! numeric `Content-Length` that the datagram honours, a well-formed start
//! line (read here: rsip has no extension methods, so nobody could answer
//! them `501`), every header line a `token: value` (or folded onto one)
//! ended by CRLF (rsip also ends a line at a bare LF), and the five headers
//! every response copies (`Via`, `From`, `To`, `Call-ID`, `CSeq`).
//!
//! What it never does: resolve, route or decide anything; it says what a
//! message holds and writes what the endpoint answers.

use std::fmt::Write as _;

use rsipstack::sip::{self as rsip, Header, Headers};

pub mod headers;

pub use headers::{split_commas, uri_of, valid_name_addr, valid_via};

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

/// A message that passed [`frame`]: its start line, rsip's parse of its
/// headers (compact names expanded, folded lines joined, values as sent),
/// and its body (exactly `Content-Length` bytes). The headers are read
/// through the accessors of [`headers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    pub start: StartLine,
    pub headers: Headers,
    pub body: Vec<u8>,
    /// The whole message as received (the body cut to `Content-Length`).
    pub raw: Vec<u8>,
    /// Why rsip refused the start line, if it did (an extension method, a
    /// Request-URI it cannot read); the headers then come from
    /// [`headers_alone`].
    pub start_refused: Option<String>,
}

impl Framed {
    /// The request method, if this is a request.
    pub fn method(&self) -> Option<&str> {
        match &self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => None,
        }
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
    let start = start_line(head.split("\r\n").next().unwrap_or_default())?;
    let body_at = end + 4;
    let (headers, start_refused) = parse_head(&data[..body_at], head)?;
    let available = data.len() - body_at;
    let len = match content_length(&headers)? {
        Some(n) if n > available => {
            return Err(WireError::ShortBody {
                declared: n,
                available,
            });
        }
        Some(n) => n,
        None => available,
    };
    required(&headers)?;
    let framed = Framed {
        start,
        headers,
        body: data[body_at..body_at + len].to_vec(),
        raw: data[..body_at + len].to_vec(),
        start_refused,
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

/// rsip's parse of a message head (`bytes` is `head` and the blank line
/// after it), held to what rsip lets pass: every header line must have
/// become a header (rsip drops a line without a colon) under a token name,
/// and there are at most [`MAX_HEADERS`]. When rsip refuses the start line
/// the headers come from [`headers_alone`], and its reason is returned.
pub(crate) fn parse_head(bytes: &[u8], head: &str) -> Result<(Headers, Option<String>), WireError> {
    let lines = header_lines(head)?;
    let (headers, refused) = match rsip::SipMessage::try_from(bytes) {
        Ok(rsip::SipMessage::Request(r)) => (r.headers, None),
        Ok(rsip::SipMessage::Response(r)) => (r.headers, None),
        Err(e) => (headers_alone(head), Some(e.to_string())),
    };
    let bad_name = headers
        .iter()
        .any(|h| matches!(h, Header::Other(name, _) if !is_token(name)));
    if headers.len() != lines || bad_name {
        return Err(WireError::BadHeaderLine);
    }
    Ok((headers, refused))
}

/// The number of header lines in `head` (a folded continuation is part of
/// the line before it). A bare LF is refused: rsip would split the line
/// there, so what it parsed would not be what was framed.
fn header_lines(head: &str) -> Result<usize, WireError> {
    if head.split("\r\n").any(|l| l.contains('\n')) {
        return Err(WireError::BadHeaderLine);
    }
    let mut lines = head.split("\r\n").skip(1).peekable();
    if lines.peek().is_some_and(|l| l.starts_with([' ', '\t'])) {
        return Err(WireError::BadHeaderLine); // a continuation of nothing
    }
    let n = lines.filter(|l| !l.starts_with([' ', '\t'])).count();
    if n > MAX_HEADERS {
        return Err(WireError::TooManyHeaders(MAX_HEADERS));
    }
    Ok(n)
}

/// rsip's parse of the header lines of `head` under a stand-in status line:
/// for a message whose start line rsip refuses (an extension method such
/// as RFC 4475 §3.1.1.2's, which must be answered `501`), or one too broken
/// to frame that may still be answered.
pub(crate) fn headers_alone(head: &str) -> Headers {
    let lines = head.split_once("\r\n").map_or("", |(_, rest)| rest);
    let text = format!("SIP/2.0 200 OK\r\n{lines}\r\n\r\n");
    match rsip::SipMessage::try_from(text.as_str()) {
        Ok(rsip::SipMessage::Response(r)) => r.headers,
        _ => Headers::default(),
    }
}

/// The one `Content-Length` of the message, if any: every value numeric
/// (at most nine digits), and all the same.
fn content_length(headers: &Headers) -> Result<Option<usize>, WireError> {
    let mut found = None;
    for h in headers.iter() {
        let Header::ContentLength(v) = h else {
            continue;
        };
        let v = v.value().trim();
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

/// `Via` at least once (one per hop), `From`, `To`, `Call-ID` and `CSeq`
/// exactly once.
fn required(headers: &Headers) -> Result<(), WireError> {
    let count = |is: fn(&Header) -> bool| headers.iter().filter(|h| is(h)).count();
    let found = [
        ("Via", count(|h| matches!(h, Header::Via(_)))),
        ("From", count(|h| matches!(h, Header::From(_)))),
        ("To", count(|h| matches!(h, Header::To(_)))),
        ("Call-ID", count(|h| matches!(h, Header::CallId(_)))),
        ("CSeq", count(|h| matches!(h, Header::CSeq(_)))),
    ];
    for (name, n) in found {
        if n == 0 || (n > 1 && name != "Via") {
            return Err(WireError::MissingHeader(name));
        }
    }
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Cuts messages out of a TCP byte stream by `Content-Length` (required on
/// a stream, RFC 3261 §18.3). Bounded: a head or message over `max` is an
/// error and the connection is to be closed. A message's head is parsed
/// (by rsip, as [`frame`] does) once, when its blank line has arrived.
#[derive(Debug)]
pub struct StreamFramer {
    buf: Vec<u8>,
    max: usize,
    /// The length of the message at the front of `buf`, once its head is in.
    total: Option<usize>,
}

impl StreamFramer {
    pub fn new(max: usize) -> StreamFramer {
        StreamFramer {
            buf: Vec::new(),
            max,
            total: None,
        }
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, `Ok(None)` if more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        let total = match self.total {
            Some(total) => total,
            None => {
                let Some(total) = self.next_length()? else {
                    return Ok(None);
                };
                self.total = Some(total);
                total
            }
        };
        if self.buf.len() < total {
            return Ok(None);
        }
        self.total = None;
        Ok(Some(self.buf.drain(..total).collect()))
    }

    /// The length of the next message, once its head has arrived.
    fn next_length(&mut self) -> Result<Option<usize>, WireError> {
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
        let (headers, _) = parse_head(&self.buf[..end + 4], head)?;
        let len = content_length(&headers)?
            .ok_or(WireError::BadContentLength("missing on a stream".into()))?;
        let total = end + 4 + len;
        if total > self.max {
            return Err(WireError::TooLarge {
                len: total,
                max: self.max,
            });
        }
        Ok(Some(total))
    }
}

/// Builds the text of a response to `req`: its `Via`s, `From`, `Call-ID`
/// and `CSeq` copied exactly as received (RFC 3261 §8.2.6.2: rsip's untyped
/// values), `To` with `to_tag` added when it has none, then `extra` headers
/// and the body with its `Content-Length`.
pub fn response(
    req: &Framed,
    code: u16,
    reason: &str,
    to_tag: Option<&str>,
    extra: &[(&str, String)],
    body: Option<(&str, &[u8])>,
) -> Vec<u8> {
    let mut s = format!("SIP/2.0 {code} {reason}\r\n");
    for via in req.vias() {
        let _ = write!(s, "Via: {via}\r\n");
    }
    let to = req.to_value();
    let to = match to_tag {
        Some(tag) if req.to_tag().is_none() => format!("{to};tag={tag}"),
        _ => to.to_string(),
    };
    let _ = write!(s, "From: {}\r\n", req.from_value());
    let _ = write!(s, "To: {to}\r\n");
    let _ = write!(s, "Call-ID: {}\r\n", req.call_id());
    let _ = write!(s, "CSeq: {}\r\n", req.cseq_value());
    finish(s, extra, body)
}

/// Appends `extra` headers, `Content-Type`/`Content-Length` and the body.
pub fn finish(mut s: String, extra: &[(&str, String)], body: Option<(&str, &[u8])>) -> Vec<u8> {
    for (n, v) in extra {
        // An empty list (`Supported:`) is written without a trailing blank.
        let _ = if v.is_empty() {
            write!(s, "{n}:\r\n")
        } else {
            write!(s, "{n}: {v}\r\n")
        };
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
        assert_eq!(f.call_id(), "x1");
        assert_eq!(f.body, b"abcd");
        assert!(f.raw.ends_with(b"\r\n\r\nabcd"));
        assert_eq!(f.cseq(), Some((1, "INVITE".into())));
        assert_eq!(f.from_value(), "\"A, B\" <sip:a@b>;tag=1");
        assert_eq!(f.from_tag().as_deref(), Some("1"));
        assert_eq!(uri_of(f.from_value()), "sip:a@b");
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
    fn refuses_the_lines_rsip_would_drop_or_split() {
        // rsip drops a header line without a colon and takes any name.
        let no_colon = INVITE.replace("i: x1\r\n", "i: x1\r\nno colon\r\n");
        let rsip_view = rsip::SipMessage::try_from(no_colon.as_bytes()).unwrap();
        assert_eq!(rsip::HasHeaders::headers(&rsip_view).len(), 6);
        assert_eq!(
            frame(no_colon.as_bytes(), 4096),
            Err(WireError::BadHeaderLine)
        );
        let bad_name = INVITE.replace("i: x1\r\n", "i: x1\r\nX Y: z\r\n");
        assert!(rsip::SipMessage::try_from(bad_name.as_bytes()).is_ok());
        assert_eq!(
            frame(bad_name.as_bytes(), 4096),
            Err(WireError::BadHeaderLine)
        );
        // rsip ends a line at a bare LF, which the framed text does not.
        let bare_lf = INVITE.replace("i: x1\r\n", "i: x1\nX-Y: z\r\n");
        assert_eq!(
            frame(bare_lf.as_bytes(), 4096),
            Err(WireError::BadHeaderLine)
        );
        let folded_first = INVITE.replacen("\r\nv:", "\r\n v:", 1);
        assert_eq!(
            frame(folded_first.as_bytes(), 4096),
            Err(WireError::BadHeaderLine)
        );
    }

    #[test]
    fn an_extension_method_is_framed_with_the_headers_rsip_parsed() {
        // rsip refuses the request line (its Method has no extension
        // methods), yet the request must be answered 501 with its headers.
        let foo = INVITE
            .replacen("INVITE sip", "FOO sip", 1)
            .replace("1 INVITE", "1 FOO");
        assert!(rsip::SipMessage::try_from(foo.as_bytes()).is_err());
        let f = frame(foo.as_bytes(), 4096).unwrap();
        assert_eq!(f.method(), Some("FOO"));
        assert!(
            f.start_refused
                .as_deref()
                .is_some_and(|e| e.contains("FOO"))
        );
        assert_eq!((f.call_id(), f.from_tag().as_deref()), ("x1", Some("1")));
        assert_eq!(f.cseq(), Some((1, "FOO".into())));
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
}
