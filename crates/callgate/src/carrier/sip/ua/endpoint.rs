//! The sans-IO user agent server: bytes and `now` in, [`Output`]s out.
//!
//! It keeps the INVITE server transactions, the dialogs callgate accepted,
//! the responses to non-INVITE requests (to absorb retransmissions), and
//! the requests of ours awaiting answers, each on its RFC 3261 timer. What
//! needs a decision — a new call, a re-INVITE's offer, an out-of-dialog
//! OPTIONS — is an [`Event`]; everything else it answers itself.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use rsipstack::sip::HeadersExt as _;

use crate::carrier::sip::ua::dialog::Dialog;
use crate::carrier::sip::ua::txn::{Due, Retransmit};
use crate::carrier::sip::ua::wire::{self, Framed, StartLine, WireError};
use crate::carrier::sip::ua::{CallKey, Config, Event, Invite, Output, Peer, TxnKey};

/// Methods callgate answers (the `Allow` header).
pub const ALLOW: &str = "INVITE, ACK, BYE, CANCEL, OPTIONS, INFO, NOTIFY, REFER";

/// Methods rsipstack knows but callgate does not serve here: `405`.
const NOT_ALLOWED: [&str; 5] = ["REGISTER", "SUBSCRIBE", "PUBLISH", "MESSAGE", "UPDATE"];

pub(crate) enum Phase {
    /// INVITE received, not finally answered; the last provisional sent.
    Proceeding { last: Vec<u8> },
    /// 2xx sent, resent until the ACK.
    Accepted(Retransmit),
    /// ACK received.
    Confirmed,
    /// Non-2xx final sent, resent until the ACK (Timer G/H).
    Rejected(Retransmit),
}

pub(crate) struct Call {
    pub invite: Framed,
    pub branch: String,
    pub dialog: Dialog,
    pub phase: Phase,
    /// A re-INVITE waiting for the application's answer, and one answered
    /// with 2xx waiting for its ACK.
    pub reinvite: Option<(TxnKey, Framed)>,
    pub reinvite_2xx: Option<Retransmit>,
}

/// A request of ours (BYE, REFER) waiting for its final response.
pub(crate) struct Pending {
    pub call: CallKey,
    pub method: &'static str,
    pub to: Peer,
    pub resend: Retransmit,
}

/// The endpoint. See the module documentation.
pub struct Endpoint {
    pub(crate) cfg: Config,
    pub(crate) rng: u64,
    pub(crate) next_key: u64,
    pub(crate) calls: HashMap<CallKey, Call>,
    /// INVITE transactions by (branch, sent-by) → call.
    pub(crate) invites: HashMap<String, CallKey>,
    /// Requests waiting for the application's answer (out-of-dialog
    /// OPTIONS, re-INVITEs), with where the answer goes.
    pub(crate) asks: HashMap<TxnKey, (Framed, Peer, Option<CallKey>)>,
    /// Final responses to non-INVITE requests, resent on retransmission
    /// until Timer J.
    pub(crate) answered: HashMap<String, (Vec<u8>, Peer, Instant)>,
    pub(crate) pending: HashMap<String, Pending>,
    pub(crate) out: VecDeque<Output>,
}

impl Endpoint {
    /// A new endpoint; `seed` makes its tags and branches (pass something
    /// unpredictable, e.g. from the system clock and process id).
    pub fn new(cfg: Config, seed: u64) -> Endpoint {
        Endpoint {
            cfg,
            rng: seed | 1,
            next_key: 1,
            calls: HashMap::new(),
            invites: HashMap::new(),
            asks: HashMap::new(),
            answered: HashMap::new(),
            pending: HashMap::new(),
            out: VecDeque::new(),
        }
    }

