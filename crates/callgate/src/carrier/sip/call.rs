//! One SIP call from its INVITE: the offer is negotiated first (no common
//! codec → `488`, before admission is even asked), then the call takes the
//! same path as every other ingress (`ingress::run`): admission, then
//! setup and the call actor — with the RTP port leased and the `200 OK`
//! sent only once admission said yes.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{Instrument, info_span, warn};

use super::leg::{Command, ServerLink, Signal, SipLeg, SipShared, codecs};
use super::ua::{self, Invite, sdp};
use crate::app::CallServices;
use crate::call::labels::{Labels, Transport};
use crate::call::setup::Arrival;
use crate::ingress::Refusal;
use crate::leg::{Ingress, LegFormat};
use crate::metrics as m;
use state_store::CallId;

pub(super) async fn run(
    app: Arc<CallServices>,
    shared: Arc<SipShared>,
    link: ServerLink,
    signals: mpsc::Receiver<Signal>,
    invite: Invite,
) {
    let call_id = CallId::new_random();
    let span =
        info_span!("call", call_id = %call_id, sip_call_id = %invite.call_id, ingress = "sip");
    async move {
        let offer = sdp::parse(&invite.offer).map_err(|e| (399, e.to_string()));
        let negotiated = offer.as_ref().map_err(Clone::clone).and_then(|o| {
            sdp::negotiate(o, &codecs(&shared.cfg), None)
                .and_then(|n| n.check_local_address(shared.local_ip).map(|()| n))
                .map_err(|e| (e.warning_code(), e.to_string()))
        });
        let (offer, negotiated) = match (offer, negotiated) {
            (Ok(o), Ok(n)) => (o, n),
            (_, Err((code, why))) => {
                return not_acceptable(&app, &link, &invite, call_id, code, &why);
            }
            (Err((code, why)), _) => {
                return not_acceptable(&app, &link, &invite, call_id, code, &why);
            }
        };
        let leg = SipLeg::new(link, signals, Arc::clone(&shared), offer, negotiated);
        let format = crate::leg::Leg::format(&leg);
        let labels = Labels::from_sip_headers(&app.cfg().receipt, &invite.headers);
        let arrival = arrival(call_id, &invite, format, &shared, labels);
        crate::ingress::run(app, leg, arrival).await;
    }
    .instrument(span)
    .await;
}

fn arrival(
    call_id: CallId,
    invite: &Invite,
    format: LegFormat,
    shared: &SipShared,
    labels: Labels,
) -> Arrival {
    let user = |v: &str| {
        let uri = ua::wire::uri_of(v);
        uri.split_once(':')
            .map(|(_, r)| r.split('@').next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    Arrival {
        call_id,
        ingress: Ingress::Sip,
        format,
        carrier_call_id: invite.call_id.clone(),
        partner: None,
        metadata: vec![
            ("ingress".to_string(), "sip".to_string()),
            ("carrier_call_id".to_string(), invite.call_id.clone()),
            ("from_user".to_string(), user(&invite.from)),
            ("to_user".to_string(), user(&invite.request_uri)),
        ],
        transfer_target: shared.cfg.human_queue_uri.clone(),
        transport: transport_label(invite.source.transport),
        labels,
    }
}

/// `488 Not Acceptable Here` with a `Warning` saying why; recorded as a
/// refusal (`unsupported_media_format`).
fn not_acceptable(
    app: &CallServices,
    link: &ServerLink,
    invite: &Invite,
    call_id: CallId,
    code: u16,
    why: &str,
) {
    warn!(why, "INVITE offer not acceptable: 488");
    metrics::counter!(m::PROTOCOL_ERRORS, "kind" => "unsupported_media_format").increment(1);
    let warning = format!("{code} callgate \"{}\"", why.replace('"', "'"));
    let _ = link
        .tx
        .send((link.key, Command::Reject(488, vec![("Warning", warning)])));
    let _ = link.tx.send((link.key, Command::Release));
    let arrival = Arrival {
        call_id,
        ingress: Ingress::Sip,
        format: LegFormat::Mulaw8k,
        carrier_call_id: invite.call_id.clone(),
        partner: None,
        metadata: Vec::new(),
        transfer_target: None,
        transport: transport_label(invite.source.transport),
        labels: Labels::default(),
    };
    crate::ingress::record_refusal(app, &arrival, Refusal::UnsupportedFormat, Duration::ZERO);
}

/// The ledger's transport label of the transport the INVITE came over.
const fn transport_label(t: ua::Transport) -> Transport {
    match t {
        ua::Transport::Udp => Transport::SipUdp,
        ua::Transport::Tcp => Transport::SipTcp,
    }
}
