//! What the application tells the endpoint: answer, refuse, hang up,
//! transfer. Each returns an error when the call is not in a state where
//! the command means anything (already answered, already gone), so the
//! application can count it instead of sending something a peer would
//! reject.

use std::time::Instant;

use crate::carrier::sip::ua::endpoint::{Endpoint, Pending, Phase};
use crate::carrier::sip::ua::txn::Retransmit;
use crate::carrier::sip::ua::wire;
use crate::carrier::sip::ua::{CallKey, Transport, TxnKey};

/// A refusal of a re-INVITE: the status code and extra headers.
pub type Refusal<'a> = (u16, Vec<(&'a str, String)>);

/// A command that did not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("no such call (ended or never existed)")]
    NoCall,
    #[error("the call is already answered")]
    Answered,
    #[error("the call is not answered yet")]
    NotAnswered,
    #[error("no request waits for this answer")]
    NoRequest,
}

impl Endpoint {
    /// `180 Ringing` (with our tag) while the call waits for admission.
    pub fn ringing(&mut self, call: CallKey) -> Result<(), CommandError> {
        let c = self.calls.get_mut(&call).ok_or(CommandError::NoCall)?;
        let Phase::Proceeding { last } = &mut c.phase else {
            return Err(CommandError::Answered);
        };
        let tag = c.dialog.local_tag.clone();
        let rr = record_routes(&c.invite);
        let bytes = wire::response(&c.invite, 180, "Ringing", Some(&tag), &rr, None);
        *last = bytes.clone();
        let to = c.dialog.source;
        self.send(to, bytes);
        Ok(())
    }

    /// `200 OK` with the SDP answer; resent until the ACK.
    pub fn accept(&mut self, call: CallKey, sdp: &[u8], now: Instant) -> Result<(), CommandError> {
        let contact = self.contact();
        let server = self.cfg.user_agent.clone();
        let timers = self.cfg.timers;
        let c = self.calls.get_mut(&call).ok_or(CommandError::NoCall)?;
        if !matches!(c.phase, Phase::Proceeding { .. }) {
            return Err(CommandError::Answered);
        }
        let tag = c.dialog.local_tag.clone();
        // RFC 3261 §12.1.1: a response that makes a dialog copies every
        // Record-Route, in order, or a proxy's in-dialog requests (ACK,
        // BYE) have no route back through it.
        let mut extra = record_routes(&c.invite);
        extra.extend([
            ("Contact", format!("<{contact}>")),
            (
                "Allow",
                crate::carrier::sip::ua::endpoint::ALLOW.to_string(),
            ),
            // No extension is supported: callgate does not take Replaces,
            // 100rel, timers or any other option tag (RFC 3261 §20.37
            // allows the empty list).
            ("Supported", String::new()),
            ("Server", server),
        ]);
        let body = Some(("application/sdp", sdp));
        let bytes = wire::response(&c.invite, 200, "OK", Some(&tag), &extra, body);
        let reliable = c.dialog.source.transport == Transport::Tcp;
        c.phase = Phase::Accepted(Retransmit::new(bytes.clone(), timers, reliable, now));
        let to = c.dialog.source;
        self.send(to, bytes);
        Ok(())
    }

    /// A final refusal (`503` with `Retry-After`, `302` with `Contact`,
    /// `488` with `Warning`, …); resent until the ACK, then forgotten.
    pub fn reject(
        &mut self,
        call: CallKey,
        code: u16,
        extra: &[(&str, String)],
        now: Instant,
    ) -> Result<(), CommandError> {
        let c = self.calls.get(&call).ok_or(CommandError::NoCall)?;
        if !matches!(c.phase, Phase::Proceeding { .. }) {
            return Err(CommandError::Answered);
        }
        self.final_response(call, code, extra, now);
        Ok(())
    }

    pub(crate) fn final_response(
        &mut self,
        call: CallKey,
        code: u16,
        extra: &[(&str, String)],
        now: Instant,
    ) {
        let server = self.cfg.user_agent.clone();
        let timers = self.cfg.timers;
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        let tag = c.dialog.local_tag.clone();
        let mut headers = extra.to_vec();
        headers.push(("Server", server));
        let bytes = wire::response(
            &c.invite,
            code,
            wire::reason(code),
            Some(&tag),
            &headers,
            None,
        );
        let reliable = c.dialog.source.transport == Transport::Tcp;
        c.phase = Phase::Rejected(Retransmit::new(bytes.clone(), timers, reliable, now));
        let to = c.dialog.source;
        self.send(to, bytes);
    }