    /// The next output, if any.
    pub fn pop(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Calls with state in the endpoint (for a gauge and leak checks).
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// One message from the network (a datagram, or one message a
    /// [`wire::StreamFramer`] cut from a stream).
    pub fn receive(&mut self, bytes: &[u8], from: Peer, now: Instant) {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return; // keep-alive
        }
        let framed = match wire::frame(bytes, self.cfg.max_message_bytes) {
            Ok(f) => f,
            Err(e) => return self.malformed(bytes, from, e),
        };
        match framed.start.clone() {
            StartLine::Response { code } => self.on_response(&framed, code, now),
            StartLine::Request { method, .. } => self.on_request(framed, &method, from, now),
        }
    }

    /// Answers what can be answered (`400`, or `513` when too large) and
    /// reports the rest as dropped.
    fn malformed(&mut self, bytes: &[u8], from: Peer, error: WireError) {
        let code = match error {
            WireError::TooLarge { .. } => 513,
            _ => 400,
        };
        // Answerable only if the five transaction headers can be read.
        let head = &bytes[..bytes.len().min(self.cfg.max_message_bytes)];
        let answered = salvage(head, code)
            .filter(|(f, _)| f.method().is_some_and(|m| m != "ACK"))
            .map(|(f, code)| {
                let why = quote(&error.to_string());
                let extra = [("Warning", format!("399 callgate \"{why}\""))];
                self.send(
                    from,
                    wire::response(&f, code, wire::reason(code), None, &extra, None),
                );
            })
            .is_some();
        self.emit(Event::Malformed {
            from,
            error,
            answered,
        });
    }

    fn on_request(&mut self, req: Framed, method: &str, from: Peer, now: Instant) {
        // A retransmission gets the answer it had (an ACK is never answered).
        if method != "ACK"
            && let Some((bytes, _, _)) = self.answered.get(&server_key(&req, method))
        {
            let bytes = bytes.clone();
            return self.send(from, bytes);
        }
        if method != "ACK" && !self.well_formed(&req, method, from) {
            return;
        }
        match method {
            "INVITE" => self.on_invite(req, from, now),
            "ACK" => self.on_ack(&req),
            "CANCEL" => self.on_cancel(&req, from, now),
            "BYE" | "INFO" | "NOTIFY" => self.in_dialog(req, method, from, now),
            "OPTIONS" if self.dialog_of(&req).is_some() => self.answer(&req, from, 200, &[], now),
            "OPTIONS" => self.ask(req, from, None),
            "REFER" | "PRACK" => self.in_dialog_refuse(&req, method, from, now),
            m if NOT_ALLOWED.contains(&m) => self.answer(&req, from, 405, &[], now),
            _ => self.answer(&req, from, 501, &[], now),
        }
    }

    /// The checks every request gets before its method is looked at:
    /// rsipstack could read its start line, its CSeq names its method, its
    /// Request-URI is SIP (or tel), no extension we lack is required.
    fn well_formed(&mut self, req: &Framed, method: &str, from: Peer) -> bool {
        let known = !NOT_ALLOWED.contains(&method) && ALLOW.contains(method);
        if known && let Some(e) = &req.start_refused {
            let extra = [("Warning", format!("399 callgate \"{}\"", quote(e)))];
            self.send(
                from,
                wire::response(req, 400, "Bad Request", None, &extra, None),
            );
            self.emit(Event::Malformed {
                from,
                error: WireError::BadStartLine(e.clone()),
                answered: true,
            });
            return false;
        }
        if let Some((code, extra)) = refusal(req, method) {
            let bytes = wire::response(req, code, wire::reason(code), None, &extra, None);
            self.send(from, bytes);
            return false;
        }
        true
    }

    fn on_invite(&mut self, req: Framed, from: Peer, now: Instant) {
        let branch = server_key(&req, "INVITE");
        if let Some(call) = self.invites.get(&branch).copied() {
            return self.resend_invite_answer(call, from);
        }
        if req.to_tag().is_some() {
            return self.reinvite(req, from, now);
        }
        let ctype = req.content_type().unwrap_or("application/sdp");
        if !req.body.is_empty()
            && !ctype
                .trim()
                .to_ascii_lowercase()
                .starts_with("application/sdp")
        {
            let extra = [("Accept", "application/sdp".to_string())];
            return self.answer(&req, from, 415, &extra, now);
        }
        let call = self.key();
        let local_tag = self.token();
        let trying = wire::response(&req, 100, "Trying", None, &[], None);
        self.send(from, trying.clone());
        let dialog = Dialog::from_invite(&req, &local_tag, from);
        let invite = Invite::from_framed(&req, from);
        self.invites.insert(branch.clone(), call);
        self.calls.insert(
            call,
            Call {
                invite: req,
                branch,
                dialog,
                phase: Phase::Proceeding { last: trying },
                reinvite: None,
                reinvite_2xx: None,
            },
        );
        self.emit(Event::Invite { call, invite });
    }

