//! How a SIP leg ends: refused before its answer (`503`, `302`), hung up
//! (`BYE`), or transferred (`REFER`, then `BYE` once the NOTIFY reports
//! the transfer done, or after `sip.refer_timeout_ms`). Always bounded;
//! always releases the dialog, and with the media task the RTP port.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::q850::{self, reason_header};
use super::{Command, Signal, SipLeg};
use crate::config::SipOverflow;
use crate::leg::{Cause, Finish, Finished};

pub(super) async fn finish(mut leg: SipLeg, how: Finish, bound: Duration) -> Finished {
    let deadline = Instant::now() + bound;
    let forced = if leg.media.is_none() {
        refuse_unanswered(&leg, &how);
        false
    } else {
        match how {
            Finish::Release => false,
            Finish::Hangup(cause) => !bye(&mut leg, Some(reason_header(&cause)), deadline).await,
            Finish::Refuse(v) => {
                let cause = q850::header(q850::PROTOCOL_ERROR, v.kind);
                !bye(&mut leg, Some(cause), deadline).await
            }
            Finish::Transfer { target, cause } => transfer(&mut leg, target, &cause, bound).await,
        }
    };
    leg.link.send(Command::Release);
    // Dropping the media handle stops its task, which frees the port.
    if let Some(m) = leg.media.take() {
        m.task.abort();
    }
    Finished { forced }
}

/// A call that was never answered: refused as `sip.overflow` says, unless
/// the caller already left (then the endpoint answered the CANCEL).
fn refuse_unanswered(leg: &SipLeg, how: &Finish) {
    let cfg = &leg.shared.cfg;
    let retry = ("Retry-After", cfg.retry_after_s.to_string());
    let (code, headers) = match how {
        Finish::Release => return,
        Finish::Refuse(v) => (
            400,
            vec![("Warning", format!("399 callgate \"{}\"", v.kind))],
        ),
        Finish::Transfer { target, cause } => {
            match (cfg.overflow, queue_uri(leg, target.as_deref())) {
                (SipOverflow::Redirect, Some(uri)) => {
                    (302, vec![("Contact", format!("<{uri}>")), reason(cause)])
                }
                _ => (503, vec![retry, reason(cause)]),
            }
        }
        Finish::Hangup(cause) => (503, vec![retry, reason(cause)]),
    };
    info!(code, "refusing the unanswered call");
    leg.link.send(Command::Reject(code, headers));
}

fn reason(cause: &Cause) -> (&'static str, String) {
    ("Reason", reason_header(cause))
}

/// The transfer target as a SIP URI: the call's own target when it is one,
/// else `sip.human_queue_uri`.
fn queue_uri(leg: &SipLeg, target: Option<&str>) -> Option<String> {
    let is_uri =
        |t: &&str| t.starts_with("sip:") || t.starts_with("sips:") || t.starts_with("tel:");
    target
        .filter(is_uri)
        .map(String::from)
        .or_else(|| leg.shared.cfg.human_queue_uri.clone())
}

/// Sends BYE and waits (until `deadline`) for its answer; whether one came.
async fn bye(leg: &mut SipLeg, reason: Option<String>, deadline: Instant) -> bool {
    leg.link.send(Command::Bye(reason));
    let answered = wait_for(leg, deadline, |s| {
        matches!(s, Signal::ByeDone(_) | Signal::Bye)
    })
    .await;
    if answered.is_none() {
        warn!("BYE not answered in time");
    }
    answered.is_some()
}

/// REFER to the human queue; BYE once the NOTIFY says it worked, it
/// failed, or `refer_timeout_ms` passed. Returns whether it had to be
/// forced (no answer to the BYE in time).
async fn transfer(
    leg: &mut SipLeg,
    target: Option<String>,
    cause: &Cause,
    bound: Duration,
) -> bool {
    let refer_wait = Duration::from_millis(leg.shared.cfg.refer_timeout_ms);
    let Some(uri) = queue_uri(leg, target.as_deref()) else {
        warn!("transfer asked but no sip.human_queue_uri: hanging up instead");
        return !bye(leg, Some(reason_header(cause)), Instant::now() + bound).await;
    };
    leg.link.send(Command::Refer(uri.clone()));
    let until = Instant::now() + refer_wait;
    let outcome = loop {
        match wait_for(leg, until, |_| true).await {
            Some(Signal::ReferAnswered(Some(code))) if (200..300).contains(&code) => continue,
            Some(Signal::ReferAnswered(code)) => break format!("refused ({code:?})"),
            Some(Signal::ReferNotify {
                status: Some(s), ..
            }) if (200..300).contains(&s) => {
                break "done".to_string();
            }
            Some(Signal::ReferNotify {
                status: Some(s), ..
            }) if s >= 300 => {
                break format!("failed ({s})");
            }
            Some(Signal::Bye | Signal::Cancelled) => return false,
            Some(_) => continue,
            None => break "no final NOTIFY in time".to_string(),
        }
    };
    info!(target = %uri, outcome = %outcome, "REFER to the human queue");
    !bye(leg, Some(reason_header(cause)), Instant::now() + bound).await
}

/// The next signal that `pick` accepts, until `deadline` (others are
/// handled as usual: re-INVITEs answered, the rest dropped).
async fn wait_for(
    leg: &mut SipLeg,
    deadline: Instant,
    pick: impl Fn(&Signal) -> bool,
) -> Option<Signal> {
    loop {
        let s = tokio::time::timeout_at(deadline.into(), leg.signals.recv())
            .await
            .ok()??;
        if let Signal::Reinvite { txn, offer } = &s {
            let (txn, offer) = (*txn, offer.clone());
            leg.reinvite(txn, &offer);
            continue;
        }
        if pick(&s) {
            return Some(s);
        }
    }
}
