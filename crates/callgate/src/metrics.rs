//! Metric names, units and the Prometheus exporter.
//!
//! Naming rule: `callgate_` prefix, counters end in `_total`, histograms carry
//! their unit (`_seconds`), labels are low-cardinality (`reason`, `resource`,
//! `kind`; never a call id). Everything an operator needs to answer "why was
//! this call rejected?" and "why did it end?" is a labelled counter here and
//! a log line with the call id.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const CALLS_ACTIVE: &str = "callgate_calls_active";
pub const CALLS_QUEUED: &str = "callgate_admission_queued";
pub const CAPACITY: &str = "callgate_admission_capacity";
/// What the four ceilings (or the pin) allow; `CAPACITY` is the effective
/// one, lower while the instance ceiling binds.
pub const CAPACITY_CONFIGURED: &str = "callgate_admission_configured_capacity";
/// p99 lateness of the 20 ms media clock over `admission.lag_window_ms`.
pub const INSTANCE_LAG_P99: &str = "callgate_instance_lag_p99_seconds";
/// 1 for the instance ceiling's current `state` (`healthy`, `overloaded`,
/// `recovering`), 0 for the others.
pub const INSTANCE_STATE: &str = "callgate_instance_state";
/// Calls the instance ceiling allows (set only while it binds; the
/// configured capacity otherwise).
pub const INSTANCE_CEILING: &str = "callgate_instance_ceiling_calls";
/// Times the instance went overloaded.
pub const INSTANCE_TRIPS: &str = "callgate_instance_overload_trips_total";
/// Calls whose setup is in progress, and their bound (`admission.max_setups`).
pub const SETUPS_MAX: &str = "callgate_admission_max_setups";
pub const ADMISSION_WAIT: &str = "callgate_admission_wait_seconds";
pub const ADMITTED: &str = "callgate_calls_admitted_total";
pub const REJECTED: &str = "callgate_admission_rejections_total";
/// Partner upgrades refused before the upgrade (401), by why.
pub const PARTNER_AUTH_REFUSED: &str = "callgate_partner_auth_refused_total";
/// Resume attempts on the partner ingress, by `result`: `resumed`, or why
/// one was refused (`malformed`, `unknown`, `expired`, `used`,
/// `wrong_partner`).
pub const PARTNER_RESUMES: &str = "callgate_partner_resumes_total";
/// Calls a partner holds in the gate now, by `state` (`active`, `queued`).
pub const PARTNER_CALLS: &str = "callgate_partner_calls";
/// A partner's `max_concurrent_calls`.
pub const PARTNER_QUOTA: &str = "callgate_partner_quota_calls";
pub const SETUP_SECONDS: &str = "callgate_call_setup_seconds";
pub const SETUP_FAILURES: &str = "callgate_call_setup_failures_total";
pub const CALLS_ENDED: &str = "callgate_calls_ended_total";
/// Receipts closed, by `status` (`completed`, `failed`: a close timed out
/// or was forced, a write was lost, or the permit's release was not seen).
pub const CLEANUPS: &str = "callgate_call_cleanups_total";
pub const CALL_SECONDS: &str = "callgate_call_duration_seconds";
pub const OVERFLOWED: &str = "callgate_overflow_calls_total";
pub const FIRST_AUDIO: &str = "callgate_first_audio_seconds";
pub const REPLY_LATENCY: &str = "callgate_reply_latency_seconds";
pub const BARGE_INS: &str = "callgate_barge_ins_total";
/// Bot output paused on the caller's voice (reversible barge-in).
pub const BARGE_IN_PAUSES: &str = "callgate_barge_in_pauses_total";
/// Pauses taken back because no words came (false barge-ins).
pub const FALSE_BARGE_INS: &str = "callgate_false_barge_ins_total";
/// Caller speech onset (VAD) → the leg's `clear` performed, seconds.
pub const BARGE_IN_STOP: &str = "callgate_barge_in_stop_seconds";
/// callgate's own share of a turn's latency, seconds (call/core/timing.rs).
pub const TURN_OWN: &str = "callgate_turn_own_seconds";
pub const MEDIA_IN: &str = "callgate_media_frames_received_total";
pub const MEDIA_OUT: &str = "callgate_media_frames_sent_total";
pub const MEDIA_OUT_DROPPED: &str = "callgate_media_frames_dropped_total";
pub const PROTOCOL_ERRORS: &str = "callgate_carrier_protocol_errors_total";
/// WebSocket closing handshakes, by `outcome`: `answered` (the peer's close
/// came back), `peer_gone` (it closed or reset first), `timed_out` (no
/// answer in time: the socket was dropped and reset), `skipped` (the writer
/// was aborted, or a message over the transport cap left the stream
/// unreadable).
pub const WS_CLOSE_HANDSHAKES: &str = "callgate_ws_close_handshakes_total";
pub const STALE_DROPPED: &str = "callgate_stale_events_dropped_total";
pub const TOOL_CALLS: &str = "callgate_tool_calls_total";
pub const TOOL_SECONDS: &str = "callgate_tool_call_seconds";
pub const WRITES_LOST: &str = "callgate_call_writes_lost_total";
pub const TEARDOWN_SECONDS: &str = "callgate_call_teardown_seconds";
pub const DRAINING: &str = "callgate_draining";
pub const STALLS: &str = "callgate_call_stalls_total";
/// Mid-call provider reconnect attempts, by `provider` and `why`
/// (`down`: the connection dropped or an attempt found it down;
/// `capacity`: an attempt was refused for capacity).
pub const RECONNECT_ATTEMPTS: &str = "callgate_provider_reconnect_attempts_total";
/// Mid-call provider connections restored, by `provider`.
pub const RECONNECTED: &str = "callgate_provider_reconnected_total";
/// SIP requests received, by `method` (`other` for unknown ones).
pub const SIP_REQUESTS: &str = "callgate_sip_requests_total";
/// SIP responses callgate sent, by `code`.
pub const SIP_RESPONSES: &str = "callgate_sip_responses_total";
/// SIP requests callgate sent (BYE, REFER), by `method`.
pub const SIP_REQUESTS_SENT: &str = "callgate_sip_requests_sent_total";
/// SIP messages refused or dropped as malformed, by `answered` (`true`: a
/// `400`/`513` went back; `false`: dropped).
pub const SIP_MALFORMED: &str = "callgate_sip_malformed_total";
/// SIP responses matching nothing of ours (dropped).
pub const SIP_STRAY: &str = "callgate_sip_stray_responses_total";
/// RTP port pairs leased now.
pub const RTP_PORTS_IN_USE: &str = "callgate_rtp_ports_in_use";
/// Calls ended because the peer sent no RTP or RTCP for `sip.rtp_timeout_ms`.
pub const RTP_TIMEOUTS: &str = "callgate_rtp_timeouts_total";
/// Inbound RTP packets the jitter buffer dropped, by `why` (`late`,
/// `duplicate`, `overflow`), and packets of a payload type not negotiated
/// (`why = "payload_type"`) or unparsable (`why = "malformed"`).
pub const RTP_DROPPED: &str = "callgate_rtp_packets_dropped_total";
/// 20 ms frames the jitter buffer concealed with silence (lost or late).
pub const RTP_CONCEALED: &str = "callgate_rtp_frames_concealed_total";
/// WebRTC sessions held now (signalling and media; `webrtc.max_sessions`).
pub const WEBRTC_SESSIONS: &str = "callgate_webrtc_sessions";
/// `POST /v1/webrtc` answers, by `outcome` (`answered`, `refused`,
/// `unauthorized`, `bad_sdp`, `no_opus`, `too_large`, ... — the refusal kind).
pub const WEBRTC_OFFERS: &str = "callgate_webrtc_offers_total";
/// WebRTC sessions whose transport was lost, by `why` (`ice_failed`,
/// `dtls_failed`, `consent_lost`).
pub const WEBRTC_LOST: &str = "callgate_webrtc_transport_lost_total";
/// 20 ms frames libopus concealed (PLC) on WebRTC calls.
pub const WEBRTC_PLC_FRAMES: &str = "callgate_webrtc_plc_frames_total";
/// Datagrams the shared WebRTC socket dropped, by `kind` (`stun`, `dtls`,
/// `rtp`, `other`) and `why` (`no_session`, `too_many_addrs`, `inbox_full`).
pub const WEBRTC_DROPPED: &str = "callgate_webrtc_datagrams_dropped_total";
/// The three session counters (`reconcile`), set only while known.
pub const LEDGER_OPEN: &str = "callgate_ledger_open_sessions";
pub const RUNTIME_ACTIVE: &str = "callgate_runtime_active_sessions";
pub const ROUTING_REPORTED: &str = "callgate_routing_reported_sessions";
/// 1 while a counter's reading is fresh, 0 while it is unknown, by `counter`.
pub const COUNTER_KNOWN: &str = "callgate_counter_known";
/// Age of a counter's last reading, by `counter`.
pub const COUNTER_AGE: &str = "callgate_counter_age_seconds";
/// Sessions by which the counters disagree, by `direction`.
pub const DIVERGENCE: &str = "callgate_counter_divergence_sessions";
/// How long the current divergence episode has lasted (0: none), by `direction`.
pub const DIVERGENCE_AGE: &str = "callgate_counter_divergence_age_seconds";
/// Reconciliation receipts written, by `direction`.
pub const RECONCILIATIONS: &str = "callgate_reconciliation_receipts_total";
/// Reconciliation receipt writes that failed (retried next tick).
pub const RECONCILIATION_FAILURES: &str = "callgate_reconciliation_receipt_failures_total";
/// Committed pressure (`admission::pressure`) in sessions.
pub const PRESSURE: &str = "callgate_committed_pressure_sessions";
/// Pressure components, by `component` (`active`, `speaking`,
/// `delegating`, `recovering`), unweighted.
pub const PRESSURE_COMPONENT: &str = "callgate_pressure_component_sessions";
/// `[pressure].weights_version` of the weights in use.
pub const PRESSURE_WEIGHTS_VERSION: &str = "callgate_pressure_weights_version";
/// HAProxy agent checks answered, by the `state` reported (`ready`, `drain`, `maint`).
pub const AGENT_CHECKS: &str = "callgate_agent_checks_total";
/// Agent-check connections that got no answer, by `reason` (`busy`: over
/// `[agent].max_connections`; `timeout`; `io`).
pub const AGENT_CHECK_FAILURES: &str = "callgate_agent_check_failures_total";
/// Rows retention deleted, by `table` (`call_turns_and_slots`,
/// `call_events`, `call_ledger`, `admission_rejections`).
pub const RETENTION_DELETED: &str = "callgate_retention_deleted_rows_total";
/// Retention passes that failed (Postgres errors); retried next interval.
pub const RETENTION_FAILURES: &str = "callgate_retention_failures_total";
/// Heartbeats this instance attempted, by `result` (`recorded`,
/// `superseded`: another process holds the instance name, `error`,
/// `timeout`).
pub const OWNER_HEARTBEATS: &str = "callgate_owner_heartbeats_total";
/// Age of this instance's last landed heartbeat, seconds (set each tick).
pub const OWNER_BEAT_AGE: &str = "callgate_owner_heartbeat_age_seconds";
/// Ledger rows this instance closed for an owner that is gone, by `reason`
/// (`owner_lost`: another instance outlived its lease; `instance_restart`:
/// this instance name's rows from before this start). Writes such an owner
/// still sends are refused by the epoch fence and counted by the store as
/// `callgate_store_writes_total{result="fenced"}`.
pub const SESSIONS_RECLAIMED: &str = "callgate_sessions_reclaimed_total";
/// Calls running here that ended `owner_fenced`: another instance closed
/// their records while this one's beats were not landing (paused, cut off)
/// or another process took this instance name.
pub const OWNER_FENCED_CALLS: &str = "callgate_owner_fenced_calls_total";
/// Twilio voice webhooks answered, by `outcome`: `connect` (admitted: a
/// `<Connect><Stream>` on a reservation), `refused` (the overflow prompt
/// and `<Dial>`, no stream), `bad_signature`, `bad_request`.
pub const TWILIO_WEBHOOKS: &str = "callgate_twilio_webhooks_total";
/// Webhook reservations by `outcome`: `claimed` (the stream came) or
/// `expired` (it did not within `twilio.webhook.reservation_ms`; released).
pub const TWILIO_RESERVATIONS: &str = "callgate_twilio_reservations_total";
/// Twilio call-status callbacks, by `result`: `recorded` (beside a
/// receipt), `no_receipt`, `not_final` (ignored), `bad_signature`,
/// `bad_request`, `unavailable` (Postgres did not answer).
pub const TWILIO_STATUS_CALLBACKS: &str = "callgate_twilio_status_callbacks_total";
/// `GET /v1/sessions/{id}` answers, by `status` (`200`, `400`, `404`, `503`).
pub const SESSION_READS: &str = "callgate_session_reads_total";