    /// A retransmitted INVITE gets the last response again (§17.2.1).
    fn resend_invite_answer(&mut self, call: CallKey, from: Peer) {
        let Some(c) = self.calls.get(&call) else {
            return;
        };
        let bytes = match &c.phase {
            Phase::Proceeding { last } => last.clone(),
            Phase::Accepted(r) | Phase::Rejected(r) => r.bytes.clone(),
            Phase::Confirmed => return,
        };
        self.send(from, bytes);
    }

    fn on_ack(&mut self, req: &Framed) {
        // ACK of a non-2xx shares the INVITE's branch.
        if let Some(call) = self.invites.get(&server_key(req, "INVITE")).copied()
            && let Some(c) = self.calls.get_mut(&call)
            && matches!(c.phase, Phase::Rejected(_))
        {
            self.forget(call);
            return;
        }
        let Some(call) = self.dialog_of(req) else {
            return;
        };
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        if c.reinvite_2xx.take().is_some() {
            return;
        }
        if matches!(c.phase, Phase::Accepted(_)) {
            c.phase = Phase::Confirmed;
            self.emit(Event::Confirmed { call });
        }
    }

    fn on_cancel(&mut self, req: &Framed, from: Peer, now: Instant) {
        let Some(call) = self.invites.get(&server_key(req, "INVITE")).copied() else {
            return self.answer(req, from, 481, &[], now);
        };
        self.answer(req, from, 200, &[], now);
        let proceeding = self
            .calls
            .get(&call)
            .is_some_and(|c| matches!(c.phase, Phase::Proceeding { .. }));
        if proceeding {
            self.final_response(call, 487, &[], now);
            self.emit(Event::Cancelled { call });
        }
    }

    fn in_dialog(&mut self, req: Framed, method: &str, from: Peer, now: Instant) {
        let Some(call) = self.dialog_of(&req) else {
            return self.answer(&req, from, 481, &[], now);
        };
        match method {
            "BYE" => {
                self.answer(&req, from, 200, &[], now);
                self.emit(Event::Bye { call });
            }
            "INFO" => self.on_info(call, &req, from, now),
            _ => self.on_notify(call, &req, from, now),
        }
    }

    fn in_dialog_refuse(&mut self, req: &Framed, method: &str, from: Peer, now: Instant) {
        let code = match (self.dialog_of(req), method) {
            (None, _) => 481,
            // callgate never sends reliable provisionals, and transfers
            // only by its own REFER.
            (Some(_), "PRACK") => 481,
            (Some(_), _) => 403,
        };
        self.answer(req, from, code, &[], now);
    }

    fn on_info(&mut self, call: CallKey, req: &Framed, from: Peer, now: Instant) {
        let ctype = req.content_type().unwrap_or_default().to_ascii_lowercase();
        if !ctype.starts_with("application/dtmf-relay") && !ctype.starts_with("application/dtmf") {
            let extra = [("Accept", "application/dtmf-relay".to_string())];
            return self.answer(req, from, 415, &extra, now);
        }
        self.answer(req, from, 200, &[], now);
        if let Some(digit) = crate::carrier::sip::ua::dtmf_relay(&req.body) {
            self.emit(Event::Dtmf { call, digit });
        }
    }

