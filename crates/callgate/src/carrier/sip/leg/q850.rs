//! The one table from why a SIP call ends, or is refused, to the Q.850
//! cause in its `Reason` header (RFC 3326): carriers that map `Reason` to
//! ISUP, or reroute on the cause, see congestion as congestion and a timer
//! as a timer, not every end as "normal clearing". The text is callgate's
//! own reason (`queue_timeout`, `max_duration`, `stalled:tts`).
//!
//! The table is written out, with each row's why, in
//! `docs/operations/sip-trunks.md`; `every_reason_has_the_documented_cause`
//! pins it.

use admission::RejectReason;

use crate::end::EndReason;
use crate::leg::Cause;

/// 16: normal call clearing.
pub const NORMAL_CLEARING: u16 = 16;
/// 34: no circuit/channel available — no room, try another route.
pub const NO_CIRCUIT: u16 = 34;
/// 41: temporary failure — this instance cannot serve the call now.
pub const TEMPORARY_FAILURE: u16 = 41;
/// 42: switching equipment congestion — the gate itself is full.
pub const CONGESTION: u16 = 42;
/// 102: recovery on timer expiry — a limit's timer ended the call.
pub const TIMER_EXPIRY: u16 = 102;
/// 111: protocol error, unspecified — the peer broke the protocol.
pub const PROTOCOL_ERROR: u16 = 111;

/// The Q.850 cause of a refusal or an end.
pub const fn cause(c: &Cause) -> u16 {
    match c {
        Cause::Refused(r) => refused(*r),
        Cause::Ended(e, _) => ended(*e),
    }
}

const fn refused(r: RejectReason) -> u16 {
    match r {
        // The instance itself is congested: its media clock runs late.
        RejectReason::AtCapacity | RejectReason::InstanceOverloaded => CONGESTION,
        RejectReason::QueueFull | RejectReason::PartnerQuota => NO_CIRCUIT,
        RejectReason::QueueTimeout => TIMER_EXPIRY,
        RejectReason::Draining | RejectReason::DependencyDown(_) | RejectReason::Internal => {
            TEMPORARY_FAILURE
        }
        // `RejectReason` is non-exhaustive: a reason added later is a
        // temporary failure until it has its own row.
        _ => TEMPORARY_FAILURE,
    }
}

const fn ended(e: EndReason) -> u16 {
    match e {
        EndReason::CallerHangup
        | EndReason::CallerHangupDuringSetup
        | EndReason::BotEnded
        | EndReason::Transferred
        | EndReason::DrainTransfer => NORMAL_CLEARING,
        EndReason::ProtocolViolation(_) => PROTOCOL_ERROR,
        // The WebRTC losses never end a SIP call; named for exhaustiveness.
        EndReason::MediaStalled
        | EndReason::RtpTimeout
        | EndReason::MaxDuration
        | EndReason::IceFailed
        | EndReason::DtlsFailed
        | EndReason::ConsentLost => TIMER_EXPIRY,
        EndReason::CarrierGone
        | EndReason::CarrierGoneDuringSetup
        | EndReason::SetupFailed(_)
        | EndReason::ProviderFailed(_)
        | EndReason::Stalled(_)
        | EndReason::DrainDeadline
        | EndReason::OwnerFenced
        | EndReason::Shutdown => TEMPORARY_FAILURE,
    }
}

/// The `Reason` header value: `Q.850;cause=N;text="<why>"`.
pub fn reason_header(c: &Cause) -> String {
    header(cause(c), &c.wire())
}

/// The `Reason` header value for a cause and a text (quotes replaced).
pub fn header(cause: u16, text: &str) -> String {
    format!("Q.850;cause={cause};text=\"{}\"", text.replace('"', "'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::end::{Culprit, Provider, Resource};
    use admission::Dependency;

    #[test]
    fn every_reason_has_the_documented_cause() {
        let refusals = [
            (RejectReason::AtCapacity, 42),
            (RejectReason::QueueFull, 34),
            (RejectReason::PartnerQuota, 34),
            (RejectReason::InstanceOverloaded, 42),
            (RejectReason::QueueTimeout, 102),
            (RejectReason::Draining, 41),
            (RejectReason::DependencyDown(Dependency::Db), 41),
            (RejectReason::Internal, 41),
        ];
        for (r, n) in refusals {
            assert_eq!(cause(&Cause::Refused(r)), n, "{r:?}");
        }
        let ends = [
            (EndReason::CallerHangup, 16),
            (EndReason::BotEnded, 16),
            (EndReason::Transferred, 16),
            (EndReason::DrainTransfer, 16),
            (EndReason::ProtocolViolation("no_ack"), 111),
            (EndReason::RtpTimeout, 102),
            (EndReason::MaxDuration, 102),
            (EndReason::MediaStalled, 102),
            (EndReason::SetupFailed(Resource::Tts), 41),
            (EndReason::ProviderFailed(Provider::Stt), 41),
            (EndReason::Stalled(Culprit::Dialog), 41),
            (EndReason::DrainDeadline, 41),
            (EndReason::OwnerFenced, 41),
            (EndReason::Shutdown, 41),
        ];
        for (e, n) in ends {
            assert_eq!(cause(&Cause::Ended(e, None)), n, "{e:?}");
        }
    }

    #[test]
    fn the_header_carries_the_cause_and_callgates_reason() {
        let c = Cause::Refused(RejectReason::QueueTimeout);
        assert_eq!(reason_header(&c), "Q.850;cause=102;text=\"queue_timeout\"");
        assert_eq!(
            header(111, "say \"hi\""),
            "Q.850;cause=111;text=\"say 'hi'\""
        );
    }
}