/// The gate's refusal reasons (`admission::RejectReason::as_str`, less
/// `internal`, a bug and never counted).
const GATE_REASONS: [&str; 7] = [
    "at_capacity",
    "queue_full",
    "queue_timeout",
    "draining",
    "dependency_down",
    "partner_quota",
    "instance_overloaded",
];

/// Registers at 0 the counters `deploy/prometheus/callgate-rules.yml`
/// alerts on, with every label value they can take (for the ingresses
/// given), so a scrape shows them before the first event: an alert on
/// `increase()` then sees the first refusal, stall or failed cleanup (a
/// series born at 1 hides it), and an absent series means a broken scrape,
/// not a quiet instance. About 70 series.
pub fn prime(ingresses: &[&'static str]) {
    use crate::end::{Culprit, Provider};
    for reason in GATE_REASONS {
        for ingress in ingresses {
            metrics::counter!(REJECTED, "reason" => reason, "ingress" => *ingress).absolute(0);
        }
        for heard in ["true", "false"] {
            metrics::counter!(OVERFLOWED, "reason" => reason, "prompt_heard" => heard).absolute(0);
        }
    }
    let culprits = [
        Culprit::Dialog,
        Culprit::Tool,
        Culprit::Tts,
        Culprit::Stt,
        Culprit::CarrierMedia,
        Culprit::Instance,
    ];
    for culprit in culprits.map(Culprit::as_str) {
        for action in ["apology", "transfer", "end"] {
            metrics::counter!(STALLS, "culprit" => culprit, "action" => action).absolute(0);
        }
    }
    for provider in [Provider::Stt, Provider::Tts, Provider::Dialog].map(Provider::label) {
        for why in ["down", "capacity"] {
            metrics::counter!(RECONNECT_ATTEMPTS, "provider" => provider, "why" => why).absolute(0);
        }
        metrics::counter!(RECONNECTED, "provider" => provider).absolute(0);
    }
    for status in ["completed", "failed"] {
        metrics::counter!(CLEANUPS, "status" => status).absolute(0);
    }
    for reason in ["owner_lost", "instance_restart"] {
        metrics::counter!(SESSIONS_RECLAIMED, "reason" => reason).absolute(0);
    }
    metrics::counter!(OWNER_FENCED_CALLS).absolute(0);
    metrics::counter!(WRITES_LOST).absolute(0);
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder once and returns its handle. Safe to
/// call from several servers in one process (tests): they share it.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let seconds = [
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 60.0, 300.0,
                1800.0,
            ];
            // Exact names match before suffixes (the exporter sorts Full first).
            let own = [
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1,
            ];
            let stop = [0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(TURN_OWN.to_string()), &own)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(BARGE_IN_STOP.to_string()), &stop)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), &seconds)
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            match builder.install_recorder() {
                Ok(h) => h,
                // Another recorder is already installed (an embedding
                // program's): keep a private one so /metrics still renders.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
}