    fn on_notify(&mut self, call: CallKey, req: &Framed, from: Peer, now: Instant) {
        let event = req.event().unwrap_or_default().to_ascii_lowercase();
        if !event.starts_with("refer") {
            let extra = [("Allow-Events", "refer".to_string())];
            return self.answer(req, from, 489, &extra, now);
        }
        self.answer(req, from, 200, &[], now);
        let terminated = req
            .subscription_state()
            .is_some_and(|s| s.trim().to_ascii_lowercase().starts_with("terminated"));
        let status = sipfrag_status(&req.body);
        self.emit(Event::ReferNotify {
            call,
            status,
            terminated,
        });
    }

    fn reinvite(&mut self, req: Framed, from: Peer, now: Instant) {
        let Some(call) = self.dialog_of(&req) else {
            return self.answer(&req, from, 481, &[], now);
        };
        let key = server_key(&req, "INVITE");
        let pending = self.calls.get(&call).and_then(|c| c.reinvite.as_ref());
        if pending.is_some_and(|(_, r)| server_key(r, "INVITE") == key) {
            // Its retransmission while the application decides.
            let trying = wire::response(&req, 100, "Trying", None, &[], None);
            return self.send(from, trying);
        }
        if pending.is_some() {
            let extra = [("Retry-After", "1".to_string())];
            return self.answer(&req, from, 500, &extra, now);
        }
        let trying = wire::response(&req, 100, "Trying", None, &[], None);
        self.send(from, trying);
        let txn = TxnKey(self.key().0);
        let offer = req.body.clone();
        if let Some(c) = self.calls.get_mut(&call) {
            c.reinvite = Some((txn, req));
        }
        self.emit(Event::Reinvite { call, txn, offer });
    }

    fn ask(&mut self, req: Framed, from: Peer, call: Option<CallKey>) {
        let txn = TxnKey(self.key().0);
        self.asks.insert(txn, (req, from, call));
        self.emit(Event::Options { txn });
    }

    fn on_response(&mut self, resp: &Framed, code: u16, now: Instant) {
        let Some(key) = resp.branch() else {
            return self.emit(Event::Stray);
        };
        if code < 200 {
            if let Some(p) = self.pending.get_mut(&key) {
                p.resend.slow_down(now);
            }
            return;
        }
        let Some(p) = self.pending.remove(&key) else {
            return self.emit(Event::Stray);
        };
        let event = match p.method {
            "BYE" => Event::ByeDone {
                call: p.call,
                code: Some(code),
            },
            _ => Event::ReferAnswered {
                call: p.call,
                code: Some(code),
            },
        };
        self.emit(event);
    }

    /// Which accepted call an in-dialog request belongs to.
    pub(crate) fn dialog_of(&self, req: &Framed) -> Option<CallKey> {
        self.calls
            .iter()
            .find(|(_, c)| !matches!(c.phase, Phase::Proceeding { .. }) && c.dialog.matches(req))
            .map(|(k, _)| *k)
    }

    /// Answers a non-INVITE request and keeps the answer for its
    /// retransmissions (Timer J: 64·T1 over UDP).
    pub(crate) fn answer(
        &mut self,
        req: &Framed,
        from: Peer,
        code: u16,
        extra: &[(&str, String)],
        now: Instant,
    ) {
        let tag = (code > 100).then(|| self.token());
        let mut headers: Vec<(&str, String)> = extra.to_vec();
        if matches!(code, 200 | 405 | 501) && req.method() != Some("CANCEL") {
            headers.push(("Allow", ALLOW.to_string()));
        }
        headers.push(("Server", self.cfg.user_agent.clone()));
        let bytes = wire::response(
            req,
            code,
            wire::reason(code),
            tag.as_deref(),
            &headers,
            None,
        );
        if let Some(m) = req.method() {
            let until = now + self.cfg.timers.give_up();
            self.answered
                .insert(server_key(req, m), (bytes.clone(), from, until));
        }
        self.send(from, bytes);
    }

    pub(crate) fn send(&mut self, to: Peer, bytes: Vec<u8>) {
        self.out.push_back(Output::Send { to, bytes });
    }

    pub(crate) fn emit(&mut self, event: Event) {
        self.out.push_back(Output::Event(event));
    }