    /// Answers a re-INVITE: `Ok(sdp)` is a `200` with the current answer
    /// (resent until its ACK), `Err((code, headers))` a refusal such as
    /// `488` — the session stays as it was.
    pub fn answer_reinvite(
        &mut self,
        call: CallKey,
        txn: TxnKey,
        answer: Result<&[u8], Refusal<'_>>,
        now: Instant,
    ) -> Result<(), CommandError> {
        let contact = self.contact();
        let server = self.cfg.user_agent.clone();
        let timers = self.cfg.timers;
        let c = self.calls.get_mut(&call).ok_or(CommandError::NoCall)?;
        let (req, tag) = match c.reinvite.take() {
            Some((t, req)) if t == txn => (req, c.dialog.local_tag.clone()),
            other => {
                c.reinvite = other;
                return Err(CommandError::NoRequest);
            }
        };
        c.dialog.remote_cseq = req.cseq().map_or(c.dialog.remote_cseq, |s| s.0);
        let reliable = c.dialog.source.transport == Transport::Tcp;
        let to = c.dialog.source;
        let key = crate::carrier::sip::ua::endpoint::server_key(&req, "INVITE");
        let bytes = match answer {
            Ok(sdp) => {
                let extra = [("Contact", format!("<{contact}>")), ("Server", server)];
                let bytes = wire::response(
                    &req,
                    200,
                    "OK",
                    Some(&tag),
                    &extra,
                    Some(("application/sdp", sdp)),
                );
                c.reinvite_2xx = Some(Retransmit::new(bytes.clone(), timers, reliable, now));
                bytes
            }
            Err((code, mut extra)) => {
                extra.push(("Server", server));
                // The ACK of a non-2xx is hop-by-hop and needs no state here.
                wire::response(&req, code, wire::reason(code), Some(&tag), &extra, None)
            }
        };
        // A retransmitted re-INVITE gets this answer again.
        let until = now + timers.give_up();
        self.answered.insert(key, (bytes.clone(), to, until));
        self.send(to, bytes);
        Ok(())
    }

    /// Answers an out-of-dialog OPTIONS (`200` serving, `503` not).
    pub fn answer_options(
        &mut self,
        txn: TxnKey,
        code: u16,
        extra: &[(&str, String)],
        now: Instant,
    ) -> Result<(), CommandError> {
        let (req, from, _) = self.asks.remove(&txn).ok_or(CommandError::NoRequest)?;
        // RFC 3261 §11.2: what an INVITE may carry — bodies, their
        // encodings and languages — and the extensions taken (none).
        let mut headers = extra.to_vec();
        headers.extend([
            ("Accept", "application/sdp".to_string()),
            ("Accept-Encoding", "identity".to_string()),
            ("Accept-Language", "en".to_string()),
            ("Supported", String::new()),
        ]);
        self.answer(&req, from, code, &headers, now);
        Ok(())
    }

    /// Sends `BYE` (with a `Reason` header when given); its answer or
    /// timeout comes as [`crate::carrier::sip::ua::Event::ByeDone`]. An unanswered call is
    /// refused instead (`487` is for CANCEL: use [`Endpoint::reject`]).
    pub fn bye(
        &mut self,
        call: CallKey,
        reason: Option<String>,
        now: Instant,
    ) -> Result<(), CommandError> {
        let extra: Vec<(&str, String)> = reason.into_iter().map(|r| ("Reason", r)).collect();
        self.send_in_dialog(call, "BYE", &extra, None, now)
    }

    /// Sends `REFER` to `target` (with `Referred-By` us); the answer comes
    /// as [`crate::carrier::sip::ua::Event::ReferAnswered`], progress as
    /// [`crate::carrier::sip::ua::Event::ReferNotify`].
    pub fn refer(&mut self, call: CallKey, target: &str, now: Instant) -> Result<(), CommandError> {
        let me = format!("<{}>", self.contact());
        let extra = [("Refer-To", format!("<{target}>")), ("Referred-By", me)];
        self.send_in_dialog(call, "REFER", &extra, None, now)
    }

    fn send_in_dialog(
        &mut self,
        call: CallKey,
        method: &'static str,
        extra: &[(&str, String)],
        body: Option<(&str, &[u8])>,
        now: Instant,
    ) -> Result<(), CommandError> {
        let branch = format!("z9hG4bK{}", self.token());
        let contact = self.contact();
        let (timers, local) = (self.cfg.timers, self.cfg.local);
        let ua = self.cfg.user_agent.clone();
        let c = self.calls.get_mut(&call).ok_or(CommandError::NoCall)?;
        if matches!(c.phase, Phase::Proceeding { .. } | Phase::Rejected(_)) {
            return Err(CommandError::NotAnswered);
        }
        let to = c.dialog.next_hop();
        let proto = match to.transport {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
        };
        let via = format!("SIP/2.0/{proto} {local};branch={branch};rport");
        let mut headers = extra.to_vec();
        headers.push(("User-Agent", ua));
        let bytes = c.dialog.request(method, &via, &contact, &headers, body);
        let reliable = to.transport == Transport::Tcp;
        let resend = Retransmit::new(bytes.clone(), timers, reliable, now);
        self.pending.insert(
            branch,
            Pending {
                call,
                method,
                to,
                resend,
            },
        );
        self.send(to, bytes);
        Ok(())
    }

    /// The application is done with a call: its dialog and transactions
    /// go (answers to retransmitted BYEs stay cached until Timer J).
    pub fn release(&mut self, call: CallKey, now: Instant) {
        match self.calls.get(&call).map(|c| &c.phase) {
            // A refusal stays until its ACK (or Timer H) so that it is
            // resent if lost; it then goes by itself.
            Some(Phase::Rejected(_)) => return,
            // Never answered: the peer must not wait for a final response.
            Some(Phase::Proceeding { .. }) => self.final_response(call, 500, &[], now),
            _ => {}
        }
        // A BYE in flight keeps its retransmissions until answered.
        if !matches!(
            self.calls.get(&call).map(|c| &c.phase),
            Some(Phase::Rejected(_))
        ) {
            self.forget(call);
        }
    }

    fn contact(&self) -> String {
        format!("sip:callgate@{}", self.cfg.local)
    }
}

/// The request's `Record-Route` headers, in order, as a response copies them.
fn record_routes(req: &wire::Framed) -> Vec<(&'static str, String)> {
    req.record_routes()
        .map(|v| ("Record-Route", v.to_string()))
        .collect()
}
