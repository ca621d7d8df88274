//! The call's metrics: each [`Report`] the call core makes becomes its
//! counter or histogram here. The core decides and counts; only this
//! module (in the async shell) touches the metrics registry for it.

use crate::call::core::{Report, Stale};
use crate::metrics as m;

/// Records one report of the call core for a call that came in on
/// `ingress` (the family the latency histograms are labelled by).
pub fn record(report: Report, ingress: &'static str) {
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
        Report::FirstAudio(d) => {
            metrics::histogram!(m::FIRST_AUDIO, "ingress" => ingress).record(d.as_secs_f64());
        }
        Report::ReplyLatency(d) => {
            metrics::histogram!(m::REPLY_LATENCY, "ingress" => ingress).record(d.as_secs_f64());
        }
        Report::TurnOwn { us } => metrics::histogram!(m::TURN_OWN).record(us as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;
    use crate::call::watchdog::{Action, Clock};
    use crate::end::{Culprit, Provider};

    #[test]
    fn every_report_lands_on_its_metric_with_its_labels() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let reports = [
            Report::MediaIn,
            Report::ProtocolError("bad_json"),
            Report::Stall {
                culprit: Culprit::Tts,
                action: Action::Apologize(Clock::Reply),
            },
            Report::BargeIn,
            Report::BargeInPause,
            Report::FalseBargeIn,
            Report::BargeInStop(Duration::from_millis(90)),
            Report::Stale(Stale::Dialog),
            Report::Stale(Stale::TtsAudio),
            Report::Reconnecting {
                provider: Provider::Stt,
                capacity: true,
            },
            Report::Reconnected(Provider::Dialog),
            Report::FirstAudio(Duration::from_millis(700)),
            Report::ReplyLatency(Duration::from_millis(800)),
            Report::TurnOwn { us: 4_000 },
        ];
        metrics::with_local_recorder(&recorder, || {
            reports.into_iter().for_each(|r| record(r, "sip"));
        });
        let text = handle.render();
        for line in [
            "callgate_media_frames_received_total 1",
            "callgate_carrier_protocol_errors_total{kind=\"bad_json\"} 1",
            "callgate_call_stalls_total{culprit=\"tts\",action=\"apology\"} 1",
            "callgate_barge_ins_total 1",
            "callgate_barge_in_pauses_total 1",
            "callgate_false_barge_ins_total 1",
            "callgate_barge_in_stop_seconds_count 1",
            "callgate_stale_events_dropped_total{kind=\"dialog\"} 1",
            "callgate_stale_events_dropped_total{kind=\"tts_audio\"} 1",
            "callgate_provider_reconnect_attempts_total{provider=\"stt\",why=\"capacity\"} 1",
            "callgate_provider_reconnected_total{provider=\"dialog\"} 1",
            "callgate_first_audio_seconds_count{ingress=\"sip\"} 1",
            "callgate_reply_latency_seconds_count{ingress=\"sip\"} 1",
            "callgate_turn_own_seconds_count 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