    pub(crate) fn key(&mut self) -> CallKey {
        self.next_key += 1;
        CallKey(self.next_key)
    }

    /// 10 random hex digits (xorshift; tags and branches need only be
    /// unique and hard to guess, RFC 3261 §19.3).
    pub(crate) fn token(&mut self) -> String {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        format!("{:010x}", x & 0xff_ffff_ffff)
    }

    /// Drops every trace of a call (after its final state).
    pub(crate) fn forget(&mut self, call: CallKey) {
        if let Some(c) = self.calls.remove(&call) {
            self.invites.remove(&c.branch);
        }
        self.asks.retain(|_, (_, _, c)| *c != Some(call));
    }

    /// Timers: resends, give-ups, expired cached answers.
    pub fn poll(&mut self, now: Instant) {
        self.answered.retain(|_, (_, _, until)| *until > now);
        let keys: Vec<CallKey> = self.calls.keys().copied().collect();
        for call in keys {
            self.poll_call(call, now);
        }
        let keys: Vec<String> = self.pending.keys().cloned().collect();
        for k in keys {
            self.poll_pending(&k, now);
        }
    }

    fn poll_call(&mut self, call: CallKey, now: Instant) {
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        let to = c.dialog.source;
        let (due, bytes, rejected) = match &mut c.phase {
            Phase::Accepted(r) => (r.poll(now), r.bytes.clone(), false),
            Phase::Rejected(r) => (r.poll(now), r.bytes.clone(), true),
            _ => (Due::Nothing, Vec::new(), false),
        };
        let reinvite = c
            .reinvite_2xx
            .as_mut()
            .map(|r| (r.poll(now), r.bytes.clone()));
        match (due, rejected) {
            (Due::Resend, _) => self.send(to, bytes),
            (Due::GiveUp, true) => self.forget(call),
            (Due::GiveUp, false) => {
                if let Some(c) = self.calls.get_mut(&call) {
                    c.phase = Phase::Confirmed;
                }
                self.emit(Event::AckTimeout { call });
            }
            (Due::Nothing, _) => {}
        }
        match reinvite {
            Some((Due::Resend, bytes)) => self.send(to, bytes),
            Some((Due::GiveUp, _)) => {
                if let Some(c) = self.calls.get_mut(&call) {
                    c.reinvite_2xx = None;
                }
            }
            _ => {}
        }
    }

    fn poll_pending(&mut self, key: &str, now: Instant) {
        let Some(p) = self.pending.get_mut(key) else {
            return;
        };
        match p.resend.poll(now) {
            Due::Nothing => {}
            Due::Resend => {
                let (to, bytes) = (p.to, p.resend.bytes.clone());
                self.send(to, bytes);
            }
            Due::GiveUp => {
                let Some(p) = self.pending.remove(key) else {
                    return;
                };
                let event = match p.method {
                    "BYE" => Event::ByeDone {
                        call: p.call,
                        code: None,
                    },
                    _ => Event::ReferAnswered {
                        call: p.call,
                        code: None,
                    },
                };
                self.emit(event);
            }
        }
    }

    /// When [`Endpoint::poll`] should next run.
    pub fn next_deadline(&self) -> Option<Instant> {
        let calls = self.calls.values().flat_map(|c| {
            let phase = match &c.phase {
                Phase::Accepted(r) | Phase::Rejected(r) => Some(r.next_deadline()),
                _ => None,
            };
            phase
                .into_iter()
                .chain(c.reinvite_2xx.as_ref().map(Retransmit::next_deadline))
        });
        let pending = self.pending.values().map(|p| p.resend.next_deadline());
        let answered = self.answered.values().map(|(_, _, until)| *until);
        calls.chain(pending).chain(answered).min()
    }
}

