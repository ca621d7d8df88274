//! The call's metrics: each [`Report`] the call core makes becomes its
//! counter or histogram here. The core decides and counts; only this
//! module (in the async shell) touches the metrics registry for it.

use crate::call::core::{Report, Stale};
use crate::metrics as m;

/// Records one report of the call core.
pub fn record(report: Report) {
    match report {
        Report::MediaIn => metrics::counter!(m::MEDIA_IN).increment(1),
        Report::ProtocolError(kind) => {
            metrics::counter!(m::PROTOCOL_ERRORS, "kind" => kind).increment(1);
        }
        Report::Stall { culprit, action } => {
            let (what, label) = (culprit.as_str(), action.label());
            metrics::counter!(m::STALLS, "culprit" => what, "action" => label).increment(1);
        }
        Report::BargeIn => metrics::counter!(m::BARGE_INS).increment(1),
        Report::BargeInPause => metrics::counter!(m::BARGE_IN_PAUSES).increment(1),
        Report::FalseBargeIn => metrics::counter!(m::FALSE_BARGE_INS).increment(1),
        Report::BargeInStop(d) => metrics::histogram!(m::BARGE_IN_STOP).record(d.as_secs_f64()),
        Report::Stale(stale) => {
            let kind = match stale {
                Stale::Dialog => "dialog",
                Stale::TtsAudio => "tts_audio",
            };
            metrics::counter!(m::STALE_DROPPED, "kind" => kind).increment(1);
        }
        Report::Reconnecting { provider, capacity } => {
            let why = if capacity { "capacity" } else { "down" };
            let p = provider.label();
            metrics::counter!(m::RECONNECT_ATTEMPTS, "provider" => p, "why" => why).increment(1);
        }
        Report::Reconnected(provider) => {
            metrics::counter!(m::RECONNECTED, "provider" => provider.label()).increment(1);
        }
        Report::FirstAudio(d) => metrics::histogram!(m::FIRST_AUDIO).record(d.as_secs_f64()),
        Report::ReplyLatency(d) => metrics::histogram!(m::REPLY_LATENCY).record(d.as_secs_f64()),
        Report::TurnOwn { us } => metrics::histogram!(m::TURN_OWN).record(us as f64 / 1e6),
    }
}