/// Why a framed request is refused before its method is looked at, with
/// the headers that say so.
fn refusal(req: &Framed, method: &str) -> Option<(u16, Vec<(&'static str, String)>)> {
    let warn = |text: &str| vec![("Warning", format!("399 callgate \"{text}\""))];
    // Responses go back along the Vias: each must be a whole value.
    if !req.vias().all(wire::valid_via) {
        return Some((400, warn("malformed Via")));
    }
    if ![req.from_value(), req.to_value()]
        .into_iter()
        .all(wire::valid_name_addr)
    {
        return Some((400, warn("malformed From or To")));
    }
    // A UAS forwards nothing, so Max-Forwards is not its business (RFC
    // 4475 §3.3.11); the CSeq method must be the request's (§3.1.2.17).
    if req.cseq().is_none_or(|(_, m)| m != method) {
        return Some((400, warn("CSeq method differs from the request's")));
    }
    let scheme = match &req.start {
        StartLine::Request { uri, .. } => uri
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase(),
        StartLine::Response { .. } => String::new(),
    };
    if !matches!(scheme.as_str(), "sip" | "sips" | "tel") {
        return Some((416, Vec::new()));
    }
    let required: Vec<&str> = req.require();
    if !required.is_empty() && method != "CANCEL" {
        return Some((420, vec![("Unsupported", required.join(", "))]));
    }
    None
}

/// The transaction key of a request: the top Via's branch and sent-by
/// (RFC 3261 §17.2.3), or Call-ID + CSeq number + From tag for an
/// RFC 2543 peer without the magic cookie; `method` distinguishes CANCEL
/// (and non-INVITE requests) from the INVITE with the same branch.
pub(crate) fn server_key(req: &Framed, method: &str) -> String {
    let class = if method == "ACK" { "INVITE" } else { method };
    let call_id = req.call_id();
    let via = req.top_via();
    match via.as_ref().and_then(|v| Some((v, v.branch()?))) {
        // The Call-ID too: a client that reuses a branch across calls must
        // not get another call's answer as a "retransmission".
        Some((v, b)) if b.starts_with("z9hG4bK") => {
            format!("{b}|{}/{}|{call_id}|{class}", v.transport, v.sent_by())
        }
        _ => {
            let cseq = req.cseq().map_or(0, |c| c.0);
            let from = req.from_tag().unwrap_or_default();
            format!("{call_id}|{cseq}|{from}|{class}")
        }
    }
}

/// A request too broken to frame may still carry the five headers a
/// response copies (only its Content-Length, a scalar or its request line
/// was wrong): then it is answered, with `code` unless its version is not
/// SIP/2.0 (`505`). Responses are never answered; without those headers,
/// or with a bare LF in its head (its lines are then not certain), there is
/// nothing to answer with.
fn salvage(bytes: &[u8], code: u16) -> Option<(Framed, u16)> {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let start = head.split("\r\n").next()?;
    if start.starts_with("SIP/") || head.split("\r\n").any(|l| l.contains('\n')) {
        return None;
    }
    let method = start
        .split(' ')
        .next()
        .filter(|m| !m.is_empty())?
        .to_ascii_uppercase();
    let version = start.rsplit(' ').next().unwrap_or_default();
    let code = if version.starts_with("SIP/") && version != "SIP/2.0" {
        505
    } else {
        code
    };
    let framed = Framed {
        start: StartLine::Request {
            method,
            uri: String::new(),
        },
        headers: wire::headers_alone(head),
        body: Vec::new(),
        raw: Vec::new(),
        start_refused: None,
    };
    let all = framed.vias().next().is_some()
        && framed.from_header().is_ok()
        && framed.to_header().is_ok()
        && framed.call_id_header().is_ok()
        && framed.cseq_header().is_ok();
    all.then_some((framed, code))
}

/// The status code of a `message/sipfrag` body (`SIP/2.0 200 OK`).
fn sipfrag_status(body: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(body).ok()?;
    let rest = text.trim_start().strip_prefix("SIP/2.0 ")?;
    rest.get(..3)?.parse().ok()
}

/// Makes a text safe inside a quoted Warning text.
pub(crate) fn quote(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .map(|c| if c == '"' { '\'' } else { c })
        .take(120)
        .collect()
}
